// Records: the targets with tuning records, the records per target and workload (optionally only a
// model's kernels, optionally only the best ones, with times alone and inside the model), export
// (any key) and import (admin keys) of the JSON-lines records file.

import { download, getJSON, request } from "../api.js";
import { busy, checkbox, fmtDate, fmtFlops, fmtSeconds, field, h, showError, shortId, statusLine, table } from "../ui.js";

function exportButton(label, target, resultEl) {
  const button = h("button", { type: "button", class: "secondary small" }, label);
  button.addEventListener("click", async () => {
    try {
      const file = await busy(button, () => download("v1/records/export", "records.jsonl", { target }));
      const lines = (await file.blob.text()).split("\n").filter(Boolean).length;
      resultEl.replaceChildren(statusLine(`Saved ${file.filename}: ${lines} line(s)${target ? ` of target ${target}` : ""}.`));
    } catch (error) {
      showError(resultEl, error, "Export failed");
    }
  });
  return button;
}

function targetsTable(targets, onShow, resultEl) {
  return table({
    caption: "Targets with tuning records",
    empty: "No records yet: tune a model first.",
    rows: targets,
    columns: [
      { label: "Target key", cell: (t) => h("code", {}, t.key) },
      { label: "Records", numeric: true, cell: (t) => String(t.records) },
      { label: "Description", cell: (t) => t.description },
      {
        label: "Actions",
        cell: (t) => [h("button", { type: "button", class: "small", onclick: () => onShow(t.key) }, "Show records"), " ", exportButton("Export", t.key, resultEl)],
      },
    ],
  });
}

function recordsTable(records) {
  // grouped by workload: one header row per kernel workload, its records below (fastest first)
  const groups = new Map();
  for (const r of records) {
    const key = `${r.target_key}|${r.workload_key}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  if (!records.length) return h("p", { class: "empty" }, "No records match.");
  const head = h(
    "tr",
    {},
    ["Record", "Anchor op", "FLOPs", "Alone", "GFLOP/s", "In the model", "Verification", "Created"].map((c) => h("th", { scope: "col" }, c)),
  );
  const body = [];
  for (const rows of groups.values()) {
    const first = rows[0];
    body.push(
      h(
        "tr",
        { class: "group-row" },
        h("th", { scope: "rowgroup", colspan: "8" }, `${first.name} · workload ${first.workload_key} · target ${first.target_key} · ${rows.length} record(s)`),
      ),
    );
    for (const r of rows) {
      body.push(
        h(
          "tr",
          { dataset: { recordId: String(r.id) } },
          h("td", {}, h("code", {}, `record:${r.id}`)),
          h("td", {}, r.anchor || "–"),
          h("td", { class: "num" }, fmtFlops(r.flops)),
          h("td", { class: "num" }, r.seconds === null ? `failed${r.error_kind ? ` (${r.error_kind})` : ""}` : fmtSeconds(r.seconds)),
          h("td", { class: "num" }, r.seconds ? (r.flops / r.seconds / 1e9).toFixed(1) : "–"),
          h("td", { class: "num" }, r.model_secs === null || r.model_secs === undefined ? "not timed" : fmtSeconds(r.model_secs)),
          h("td", {}, r.verification),
          h("td", {}, fmtDate(r.created)),
        ),
      );
    }
  }
  return h(
    "div",
    { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Tuning records" },
    h("table", {}, h("caption", {}, `${records.length} record(s) in ${groups.size} workload(s)`), h("thead", {}, head), h("tbody", {}, body)),
  );
}

function importForm(onImported) {
  const file = h("input", { type: "file", accept: ".jsonl,.json,application/x-ndjson,text/plain" });
  const result = h("div");
  const submit = h("button", { type: "submit" }, "Import");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "import-title" },
    h("h2", { id: "import-title" }, "Import records"),
    h("p", { class: "muted" }, "Needs an admin key. All lines are imported or none; imported records are used once verified on this machine."),
    field("Records file (JSON lines, as exported)", file),
    submit,
    result,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    result.replaceChildren();
    if (!file.files[0]) {
      showError(result, new Error("choose a records file first"), "Import");
      return;
    }
    const body = new FormData();
    body.append("file", file.files[0]);
    try {
      const summary = await busy(submit, async () => (await request("v1/records/import", { method: "POST", body })).json());
      result.replaceChildren(
        statusLine(`Imported: ${summary.records_added} record(s) added in ${summary.workloads_added} new workload(s); ${summary.records_skipped} skipped (already there).`),
      );
      form.reset();
      onImported();
    } catch (error) {
      showError(result, error, "Import refused");
    }
  });
  return form;
}

export function render(container) {
  const targetsSlot = h("div");
  const exportResult = h("div");
  const recordsSlot = h("div", { id: "records-list" });
  const targetSelect = h("select", {}, h("option", { value: "" }, "all targets"));
  const modelSelect = h("select", {}, h("option", { value: "" }, "all models"));
  const best = checkbox("Only the best record per kernel (what compiles use)", true);
  const limit = h("input", { type: "number", min: "1", max: "10000", value: 200 });
  const show = h("button", { type: "submit" }, "List records");
  const filters = h(
    "form",
    { class: "card", "aria-labelledby": "records-title" },
    h("h2", { id: "records-title" }, "Records"),
    h("div", { class: "row" }, field("Target", targetSelect), field("Model", modelSelect, "only this model's kernels"), field("At most", limit)),
    best.el,
    show,
    recordsSlot,
  );

  const loadRecords = async () => {
    recordsSlot.replaceChildren(statusLine("Loading records…"));
    try {
      const records = await busy(show, () =>
        getJSON("v1/records", { target: targetSelect.value, model_id: modelSelect.value, best: best.input.checked, limit: limit.value }),
      );
      recordsSlot.replaceChildren(recordsTable(records));
    } catch (error) {
      showError(recordsSlot, error, "Could not list records");
    }
  };
  filters.addEventListener("submit", (e) => {
    e.preventDefault();
    loadRecords();
  });

  const loadTargets = async () => {
    try {
      const targets = await getJSON("v1/records/targets");
      targetsSlot.replaceChildren(
        targetsTable(
          targets,
          (key) => {
            targetSelect.value = key;
            loadRecords();
            filters.scrollIntoView();
          },
          exportResult,
        ),
      );
      const chosen = targetSelect.value;
      targetSelect.replaceChildren(h("option", { value: "" }, "all targets"), targets.map((t) => h("option", { value: t.key, selected: t.key === chosen }, t.key)));
    } catch (error) {
      showError(targetsSlot, error, "Could not list the targets");
    }
  };

  container.append(
    h("h1", {}, "Tuning records"),
    h(
      "section",
      { class: "card", "aria-labelledby": "targets-title" },
      h("h2", { id: "targets-title" }, "Targets"),
      targetsSlot,
      h("p", {}, exportButton("Export all records", undefined, exportResult)),
      exportResult,
    ),
    filters,
    importForm(() => {
      loadTargets();
      loadRecords();
    }),
  );

  (async () => {
    targetsSlot.replaceChildren(statusLine("Loading…"));
    try {
      const models = await getJSON("v1/models");
      modelSelect.append(...models.map((m) => h("option", { value: m.id }, `${m.name} (${shortId(m.id)})`)));
    } catch (error) {
      showError(recordsSlot, error, "Could not list the models");
    }
    await loadTargets();
    loadRecords();
  })();
}
