// The tuning curve (uPlot): estimated latency against trials or wall time, for the whole model
// (with the untuned default and onnxruntime as reference lines) or for each task. The chart's
// element carries data-points (how many measured points it draws) for tests and scripts.
//
// progress.curve items are [trials, latency_s | null, elapsed_s?] (old jobs: no elapsed), and
// progress.tasks[i].curve items are [trials, best_secs]; any of them may be missing.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { fmtSeconds, h } from "./ui.js";

const PALETTE = ["#1f5fa8", "#b3541e", "#2d7d46", "#7b3fa0", "#a3123a", "#5a6b00", "#00708a", "#6b4f2a"];
const REFERENCE = { default: "#555555", onnxruntime: "#a3123a" };

const TRIAL_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

/** The whole model's points: [{trials, latency, elapsed}] (latency or elapsed may be null). */
export function modelPoints(progress) {
  return (progress.curve || [])
    .filter((p) => Array.isArray(p) && p.length >= 2)
    .map(([trials, latency, elapsed]) => ({ trials, latency: num(latency), elapsed: num(elapsed) }));
}

/** Each task's points, with the wall time of the model curve's round that reached its trial count. */
export function taskSeries(progress) {
  const rounds = modelPoints(progress).filter((p) => p.elapsed !== null);
  const elapsedAt = (trials) => {
    const round = rounds.find((p) => p.trials >= trials);
    return round ? round.elapsed : num(progress.elapsed_s);
  };
  return (progress.tasks || []).map((task) => ({
    name: task.name,
    points: (task.curve || [])
      .filter((p) => Array.isArray(p) && p.length >= 2)
      .map(([trials, secs]) => ({ trials, latency: num(secs), elapsed: rounds.length ? elapsedAt(trials) : null })),
  }));
}

/** Whether every point of the model curve knows its wall time (new jobs; old ones have 2-item points). */
export function hasWallTime(progress) {
  const points = modelPoints(progress);
  return points.length > 0 && points.every((p) => p.elapsed !== null);
}

/**
 * uPlot's aligned data for the chosen view ("model" | "tasks") and x axis ("trials" | "time"):
 * {series: [{label, points}], references: [{label, value, kind}], data, pointCount}.
 */
export function chartData(progress, view, axis) {
  const xOf = (p) => (axis === "time" ? p.elapsed : p.trials);
  const series =
    view === "model"
      ? [{ label: "estimated model latency", points: modelPoints(progress) }]
      : taskSeries(progress).map((t) => ({ label: t.name, points: t.points }));
  const references = [];
  if (view === "model") {
    const dflt = num(progress.default_latency_s);
    const ort = num(progress.onnxruntime_latency_s);
    if (dflt !== null) references.push({ label: "untuned default", value: dflt, kind: "default" });
    if (ort !== null) references.push({ label: "onnxruntime", value: ort, kind: "onnxruntime" });
  }
  const xs = [...new Set(series.flatMap((s) => s.points.filter((p) => p.latency !== null && xOf(p) !== null).map(xOf)))];
  xs.sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  let pointCount = 0;
  const columns = series.map((s) => {
    const column = new Array(xs.length).fill(null);
    for (const p of s.points) {
      const x = xOf(p);
      if (p.latency === null || x === null) continue;
      if (column[index.get(x)] === null) pointCount += 1;
      column[index.get(x)] = p.latency;
    }
    return column;
  });
  const refColumns = references.map((r) => new Array(xs.length).fill(r.value));
  return { series, references, data: [xs, ...columns, ...refColumns], pointCount };
}

function options(built, view, axis, width) {
  const series = [
    { label: axis === "time" ? "wall time (s)" : "trials", value: (u, v) => (v === null ? "–" : axis === "time" ? `${v.toFixed(1)} s` : String(v)) },
    ...built.series.map((s, i) => ({
      label: s.label,
      stroke: PALETTE[i % PALETTE.length],
      width: 2,
      spanGaps: true,
      paths: uPlot.paths.stepped({ align: 1 }), // the best so far holds until the next improvement
      points: { show: true, size: 6 },
      value: (u, v) => fmtSeconds(v),
    })),
    ...built.references.map((r) => ({
      label: r.label,
      stroke: REFERENCE[r.kind],
      width: 2,
      dash: r.kind === "default" ? [8, 6] : [2, 4],
      points: { show: false },
      value: (u, v) => fmtSeconds(v),
    })),
  ];
  return {
    width,
    height: Math.max(220, Math.min(360, Math.round(width * 0.45))),
    series,
    scales: { x: { time: false }, y: view === "tasks" ? { distr: 3 } : { auto: true } },
    axes: [
      axis === "time"
        ? { label: "wall time (s)" }
        : { label: "trials measured", incrs: TRIAL_STEPS, values: (u, vals) => vals.map((v) => String(v)) },
      { label: view === "tasks" ? "best time per call (log)" : "estimated latency", size: 80, values: (u, vals) => vals.map((v) => fmtSeconds(v)) },
    ],
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
}

/** A chart that redraws itself on update(progress, view, axis); `el` goes in the page. */
export function tuningCurve() {
  const plotBox = h("div", { class: "plot" });
  const summary = h("p", { class: "chart-summary" });
  const el = h("figure", { class: "curve", dataset: { points: "0" } }, plotBox, h("figcaption", {}, summary));
  let plot = null;
  let signature = "";
  const width = () => Math.max(260, plotBox.clientWidth || el.clientWidth || 600);
  new ResizeObserver(() => plot && plot.setSize({ width: width(), height: plot.height })).observe(plotBox);

  const update = (progress, view, axis) => {
    const built = chartData(progress, view, axis);
    el.dataset.points = String(built.pointCount);
    el.dataset.view = view;
    el.dataset.axis = axis;
    const sig = JSON.stringify([view, axis, built.series.map((s) => s.label), built.references.map((r) => r.label)]);
    if (!built.pointCount) {
      if (plot) plot.destroy();
      plot = null;
      signature = "";
      plotBox.replaceChildren(h("p", { class: "empty" }, "No points yet: the curve starts after the first round of measurements."));
    } else if (plot && sig === signature) {
      plot.setData(built.data);
    } else {
      if (plot) plot.destroy();
      plotBox.replaceChildren();
      signature = sig;
      plot = new uPlot(options(built, view, axis, width()), built.data, plotBox);
    }
    summary.textContent = describe(built, view, axis);
  };
  const destroy = () => plot && plot.destroy();
  return { el, update, destroy };
}

/** The chart in words (what a screen reader, or a reader without colour, needs). */
function describe(built, view, axis) {
  const parts = [`${built.pointCount} point(s) against ${axis === "time" ? "wall time" : "trials"}.`];
  for (const s of built.series) {
    const known = s.points.filter((p) => p.latency !== null);
    if (!known.length) continue;
    const last = known[known.length - 1];
    parts.push(`${s.label}: ${fmtSeconds(last.latency)} after ${last.trials} trial(s).`);
  }
  for (const r of built.references) {
    parts.push(`Reference, ${r.label}: ${fmtSeconds(r.value)} (${r.kind === "default" ? "dashed" : "dotted"} line).`);
  }
  if (view === "model" && !built.references.length) parts.push("No reference latencies reported for this job.");
  return parts.join(" ");
}
