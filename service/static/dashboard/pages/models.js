// Models: upload an ONNX file (drag and drop or the file picker, with shapes for dynamic inputs),
// list the models with their tuning tasks (kernels, FLOPs, weight), delete.

import { getJSON, request } from "../api.js";
import {
  busy, clear, facts, field, fmtBytes, fmtDate, fmtFlops, fmtShape, h, shapesEditor, shortId, showError,
  statusLine, table,
} from "../ui.js";

const tensors = (list) => list.map((t) => `${t.name} ${fmtShape(t.shape)} ${t.dtype}`).join("; ") || "–";

function uploadForm(onUploaded) {
  let chosen = null;
  const fileInput = h("input", { type: "file", accept: ".onnx,application/octet-stream", name: "file" });
  const chosenText = h("p", { class: "chosen", "aria-live": "polite" }, "No file chosen.");
  const choose = (file) => {
    chosen = file || null;
    chosenText.textContent = chosen ? `Chosen: ${chosen.name} (${fmtBytes(chosen.size)})` : "No file chosen.";
  };
  fileInput.addEventListener("change", () => choose(fileInput.files[0]));

  const drop = h(
    "div",
    { class: "drop-zone", dataset: { testid: "drop-zone" } },
    h("p", {}, "Drop an ONNX file here, or choose one:"),
    field("ONNX model file", fileInput),
    chosenText,
  );
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("dragging");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("dragging"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("dragging");
    choose(e.dataTransfer.files[0]);
  });

  const nameInput = h("input", { type: "text", name: "name", maxlength: "255", placeholder: "default: the file name" });
  const shapes = shapesEditor();
  const result = h("div", { class: "result" });
  const submit = h("button", { type: "submit" }, "Upload");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "upload-title" },
    h("h2", { id: "upload-title" }, "Upload a model"),
    drop,
    field("Name (optional)", nameInput),
    shapes.el,
    submit,
    result,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clear(result);
    if (!chosen) {
      showError(result, new Error("choose an ONNX file first"), "Upload");
      fileInput.focus();
      return;
    }
    let shapeValue;
    try {
      shapeValue = shapes.value();
    } catch (error) {
      showError(result, error, "Upload");
      return;
    }
    const body = new FormData();
    body.append("file", new File([chosen], chosen.name, { type: "application/octet-stream" }));
    if (nameInput.value.trim()) body.append("name", nameInput.value.trim());
    if (shapeValue) body.append("shapes", JSON.stringify(shapeValue));
    result.append(statusLine(`Uploading and checking ${chosen.name}…`));
    try {
      const model = await busy(submit, async () => (await request("v1/models", { method: "POST", body })).json());
      result.replaceChildren(statusLine(`Uploaded ${model.name} (${model.tasks.length} tasks).`));
      form.reset();
      choose(null);
      onUploaded(model);
    } catch (error) {
      showError(result, error, "Upload refused");
    }
  });
  return form;
}

function tasksTable(model) {
  return table({
    caption: `Tuning tasks of ${model.name}`,
    empty: model.unbound.length ? "No tasks until the dynamic inputs have shapes." : "No tasks.",
    rows: model.tasks,
    columns: [
      { label: "Kernel", cell: (t) => h("a", { href: `#/models/${model.id}/kernel/${encodeURIComponent(t.name)}` }, t.name) },
      { label: "Workload key", cell: (t) => h("code", {}, t.key) },
      { label: "Weight", numeric: true, cell: (t) => String(t.weight) },
      { label: "FLOPs (one call)", numeric: true, cell: (t) => fmtFlops(t.flops) },
      { label: "FLOPs × weight", numeric: true, cell: (t) => fmtFlops(t.flops * t.weight) },
    ],
  });
}

function modelCard(model, onDeleted) {
  const actions = h("div", { class: "actions" });
  const message = h("div");
  const deleteButton = h("button", { type: "button", class: "danger" }, "Delete");
  const askDelete = () => {
    const yes = h("button", { type: "button", class: "danger" }, `Yes, delete ${model.name}`);
    const no = h("button", { type: "button", class: "secondary" }, "Keep it");
    const question = h("p", { role: "alert" }, `Delete ${model.name}? Its jobs and artifacts stay. `, yes, " ", no);
    no.addEventListener("click", () => {
      question.remove();
      deleteButton.hidden = false;
      deleteButton.focus();
    });
    yes.addEventListener("click", async () => {
      try {
        await busy(yes, () => request(`v1/models/${model.id}`, { method: "DELETE" }));
        onDeleted(model);
      } catch (error) {
        showError(message, error, "Delete failed");
      }
    });
    deleteButton.hidden = true;
    actions.append(question);
    no.focus();
  };
  deleteButton.addEventListener("click", askDelete);
  actions.append(
    h("a", { class: "button", href: `#/models/${model.id}` }, "Graph and kernels"),
    h("a", { class: "button secondary", href: `#/tuning?model=${model.id}` }, "Tune"),
    h("a", { class: "button secondary", href: `#/compilations?model=${model.id}` }, "Compile"),
    deleteButton,
  );
  const unbound = model.unbound.length
    ? h("span", { class: "warning" }, `Warning: dynamic dims not bound for ${model.unbound.join(", ")}; give shapes when tuning or compiling.`)
    : null;
  return h(
    "article",
    { class: "card model", dataset: { modelId: model.id }, "aria-labelledby": `model-${model.id}` },
    h("h3", { id: `model-${model.id}` }, h("a", { href: `#/models/${model.id}` }, model.name), " ", h("small", { class: "muted" }, shortId(model.id))),
    facts([
      ["Inputs", tensors(model.inputs)],
      ["Outputs", tensors(model.outputs)],
      ["Bound shapes", Object.keys(model.shapes).length ? JSON.stringify(model.shapes) : "as declared"],
      ["Unbound", unbound],
      ["Ops", Object.entries(model.op_counts).map(([op, n]) => `${op} ×${n}`).join(", ")],
      ["FLOPs", `${fmtFlops(model.flops)} per inference`],
      ["Size", fmtBytes(model.size)],
      ["sha256", h("code", { class: "hash" }, model.sha256)],
      ["Uploaded", fmtDate(model.created_at)],
    ]),
    h("details", { class: "tasks" }, h("summary", {}, `${model.tasks.length} tasks (kernels)`), tasksTable(model)),
    actions,
    message,
  );
}

export function render(container) {
  const list = h("section", { "aria-labelledby": "models-list-title" });
  const listBody = h("div", { id: "models-list" });
  list.append(h("h2", { id: "models-list-title" }, "Models"), listBody);

  const load = async () => {
    listBody.replaceChildren(statusLine("Loading models…"));
    try {
      const models = await getJSON("v1/models");
      listBody.replaceChildren(
        models.length
          ? h("div", { class: "cards" }, models.map((m) => modelCard(m, load)))
          : h("p", { class: "empty" }, "No models yet: upload one above."),
      );
      listBody.dataset.count = String(models.length);
    } catch (error) {
      showError(listBody, error, "Could not list the models");
    }
  };

  container.append(h("h1", {}, "Models"), uploadForm(load), list);
  load();
}
