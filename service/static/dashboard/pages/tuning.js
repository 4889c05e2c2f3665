// Tuning jobs: submit (trials, time budget, batch), list, cancel; one job's live progress (polled
// every 1.5 s while it runs), its tuning curve, the stop reason and the in-model confirmation.

import { getJSON, postJSON } from "../api.js";
import { hasWallTime, tuningCurve } from "../curve.js";
import {
  busy, clear, facts, field, fmtDuration, fmtFlops, fmtSeconds, h, hashParams, modelSelect, modelsForm, shapesEditor,
  shortId, showError, stateBadge, statusLine, table,
} from "../ui.js";

const POLL_MS = 1500;
const ACTIVE = new Set(["queued", "running"]);

function submitForm(models, preselect, onCreated) {
  const select = modelSelect(models, preselect);
  const trials = h("input", { type: "number", min: "1", max: "100000", step: "1", value: 64, required: true });
  const budget = h("input", { type: "number", min: "1", step: "any", placeholder: "no limit" });
  const batch = h("input", { type: "number", min: "1", max: "256", step: "1", value: 8, required: true });
  const shapes = shapesEditor("Input shapes (default: those bound at upload)");
  const result = h("div");
  const submit = h("button", { type: "submit" }, "Start tuning");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "tune-title" },
    h("h2", { id: "tune-title" }, "Tune a model"),
    h(
      "div",
      { class: "row" },
      field("Model", select),
      field("Trials", trials, "candidates measured over all kernels"),
      field("Time budget (seconds, optional)", budget),
      field("Batch", batch, "candidates measured per round"),
    ),
    shapes.el,
    submit,
    result,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clear(result);
    try {
      const body = { model_id: select.value, trials: Number(trials.value), batch: Number(batch.value) };
      if (!body.model_id) throw new Error("upload a model first");
      if (budget.value) body.time_budget_s = Number(budget.value);
      const bound = shapes.value();
      if (bound) body.shapes = bound;
      const job = await busy(submit, () => postJSON("v1/tuning-jobs", body));
      onCreated(job);
    } catch (error) {
      showError(result, error, "Tuning job refused");
    }
  });
  return form;
}

function progressText(job) {
  const p = job.progress;
  if (!p) return job.state === "queued" ? "waiting for a worker" : "–";
  return `${p.trials_done}/${p.trials_total} trials`;
}

function cancelButton(job, onChange, target) {
  if (!ACTIVE.has(job.state)) return null;
  const button = h("button", { type: "button", class: "danger small" }, "Cancel");
  button.addEventListener("click", async () => {
    try {
      onChange(await busy(button, () => postJSON(`v1/tuning-jobs/${job.id}/cancel`)));
    } catch (error) {
      showError(target || button.parentElement, error, "Cancel failed");
    }
  });
  return button;
}

function jobsTable(jobs, names, selectedId, onChange) {
  return table({
    caption: "Tuning jobs, newest first",
    empty: "No tuning jobs yet.",
    rows: jobs,
    rowAttrs: (j) => ({ class: j.id === selectedId ? "selected" : null, dataset: { jobId: j.id } }),
    columns: [
      { label: "Job", cell: (j) => h("a", { href: `#/tuning/${j.id}`, "aria-current": j.id === selectedId ? "true" : null }, shortId(j.id)) },
      { label: "Model", cell: (j) => names.get(j.model_id) || shortId(j.model_id) },
      { label: "State", cell: (j) => stateBadge(j.state) },
      { label: "Progress", cell: progressText },
      { label: "Estimated latency", numeric: true, cell: (j) => fmtSeconds(j.progress && j.progress.estimated_latency_s) },
      { label: "Stop reason", cell: (j) => (j.progress && j.progress.stop_reason) || (j.error ? `error: ${j.error}` : "–") },
      { label: "Actions", cell: (j) => cancelButton(j, onChange) },
    ],
  });
}

function tasksTable(progress) {
  return table({
    caption: "Tasks: trials and best times so far",
    rows: progress.tasks || [],
    columns: [
      { label: "Task (kernel)", cell: (t) => t.name },
      { label: "Weight", numeric: true, cell: (t) => String(t.weight) },
      { label: "FLOPs", numeric: true, cell: (t) => fmtFlops(t.flops) },
      { label: "Trials", numeric: true, cell: (t) => String(t.trials) },
      { label: "Default", numeric: true, cell: (t) => fmtSeconds(t.default_secs) },
      { label: "Best", numeric: true, cell: (t) => fmtSeconds(t.best_secs) },
      { label: "GFLOP/s", numeric: true, cell: (t) => (t.best_gflops ? t.best_gflops.toFixed(1) : "–") },
      {
        label: "Speedup",
        numeric: true,
        cell: (t) => (t.best_secs && t.default_secs ? `${(t.default_secs / t.best_secs).toFixed(2)}×` : "–"),
      },
    ],
  });
}

function confirmationView(progress) {
  const c = progress.confirmation;
  if (!c) {
    const running = progress.phase === "confirm" && !progress.finished;
    return h("p", {}, running ? "Timing the finalists inside the compiled model…" : "No in-model check (yet).");
  }
  if (c.error) return h("p", { class: "warning" }, `In-model check failed (records kept as measured alone): ${c.error}`);
  const variants = c.variant_secs || [];
  const rows = [];
  for (const t of c.tasks || []) {
    const ids = [...new Set([...Object.keys(t.alone || {}), ...Object.keys(t.in_model || {})])];
    for (const id of ids) {
      const roles = [];
      if (String(t.chosen) === id) roles.push("chosen");
      if (String(t.isolated_best) === id) roles.push("fastest alone");
      if (String(t.default) === id) roles.push("default");
      rows.push({ task: t.name, id, roles: roles.join(", ") || "finalist", alone: t.alone[id], inModel: (t.in_model || {})[id] });
    }
  }
  return h(
    "div",
    {},
    facts([
      ["Took", c.seconds !== null && c.seconds !== undefined ? fmtDuration(c.seconds) : null],
      ["Model with each kernel's fastest-alone schedule", variants.length ? fmtSeconds(variants[0]) : null],
      ["Model with the default schedules", variants.length >= 2 ? fmtSeconds(variants[variants.length - 1]) : null],
      ["Whole model with the in-model picks", c.whole_model ? fmtSeconds(c.whole_model.picks) : null],
      ["Whole model with the defaults, timed against it", c.whole_model ? fmtSeconds(c.whole_model.defaults) : null],
      ["Kept", c.kept === "defaults" ? "the default schedules (the picks were no faster whole)" : c.kept ? "the in-model picks" : null],
      ["Kernels whose in-model pick differs", (c.changed || []).length ? c.changed.join(", ") : "none"],
      ["Convs the picks ran direct (faster alone than Winograd)", (c.direct || []).length ? c.direct.join(", ") : null],
    ]),
    table({
      caption: "Finalists timed alone and inside the model",
      empty: "No finalists were timed.",
      rows,
      columns: [
        { label: "Task", cell: (r) => r.task },
        { label: "Record", cell: (r) => r.id },
        { label: "Role", cell: (r) => r.roles },
        { label: "Alone", numeric: true, cell: (r) => fmtSeconds(r.alone) },
        { label: "In the model", numeric: true, cell: (r) => fmtSeconds(r.inModel) },
      ],
    }),
  );
}

function jobDetail(onChange) {
  const curve = tuningCurve();
  let view = "model";
  let axis = "trials";
  let last = null;
  const radios = (name, legend, choices, current, set) =>
    h(
      "fieldset",
      { class: "toggle" },
      h("legend", {}, legend),
      choices.map(([value, label]) => {
        const input = h("input", { type: "radio", name, value, checked: value === current, id: `${name}-${value}` });
        input.addEventListener("change", () => {
          set(value);
          if (last) draw(last);
        });
        return h("span", { class: "choice" }, input, h("label", { for: input.id }, label));
      }),
    );
  const axisToggle = radios("curve-axis", "X axis", [["trials", "Trials"], ["time", "Wall time"]], axis, (v) => (axis = v));
  const viewToggle = radios("curve-view", "Curve", [["model", "Whole model"], ["tasks", "Per task"]], view, (v) => (view = v));
  const wallNote = h("small", { class: "hint" });
  const head = h("div");
  const info = h("div");
  const tasks = h("div");
  const confirmation = h("div");
  const el = h(
    "section",
    { class: "card job-detail", "aria-labelledby": "job-title" },
    h("h2", { id: "job-title" }, "Job"),
    head,
    info,
    h("h3", {}, "Tuning curve"),
    h("div", { class: "row" }, viewToggle, axisToggle, wallNote),
    curve.el,
    h("h3", {}, "Tasks"),
    tasks,
    h("h3", {}, "In-model confirmation"),
    confirmation,
  );

  const draw = (job) => {
    last = job;
    const p = job.progress;
    el.dataset.state = job.state;
    el.querySelector("#job-title").textContent = `Job ${shortId(job.id)}`;
    head.replaceChildren(
      h("p", {}, "State: ", stateBadge(job.state), p && p.phase && ACTIVE.has(job.state) ? ` (phase: ${p.phase})` : "", " ", cancelButton(job, onChange, head)),
    );
    const parameters = Object.entries(job.params).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ");
    if (!p) {
      info.replaceChildren(
        h("p", {}, job.state === "queued" ? "Waiting for a worker to start it." : "No progress reported."),
        facts([["Error", job.error], ["Parameters", parameters]]),
      );
      curve.update({ curve: [], tasks: [] }, view, axis);
      tasks.replaceChildren();
      confirmation.replaceChildren();
      return;
    }
    const wall = hasWallTime(p);
    axisToggle.querySelector("input[value=time]").disabled = !wall;
    if (!wall && axis === "time") {
      axis = "trials";
      axisToggle.querySelector("input[value=trials]").checked = true;
    }
    wallNote.textContent = wall ? "" : "This job's curve has no wall times (an older job, or no round yet): trials only.";
    info.replaceChildren(
      h("progress", { max: p.trials_total || 1, value: p.trials_done, "aria-label": "trials measured" }),
      facts([
        ["Trials", `${p.trials_done} of ${p.trials_total}${p.trials_base ? ` (+${p.trials_base} records already there)` : ""}`],
        ["Elapsed", fmtDuration(p.elapsed_s)],
        ["ETA", p.finished ? "done" : p.eta_s !== null && p.eta_s !== undefined ? fmtDuration(p.eta_s) : "–"],
        ["Estimated latency", fmtSeconds(p.estimated_latency_s)],
        ["Untuned default", p.default_latency_s !== undefined && p.default_latency_s !== null ? fmtSeconds(p.default_latency_s) : "not reported"],
        ["onnxruntime", p.onnxruntime_latency_s !== undefined && p.onnxruntime_latency_s !== null ? fmtSeconds(p.onnxruntime_latency_s) : "not reported"],
        ["Stop reason", p.stop_reason || (ACTIVE.has(job.state) ? "still searching" : "–")],
        ["Error", job.error],
        ["Parameters", parameters],
      ]),
    );
    curve.update(p, view, axis);
    tasks.replaceChildren(tasksTable(p));
    confirmation.replaceChildren(confirmationView(p));
  };
  return { el, draw, destroy: curve.destroy };
}

export function render(container, { id }) {
  const params = hashParams();
  const formSlot = h("div");
  const listSlot = h("div", { id: "tuning-list" });
  const detailSlot = h("div");
  const errorSlot = h("div");
  container.append(h("h1", {}, "Tuning jobs"), formSlot, errorSlot, detailSlot, h("section", { "aria-labelledby": "jobs-title" }, h("h2", { id: "jobs-title" }, "All tuning jobs"), listSlot));

  let timer = null;
  let stopped = false;
  let names = new Map();
  const shown = { list: "", job: "" };
  const detail = id ? jobDetail((job) => refresh(job)) : null;
  if (detail) detailSlot.append(detail.el);

  const refresh = async (changed) => {
    if (stopped) return;
    clearTimeout(timer);
    let active = false;
    try {
      const jobs = await getJSON("v1/tuning-jobs");
      if (stopped) return;
      const listJson = JSON.stringify(jobs); // redrawn only when something changed: focus stays put
      if (listJson !== shown.list) listSlot.replaceChildren(jobsTable(jobs, names, id, () => refresh()));
      shown.list = listJson;
      active = jobs.some((j) => ACTIVE.has(j.state));
      if (detail) {
        const job = changed && changed.id === id ? changed : await getJSON(`v1/tuning-jobs/${id}`);
        if (stopped) return;
        const jobJson = JSON.stringify(job);
        if (jobJson !== shown.job) detail.draw(job);
        shown.job = jobJson;
        active = active || ACTIVE.has(job.state);
      }
      errorSlot.replaceChildren();
    } catch (error) {
      showError(errorSlot, error, detail ? "Could not load this tuning job" : "Could not load tuning jobs");
      if (error.status === 404) return; // no such job: nothing to poll
      active = true; // try again: the server may be restarting
    }
    if (active && !stopped) timer = setTimeout(refresh, POLL_MS);
  };

  (async () => {
    listSlot.replaceChildren(statusLine("Loading…"));
    names = await modelsForm(formSlot, (models) =>
      submitForm(models, params.model, (job) => {
        location.hash = `#/tuning/${job.id}`;
      }),
    );
    refresh();
  })();

  return () => {
    stopped = true;
    clearTimeout(timer);
    if (detail) detail.destroy();
  };
}
