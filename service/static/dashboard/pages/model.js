// Model detail: the fused graph as an indented listing (kernels and the ONNX nodes each fused),
// from the "fused" IR stage and the explain JSON; choosing a kernel or a node shows the kernel:
// why it is what it is (explain) and each IR stage of it, highlighted.

import { codeBlock } from "../code.js";
import { getJSON, getText } from "../api.js";
import { checkbox, facts, fmtDate, fmtFlops, fmtSeconds, fmtShape, h, showError, statusLine, table } from "../ui.js";

const STAGES = ["graph", "optimized", "fused", "tir", "scheduled", "llvm", "asm"];
const STAGE_NOTES = {
  graph: "the imported graph",
  optimized: "after the graph passes",
  fused: "the fused group",
  tir: "the loop nest",
  scheduled: "the loop nest as scheduled",
  llvm: "LLVM IR",
  asm: "assembly",
};

// what the open model page fetched (listing, explain, each kernel's stages), so switching kernels or
// stages back and forth compiles nothing again; forgotten when the page is left
const cache = new Map();

function cached(key, load) {
  if (!cache.has(key)) {
    const promise = load();
    cache.set(key, promise);
    promise.catch(() => cache.delete(key)); // a failure is not remembered
  }
  return cache.get(key);
}

/** @main's calls in the fused text: kernel name -> {value, args, type}. */
function kernelCalls(fusedText) {
  const calls = new Map();
  const main = fusedText.split(/^def @main\b/m)[1] || "";
  for (const line of main.split("\n")) {
    const m = /^\s*(%\S+) = @([\w.$-]+)\((.*)\) : (.+?)(?:\s+#.*)?$/.exec(line);
    if (m) calls.set(m[2], { value: m[1], args: m[3], type: m[4] });
  }
  return calls;
}

function scheduleText(schedule) {
  if (!schedule) return "–";
  const parts = [schedule.source];
  if (schedule.rule) parts.push(`rule ${schedule.rule}`);
  if (schedule.record_id !== undefined && schedule.record_id !== null) parts.push(`record ${schedule.record_id}`);
  if (schedule.measured_s) parts.push(`measured ${fmtSeconds(schedule.measured_s)}`);
  if (schedule.date) parts.push(fmtDate(schedule.date));
  for (const [k, v] of Object.entries(schedule)) {
    if (!["source", "rule", "record_id", "measured_s", "date"].includes(k) && v !== null && typeof v !== "object") {
      parts.push(`${k.replaceAll("_", " ")} ${v}`);
    }
  }
  return parts.join(" · ");
}

function list(items, empty = "–") {
  return items && items.length ? h("ul", { class: "plain" }, items.map((i) => h("li", {}, i))) : empty;
}

function explainFacts(kernel) {
  const decisions = Object.entries(kernel.decisions || {});
  return [
    facts([
      ["ONNX nodes", list(kernel.nodes.map((n) => `${n.node}${n.onnx_op ? ` (${n.onnx_op})` : ""} → ${n.ops.join(", ")}`))],
      ["Implementation", kernel.implementation],
      ["Why", list(kernel.why, "no rule had anything to say")],
      ["Implementations available", list(kernel.implementations, "none (no anchor op)")],
      ["Graph passes", list(kernel.passes, "none rewrote these nodes")],
      ["Schedule rule", `${kernel.rule}${kernel.rules && kernel.rules.length ? ` (of ${kernel.rules.join(", ")})` : ""}`],
      ["Fallback", kernel.fallback],
      ["Schedule source", scheduleText(kernel.schedule)],
      ["FLOPs", fmtFlops(kernel.flops)],
      ["Measured", kernel.measured_s ? fmtSeconds(kernel.measured_s) : null],
    ]),
    h("h4", {}, "Decisions"),
    decisions.length
      ? table({
          caption: `Schedule decisions of ${kernel.kernel}`,
          rows: decisions,
          columns: [
            { label: "Decision", cell: ([k]) => h("code", {}, k) },
            { label: "Value", cell: ([, v]) => h("code", {}, JSON.stringify(v)) },
          ],
        })
      : h("p", { class: "empty" }, "No decisions (the schedule takes none)."),
  ];
}

function kernelPanel(model, kernel, useTuned) {
  const output = h("div", { class: "ir-output", "aria-live": "polite" });
  const buttons = STAGES.map((stage) =>
    h("button", { type: "button", class: "stage", "aria-pressed": "false", dataset: { stage }, title: STAGE_NOTES[stage] }, stage),
  );
  const show = async (stage) => {
    for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.stage === stage));
    output.replaceChildren(statusLine(`Loading the ${stage} stage of ${kernel.kernel}…`));
    output.dataset.stage = stage;
    output.dataset.loaded = "false";
    try {
      const text = await cached(`${model.id}|${useTuned}|${kernel.kernel}|${stage}`, () =>
        getText(`v1/models/${model.id}/ir`, { stage, kernel: kernel.kernel, use_tuned: useTuned }),
      );
      if (output.dataset.stage !== stage) return; // another stage was chosen meanwhile
      output.replaceChildren(
        h("h4", {}, `${stage}: ${STAGE_NOTES[stage]}`),
        codeBlock(text, stage, `${stage} stage of ${kernel.kernel}`),
      );
      output.dataset.loaded = "true";
    } catch (error) {
      if (output.dataset.stage === stage) showError(output, error, `The ${stage} stage`);
    }
  };
  for (const b of buttons) b.addEventListener("click", () => show(b.dataset.stage));
  const panel = h(
    "section",
    { class: "card kernel-panel", dataset: { kernel: kernel.kernel }, "aria-labelledby": "kernel-title" },
    h("h2", { id: "kernel-title", tabindex: "-1" }, "Kernel ", h("code", {}, kernel.kernel)),
    explainFacts(kernel),
    h("h3", {}, "IR stages"),
    h("div", { class: "stage-buttons", role: "group", "aria-label": "IR stage" }, buttons),
    output,
  );
  show("scheduled");
  return panel;
}

function graphListing(kernels, calls, onChoose) {
  return h(
    "ol",
    { class: "graph-listing", "aria-label": "Fused groups (kernels) in execution order" },
    kernels.map((k) => {
      const call = calls.get(k.kernel);
      return h(
        "li",
        { class: "group", dataset: { kernel: k.kernel } },
        h("button", { type: "button", class: "link kernel-button", "aria-pressed": "false", onclick: () => onChoose(k.kernel) }, k.kernel),
        h(
          "span",
          { class: "muted" },
          ` ${k.implementation} · ${fmtFlops(k.flops)} · schedule: ${k.schedule ? k.schedule.source : "–"}`,
          call ? ` · ${call.value} = (${call.args}) → ${call.type}` : "",
        ),
        h(
          "ul",
          { class: "nodes" },
          k.nodes.map((n) =>
            h(
              "li",
              {},
              h("button", { type: "button", class: "link node-button", dataset: { node: n.node }, onclick: () => onChoose(k.kernel, n.node) }, n.node),
              h("span", { class: "muted" }, ` ${n.onnx_op || "(added by a pass)"} → ${n.ops.join(", ")}`),
            ),
          ),
        ),
      );
    }),
  );
}

export function render(container, { id, kernel: initialKernel }) {
  let useTuned = sessionStorage.getItem("temper.useTuned") !== "false";
  const header = h("div", { class: "model-header" });
  const body = h("div", { class: "model-body" });
  const tuned = checkbox("Schedule kernels with the best tuning records (as a compile does)", useTuned);
  tuned.input.addEventListener("change", () => {
    useTuned = tuned.input.checked;
    sessionStorage.setItem("temper.useTuned", String(useTuned));
    load(currentKernel);
  });
  let currentKernel = initialKernel || null;
  container.append(h("h1", {}, "Model"), header, tuned.el, body);

  const load = async (chosen) => {
    body.replaceChildren(statusLine("Compiling the model's graph and explaining its kernels…"));
    let model, fused, explain;
    try {
      model = await cached(`${id}|model`, () => getJSON(`v1/models/${id}`));
      container.querySelector("h1").textContent = `Model ${model.name}`;
      header.replaceChildren(
        facts([
          ["Id", h("code", {}, model.id)],
          ["Inputs", model.inputs.map((t) => `${t.name} ${fmtShape(t.shape)} ${t.dtype}`).join("; ")],
          ["Outputs", model.outputs.map((t) => `${t.name} ${fmtShape(t.shape)} ${t.dtype}`).join("; ")],
          ["Bound shapes", Object.keys(model.shapes).length ? JSON.stringify(model.shapes) : "as declared"],
          ["FLOPs", `${fmtFlops(model.flops)} per inference, ${model.tasks.length} tasks`],
        ]),
        h(
          "p",
          { class: "actions" },
          h("a", { class: "button secondary", href: `#/tuning?model=${model.id}` }, "Tune this model"),
          " ",
          h("a", { class: "button secondary", href: `#/compilations?model=${model.id}` }, "Compile this model"),
        ),
      );
      [fused, explain] = await Promise.all([
        cached(`${id}|${useTuned}|fused`, () => getText(`v1/models/${id}/ir`, { stage: "fused", use_tuned: useTuned })),
        cached(`${id}|${useTuned}|explain`, () => getJSON(`v1/models/${id}/explain`, { use_tuned: useTuned })),
      ]);
    } catch (error) {
      showError(body, error, model ? "Could not compile this model's graph" : "Could not load the model");
      if (model && model.unbound.length) {
        body.append(h("p", {}, `Inputs ${model.unbound.join(", ")} have dynamic dims with no shapes bound at upload: upload the model again with their shapes to see its kernels.`));
      }
      return;
    }
    const panelSlot = h("div", { class: "kernel-slot" }, h("p", { class: "empty" }, "Choose a kernel or a node in the listing to see it."));
    const choose = (name, node) => {
      const kernel = explain.kernels.find((k) => k.kernel === name);
      if (!kernel) return;
      currentKernel = name;
      history.replaceState(null, "", `#/models/${id}/kernel/${encodeURIComponent(name)}`);
      for (const li of listing.querySelectorAll("li.group")) {
        const selected = li.dataset.kernel === name;
        li.classList.toggle("selected", selected);
        li.querySelector(".kernel-button").setAttribute("aria-pressed", String(selected && !node));
        for (const b of li.querySelectorAll(".node-button")) b.setAttribute("aria-pressed", String(selected && b.dataset.node === node));
      }
      panelSlot.replaceChildren(kernelPanel(model, kernel, useTuned));
      panelSlot.querySelector("#kernel-title").focus({ preventScroll: false });
    };
    const listing = graphListing(explain.kernels, kernelCalls(fused), choose);
    const target = explain.target || {};
    body.replaceChildren(
      h(
        "div",
        { class: "two-columns" },
        h(
          "section",
          { class: "card", "aria-labelledby": "graph-title" },
          h("h2", { id: "graph-title" }, "Graph: fused groups"),
          h("p", { class: "muted" }, `Target ${target.cpu || "?"} (${target.key || "?"}); passes: ${(explain.passes || []).join(", ")}.`),
          listing,
          (explain.notes || []).length ? h("div", {}, h("h3", {}, "Notes"), list(explain.notes)) : null,
          h("details", {}, h("summary", {}, "The fused graph IR as text"), codeBlock(fused, "fused", "fused graph IR")),
        ),
        panelSlot,
      ),
    );
    if (chosen) choose(chosen);
  };
  load(currentKernel);
  return () => {
    // forget this model's kernel listings when leaving (another tuning run may change them)
    for (const key of [...cache.keys()]) if (key.startsWith(`${id}|`)) cache.delete(key);
  };
}
