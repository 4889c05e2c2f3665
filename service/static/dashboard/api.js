// The API client every page shares: the signed-in key (sessionStorage), requests with the bearer
// header, the server's JSON errors ({"error": {"code", "message"}}) as ApiError, downloads as Blobs.
// The key is only ever sent in the Authorization header, never in a URL.

const KEY_NAME = "temper.apiKey";
const unauthorizedListeners = [];

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

export function getKey() {
  return sessionStorage.getItem(KEY_NAME);
}

export function setKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function clearKey() {
  sessionStorage.removeItem(KEY_NAME);
}

/** Call `fn(error)` when a request with the stored key is refused (401: revoked, or signed out). */
export function onUnauthorized(fn) {
  unauthorizedListeners.push(fn);
}

/** A URL under the page's location (the app may be mounted under a path prefix). */
export function apiUrl(path, params) {
  const url = new URL(path, document.baseURI);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  return url;
}

async function errorOf(response) {
  let code = `http_${response.status}`;
  let message = response.statusText || `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message);
}

/**
 * fetch() with the key. Options: method, params (query), json (a body sent as JSON), body (sent as
 * is, e.g. FormData), key (a key to try instead of the stored one). Returns the Response when ok;
 * throws ApiError with the server's code and message otherwise.
 */
export async function request(path, { method = "GET", params, json, body, key } = {}) {
  const headers = { Accept: "application/json" };
  const useKey = key ?? getKey();
  if (useKey) headers.Authorization = `Bearer ${useKey}`;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  let response;
  try {
    response = await fetch(apiUrl(path, params), { method, headers, body, cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "network_error", `the server could not be reached (${e.message})`);
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (error.status === 401 && key === undefined) unauthorizedListeners.forEach((fn) => fn(error));
    throw error;
  }
  return response;
}

export async function getJSON(path, params) {
  return (await request(path, { params })).json();
}

export async function getText(path, params) {
  return (await request(path, { params })).text();
}

export async function postJSON(path, json) {
  return (await request(path, { method: "POST", json })).json();
}

export async function sha256Hex(blob) {
  const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Fetch a file with the key and hand it to the browser as a download through a Blob URL.
 * Returns {blob, filename, sha256 (computed here), expectedSha256 (the X-Content-SHA256 header)}.
 */
export async function download(path, fallbackName, params) {
  const response = await request(path, { params });
  const blob = await response.blob();
  const disposition = response.headers.get("Content-Disposition") || "";
  const match = /filename="?([^";]+)"?/.exec(disposition);
  const filename = match ? match[1] : fallbackName;
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  return {
    blob,
    filename,
    sha256: await sha256Hex(blob),
    expectedSha256: response.headers.get("X-Content-SHA256"),
  };
}

/** A human line for an error: the server's message and code. */
export function describeError(error) {
  if (error instanceof ApiError) {
    return error.status ? `${error.message} (${error.code}, HTTP ${error.status})` : error.message;
  }
  return String(error && error.message ? error.message : error);
}
