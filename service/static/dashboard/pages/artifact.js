// One artifact: download it, read its manifest (target, passes, kernels and where each schedule
// came from) and profile it: the time of every kernel as bars, onnxruntime's per-op times beside.

import { getJSON } from "../api.js";
import { facts, fmtDuration, fmtFlops, fmtSeconds, fmtShape, h, showError, statusLine, table } from "../ui.js";
import { downloadButton } from "./compilations.js";

function scheduleText(s) {
  if (!s) return "–";
  if (s.source === "record") return `record ${s.record_id} (measured ${fmtSeconds(s.measured_s)})`;
  if (s.source === "default") return `default${s.rule ? ` (rule ${s.rule})` : ""}`;
  return [s.source, s.record_id !== undefined ? `record ${s.record_id}` : "", s.trace_sha256 ? `trace ${s.trace_sha256.slice(0, 12)}` : ""].filter(Boolean).join(", ");
}

function manifestView(m) {
  const target = m.target || {};
  return h(
    "div",
    {},
    facts([
      ["Target", `${target.cpu || "?"} (${target.key || "?"}), ${target.vector_width || "?"}-bit vectors, ${target.cores ?? "?"} cores`],
      ["Inputs", (m.inputs || []).map((t) => `${t.name} ${fmtShape(t.shape)} ${t.dtype}`).join("; ")],
      ["Outputs", (m.outputs || []).map((t) => `${t.name} ${fmtShape(t.shape)} ${t.dtype}`).join("; ")],
      ["Opt level", m.opt_level],
      ["ONNX opset", m.onnx_opset],
      ["Passes", (m.passes || []).join(", ")],
      ["Compile time", m.compile_seconds !== undefined ? fmtDuration(m.compile_seconds) : null],
      ["temper version", m.temper_version],
      ["Created", m.created],
    ]),
    table({
      caption: "Kernels and the source of each schedule",
      rows: m.kernels || [],
      columns: [
        { label: "Kernel", cell: (k) => h("code", {}, k.name) },
        { label: "ONNX nodes", cell: (k) => [...new Set(k.nodes || [])].join(", ") },
        { label: "FLOPs", numeric: true, cell: (k) => fmtFlops(k.flops) },
        { label: "Schedule", cell: (k) => scheduleText(k.schedule) },
      ],
    }),
    h("details", {}, h("summary", {}, "The whole manifest (JSON)"), h("pre", { class: "code", tabindex: "0" }, JSON.stringify(m, null, 2))),
  );
}

/** Horizontal bars: rows of {label, detail, seconds, share}; the numbers are written out too. */
function bars(caption, rows) {
  const max = Math.max(...rows.map((r) => r.seconds), 0) || 1;
  return h(
    "figure",
    { class: "bars" },
    h("figcaption", {}, caption),
    h(
      "ol",
      { class: "bar-list" },
      rows.map((r) =>
        h(
          "li",
          {},
          h("span", { class: "bar-label" }, r.label, r.detail ? h("small", { class: "muted" }, ` ${r.detail}`) : null),
          h("span", { class: "bar-track", "aria-hidden": "true" }, h("span", { class: "bar", style: `width: ${((100 * r.seconds) / max).toFixed(1)}%` })),
          h("span", { class: "bar-value" }, `${fmtSeconds(r.seconds)}${r.share !== undefined && r.share !== null ? ` (${(100 * r.share).toFixed(1)}%)` : ""}`),
        ),
      ),
    ),
  );
}

function profileView(profile) {
  const kernels = (profile.kernels || []).map((k) => ({
    label: `${k.step}. ${k.kernel}`,
    detail: (k.nodes || []).length ? `nodes: ${[...new Set(k.nodes)].join(", ")}` : "",
    seconds: k.median,
    share: k.share,
  }));
  const ours = bars(`temper: ${kernels.length} kernel calls, ${fmtSeconds(profile.total_s)} in all (median per call)`, kernels);
  const ort = profile.onnxruntime;
  const theirs = ort
    ? bars(
        `onnxruntime: ${(ort.ops || []).length} ops, ${fmtSeconds(ort.total_s)} in all`,
        [...(ort.ops || [])]
          .sort((a, b) => b.seconds - a.seconds)
          .map((o) => ({ label: o.node, detail: o.op, seconds: o.seconds, share: ort.total_s ? o.seconds / ort.total_s : null })),
      )
    : h("p", { class: "muted" }, "No onnxruntime profile for this artifact.");
  return h("div", { class: "two-columns profile" }, ours, theirs);
}

export function render(container, { id }) {
  const downloadResult = h("div");
  const manifestSlot = h("div", {}, statusLine("Loading the manifest…"));
  const profileSlot = h("div");
  const profileButton = h("button", { type: "button" }, "Profile the kernels");
  container.append(
    h("h1", {}, `Artifact ${id.slice(0, 8)}`),
    h("p", {}, h("a", { href: "#/compilations" }, "← Compilations")),
    h("section", { class: "card", "aria-labelledby": "download-title" }, h("h2", { id: "download-title" }, "Download"), h("p", {}, h("code", {}, id), " ", downloadButton(id, downloadResult)), downloadResult),
    h(
      "section",
      { class: "card", "aria-labelledby": "profile-title" },
      h("h2", { id: "profile-title" }, "Time per kernel"),
      h("p", { class: "muted" }, "Runs the artifact on random inputs on the server and times every kernel call (and the model in onnxruntime, when available)."),
      profileButton,
      profileSlot,
    ),
    h("section", { class: "card", "aria-labelledby": "manifest-title" }, h("h2", { id: "manifest-title" }, "Manifest"), manifestSlot),
  );
  profileButton.addEventListener("click", async () => {
    profileButton.disabled = true;
    profileSlot.replaceChildren(statusLine("Profiling…"));
    try {
      profileSlot.replaceChildren(profileView(await getJSON(`v1/artifacts/${id}/profile`)));
    } catch (error) {
      showError(profileSlot, error, "Profile failed");
    } finally {
      profileButton.disabled = false;
    }
  });
  getJSON(`v1/artifacts/${id}/manifest`)
    .then((m) => manifestSlot.replaceChildren(manifestView(m)))
    .catch((error) => showError(manifestSlot, error, "Could not load the manifest"));
}
