// Compilations: compile a model (tuned records or not, per-node schedule overrides, shapes), list
// the compilations (polled while any runs), download an artifact, open its manifest and profile.

import { download, getJSON, postJSON } from "../api.js";
import {
  busy, checkbox, clear, field, fmtBytes, fmtDate, h, hashParams, modelSelect, modelsForm, pairsEditor, shapesEditor,
  shortId, showError, stateBadge, statusLine, table,
} from "../ui.js";

const POLL_MS = 2000;
const ACTIVE = new Set(["queued", "running"]);

function overridesEditor() {
  return pairsEditor({
    legend: "Schedule overrides (optional)",
    nameLabel: "ONNX node or kernel",
    valueLabel: "Schedule",
    valueHint: "record:ID (see Records), or a schedule trace as JSON",
    addLabel: "Add an override",
    parse: (name, text) => {
      if (text.startsWith("{")) {
        try {
          return [name, JSON.parse(text)];
        } catch (e) {
          throw new Error(`override of ${name}: the trace is not JSON (${e.message})`);
        }
      }
      if (!/^record:\d+$/.test(text)) throw new Error(`override of ${name}: give record:ID or a trace object, not "${text}"`);
      return [name, text];
    },
  });
}

function compileForm(models, preselect, onCreated) {
  const select = modelSelect(models, preselect);
  const tuned = checkbox("Use the best tuning records", true);
  const target = h("input", { type: "text", value: "host", pattern: "[A-Za-z0-9_.\\-]+", required: true });
  const optLevel = h("select", {}, [3, 2, 1, 0].map((n) => h("option", { value: n }, String(n))));
  const shapes = shapesEditor("Input shapes (default: those bound at upload)");
  const overrides = overridesEditor();
  const result = h("div");
  const submit = h("button", { type: "submit" }, "Compile");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "compile-title" },
    h("h2", { id: "compile-title" }, "Compile a model"),
    h("div", { class: "row" }, field("Model", select), field("Target", target, "host, or an LLVM CPU name"), field("Opt level", optLevel)),
    tuned.el,
    shapes.el,
    overrides.el,
    submit,
    result,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clear(result);
    try {
      const body = { model_id: select.value, use_tuned: tuned.input.checked, target: target.value.trim(), opt_level: Number(optLevel.value) };
      const bound = shapes.value();
      if (bound) body.shapes = bound;
      const pinned = overrides.value();
      if (pinned) body.overrides = pinned;
      result.append(statusLine("Checking the request…"));
      const job = await busy(submit, () => postJSON("v1/compilations", body));
      result.replaceChildren(statusLine(`Compilation ${shortId(job.id)} is ${job.state}.`));
      onCreated(job);
    } catch (error) {
      showError(result, error, "Compilation refused");
    }
  });
  return form;
}

/** A button that downloads the artifact (fetched with the key, saved through a Blob URL). */
export function downloadButton(artifactId, resultEl) {
  const button = h("button", { type: "button", class: "small", dataset: { artifact: artifactId } }, "Download");
  button.addEventListener("click", async () => {
    resultEl.replaceChildren(statusLine("Downloading…"));
    try {
      const file = await busy(button, () => download(`v1/artifacts/${artifactId}`, `${artifactId}.temper`));
      const verdict = !file.expectedSha256
        ? "the server sent no checksum"
        : file.sha256 === file.expectedSha256
          ? "sha256 matches the server's"
          : `sha256 MISMATCH: the server said ${file.expectedSha256}`;
      resultEl.replaceChildren(
        h(
          "p",
          { class: "status", role: "status", dataset: { sha256: file.sha256 } },
          `Saved ${file.filename} (${fmtBytes(file.blob.size)}); sha256 ${file.sha256}: ${verdict}.`,
        ),
      );
    } catch (error) {
      showError(resultEl, error, "Download failed");
    }
  });
  return button;
}

function compilationsTable(jobs, names, downloads) {
  return table({
    caption: "Compilations, newest first",
    empty: "No compilations yet.",
    rows: jobs,
    rowAttrs: (j) => ({ dataset: { compilationId: j.id } }),
    columns: [
      { label: "Compilation", cell: (j) => h("code", {}, shortId(j.id)) },
      { label: "Model", cell: (j) => (names.get(j.model_id) ? h("a", { href: `#/models/${j.model_id}` }, names.get(j.model_id)) : shortId(j.model_id)) },
      { label: "State", cell: (j) => stateBadge(j.state) },
      {
        label: "Options",
        cell: (j) =>
          [
            j.params.use_tuned ? "tuned" : "default schedules",
            `target ${j.params.target}`,
            `O${j.params.opt_level}`,
            Object.keys(j.params.overrides || {}).length ? `${Object.keys(j.params.overrides).length} override(s)` : "",
          ].filter(Boolean).join(", "),
      },
      { label: "Finished", cell: (j) => fmtDate(j.finished_at) },
      {
        label: "Artifact",
        cell: (j) => {
          if (j.error) return h("span", { class: "error-text" }, `Error: ${j.error}`);
          if (!j.artifact_id) return "–";
          if (!downloads.has(j.artifact_id)) {
            // kept across redraws of the table, so a download's outcome stays on screen
            const result = h("div", { class: "download-result" });
            downloads.set(j.artifact_id, [downloadButton(j.artifact_id, result), result]);
          }
          const [button, result] = downloads.get(j.artifact_id);
          return h("div", {}, h("a", { href: `#/artifacts/${j.artifact_id}` }, `Manifest and profile of ${shortId(j.artifact_id)}`), " ", button, result);
        },
      },
    ],
  });
}

export function render(container) {
  const params = hashParams();
  const formSlot = h("div");
  const listSlot = h("div", { id: "compilations-list" });
  const errorSlot = h("div");
  container.append(
    h("h1", {}, "Compilations"),
    formSlot,
    h("section", { "aria-labelledby": "compilations-title" }, h("h2", { id: "compilations-title" }, "All compilations"), errorSlot, listSlot),
  );
  let names = new Map();
  let timer = null;
  let stopped = false;
  let shown = "";
  const downloads = new Map(); // artifact id -> [download button, its result line]

  const refresh = async () => {
    if (stopped) return;
    clearTimeout(timer);
    let active = false;
    try {
      const jobs = await getJSON("v1/compilations");
      if (stopped) return;
      const json = JSON.stringify(jobs);
      if (json !== shown) listSlot.replaceChildren(compilationsTable(jobs, names, downloads)); // unchanged: focus stays
      shown = json;
      errorSlot.replaceChildren();
      active = jobs.some((j) => ACTIVE.has(j.state));
    } catch (error) {
      showError(errorSlot, error, "Could not list the compilations");
      active = true;
    }
    if (active && !stopped) timer = setTimeout(refresh, POLL_MS);
  };

  (async () => {
    listSlot.replaceChildren(statusLine("Loading…"));
    names = await modelsForm(formSlot, (models) => compileForm(models, params.model, () => refresh()));
    refresh();
  })();

  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
