// The dashboard's shell: sign in and out, and the hash router that shows one page at a time.
// Routes: #/models, #/models/<id>[/kernel/<name>], #/tuning[/<id>], #/compilations,
// #/artifacts/<id>, #/records. Each page module exports render(container, params) and may return a
// function that stops whatever it started (polling) when the user leaves the page.

import { ApiError, clearKey, describeError, getKey, onUnauthorized, request, setKey } from "./api.js";
import * as artifact from "./pages/artifact.js";
import * as compilations from "./pages/compilations.js";
import * as modelDetail from "./pages/model.js";
import * as models from "./pages/models.js";
import * as records from "./pages/records.js";
import * as tuning from "./pages/tuning.js";

const $ = (id) => document.getElementById(id);

const ROUTES = [
  [/^models\/([0-9a-f]+)(?:\/kernel\/(.+))?$/, modelDetail, "models", (m) => ({ id: m[1], kernel: m[2] && decodeURIComponent(m[2]) })],
  [/^models$/, models, "models", () => ({})],
  [/^tuning(?:\/([0-9a-f]+))?$/, tuning, "tuning", (m) => ({ id: m[1] })],
  [/^compilations$/, compilations, "compilations", () => ({})],
  [/^artifacts\/([0-9a-f]+)$/, artifact, "compilations", (m) => ({ id: m[1] })],
  [/^records$/, records, "records", () => ({})],
];

let leavePage = null;
let signedIn = false;

function showSignIn(message) {
  signedIn = false;
  if (leavePage) leavePage();
  leavePage = null;
  $("page").replaceChildren();
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("sign-in").hidden = false;
  const error = $("sign-in-error");
  error.hidden = !message;
  error.textContent = message || "";
  document.title = "Sign in · temper";
  $("api-key").focus();
}

function showApp() {
  signedIn = true;
  $("sign-in").hidden = true;
  $("sign-in-error").hidden = true;
  $("nav").hidden = false;
  $("sign-out").hidden = false;
  route();
}

async function signIn(event) {
  event.preventDefault();
  const input = $("api-key");
  const key = input.value.trim();
  const button = event.target.querySelector("button[type=submit]");
  if (!key) {
    showSignIn("Enter an API key.");
    return;
  }
  button.disabled = true;
  try {
    await request("v1/models", { key }); // any authenticated route: does the server know this key?
    setKey(key);
    input.value = "";
    if (!location.hash || location.hash === "#" || location.hash === "#/") history.replaceState(null, "", "#/models");
    showApp();
    const heading = $("page").querySelector("h1");
    if (heading) heading.focus(); // the key field is gone: keyboard focus goes to the page's title
  } catch (error) {
    clearKey();
    const why = error instanceof ApiError && error.status === 401 ? "the server refused this key" : "the request failed";
    showSignIn(`Sign-in failed: ${why}: ${describeError(error)}`);
  } finally {
    button.disabled = false;
  }
}

function signOut() {
  clearKey();
  showSignIn("Signed out.");
}

function route() {
  if (!signedIn) return;
  if (leavePage) leavePage();
  leavePage = null;
  const path = location.hash.replace(/^#\/?/, "").split("?")[0];
  const found = ROUTES.map(([re, page, nav, params]) => [re.exec(path), page, nav, params]).find(([m]) => m);
  const container = $("page");
  container.replaceChildren();
  if (!found) {
    location.replace("#/models");
    return;
  }
  const [match, page, nav, params] = found;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === nav) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  try {
    leavePage = page.render(container, params(match)) || null;
  } catch (error) {
    container.textContent = `This page failed to render: ${describeError(error)}`;
  }
  const heading = container.querySelector("h1");
  if (heading) {
    heading.tabIndex = -1;
    document.title = `${heading.textContent} · temper`;
  }
}

onUnauthorized((error) => {
  clearKey();
  showSignIn(`Signed out: ${describeError(error)}`);
});

$("sign-in-form").addEventListener("submit", signIn);
$("sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", () => {
  route();
  const heading = $("page").querySelector("h1");
  if (heading) heading.focus({ preventScroll: false });
});

if (getKey()) showApp();
else showSignIn();
