// Small DOM helpers the pages share: element building, tables, formatting, error boxes and the
// name/value row editors (input shapes, compile overrides).

import { describeError, getJSON } from "./api.js";

/** h("button", {type: "button", onclick: fn, class: "x"}, "text", child, [more]) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name in el && typeof value !== "string") el[name] = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

/** An alert box with the error's message (the server's words), in `container` (replacing what was there). */
export function showError(container, error, prefix = "Error") {
  const box = h("div", { class: "error", role: "alert" }, h("strong", {}, `${prefix}: `), describeError(error));
  container.replaceChildren(box);
  return box;
}

/** A polite status line (loading..., done) that screen readers announce. */
export function statusLine(text = "") {
  return h("p", { class: "status", role: "status", "aria-live": "polite" }, text);
}

export function fmtSeconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  const a = Math.abs(s);
  if (a >= 1) return `${s.toFixed(2)} s`;
  if (a >= 1e-3) return `${(s * 1e3).toFixed(3)} ms`;
  if (a >= 1e-6) return `${(s * 1e6).toFixed(2)} µs`;
  return `${(s * 1e9).toFixed(0)} ns`;
}

export function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

export function fmtCount(n, unit) {
  if (n === null || n === undefined) return "–";
  const prefixes = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [scale, p] of prefixes) {
    if (Math.abs(n) >= scale) return `${(n / scale).toFixed(n / scale >= 100 ? 0 : 1)} ${p}${unit}`;
  }
  return `${n} ${unit}`;
}

export const fmtFlops = (n) => fmtCount(n, "FLOP");

export function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export function fmtDate(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export const shortId = (id) => (id ? id.slice(0, 8) : "–");

export function fmtShape(shape) {
  return `[${(shape || []).join(", ")}]`;
}

/** The job state as text (never colour alone): "queued", "running", ... */
export function stateBadge(state) {
  return h("span", { class: `state state-${state}` }, state);
}

/**
 * A table: columns [{label, cell(row) -> Node|string, numeric}], rows; `empty` shown when no rows.
 * Wrapped so a wide table scrolls sideways on a narrow screen instead of widening the page.
 */
export function table({ caption, columns, rows, empty = "Nothing yet.", rowAttrs }) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  const head = h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.numeric ? "num" : null }, c.label)));
  const body = rows.map((row) =>
    h("tr", rowAttrs ? rowAttrs(row) : {}, columns.map((c) => h("td", { class: c.numeric ? "num" : null }, c.cell(row)))),
  );
  return h(
    "div",
    { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption || "table" },
    h("table", {}, caption ? h("caption", {}, caption) : null, h("thead", {}, head), h("tbody", {}, body)),
  );
}

/** A definition list of [term, value] pairs (values may be nodes). */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.filter(([, v]) => v !== undefined && v !== null && v !== "").map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
  );
}

/** Run `work()` with `button` disabled (and marked busy) until it settles. */
export async function busy(button, work) {
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  try {
    return await work();
  } finally {
    button.disabled = false;
    button.removeAttribute("aria-busy");
  }
}

let uid = 0;
export const nextId = (prefix) => `${prefix}-${++uid}`;

/** A labelled form control: h-built `control` with a <label> bound to it. */
export function field(labelText, control, hint) {
  control.id = control.id || nextId("f");
  const hintEl = hint ? h("small", { id: `${control.id}-hint`, class: "hint" }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: "field" }, h("label", { for: control.id }, labelText), control, hintEl);
}

export function checkbox(labelText, checked, attrs = {}) {
  const input = h("input", { type: "checkbox", checked, id: nextId("c"), ...attrs });
  return { input, el: h("div", { class: "field check" }, input, h("label", { for: input.id }, labelText)) };
}

/**
 * Rows of (name, value) text fields with add/remove buttons, as a fieldset. `parse(name, text)`
 * turns one row into a [key, value] pair or throws an Error naming the problem. `value()` returns
 * the object of all non-empty rows, or null when there are none.
 */
export function pairsEditor({ legend, nameLabel, valueLabel, valueHint, addLabel, parse }) {
  const rows = h("div", { class: "pairs" });
  const addRow = (name = "", value = "") => {
    const nameInput = h("input", { type: "text", value: name, class: "pair-name", spellcheck: "false" });
    const valueInput = h("input", { type: "text", value, class: "pair-value", spellcheck: "false" });
    const row = h(
      "div",
      { class: "pair" },
      field(nameLabel, nameInput),
      field(valueLabel, valueInput, valueHint),
      h("button", { type: "button", class: "secondary small", onclick: () => row.remove(), "aria-label": `Remove this ${nameLabel.toLowerCase()}` }, "Remove"),
    );
    rows.append(row);
    nameInput.focus();
  };
  const el = h(
    "fieldset",
    { class: "pairs-editor" },
    h("legend", {}, legend),
    rows,
    h("button", { type: "button", class: "secondary small", onclick: () => addRow() }, addLabel),
  );
  const value = () => {
    const out = {};
    for (const row of rows.querySelectorAll(".pair")) {
      const name = row.querySelector(".pair-name").value.trim();
      const text = row.querySelector(".pair-value").value.trim();
      if (!name && !text) continue;
      if (!name) throw new Error(`${legend}: a row has a ${valueLabel.toLowerCase()} but no ${nameLabel.toLowerCase()}`);
      const [key, parsed] = parse(name, text);
      out[key] = parsed;
    }
    return Object.keys(out).length ? out : null;
  };
  return { el, value, addRow };
}

/** The editor for input shapes: input name -> dims such as "1, 3, 224, 224". */
export function shapesEditor(legend = "Input shapes (for inputs with dynamic dims)") {
  return pairsEditor({
    legend,
    nameLabel: "Input name",
    valueLabel: "Dimensions",
    valueHint: "comma-separated, e.g. 1, 3, 224, 224",
    addLabel: "Add an input shape",
    parse: (name, text) => {
      const dims = text.split(/[\s,x×]+/).filter(Boolean).map(Number);
      if (!dims.length || dims.some((d) => !Number.isInteger(d) || d < 1)) {
        throw new Error(`shape of ${name}: "${text}" is not a list of positive integers`);
      }
      return [name, dims];
    },
  });
}

/** A <select> of models (name and short id); `selected` is a model id. */
export function modelSelect(models, selected) {
  return h(
    "select",
    { required: true },
    models.map((m) => h("option", { value: m.id, selected: m.id === selected }, `${m.name} (${shortId(m.id)})`)),
  );
}

/** Lists the tenant's models into `slot`: `form(models)`, or a note to upload one first; returns
 * model id -> name (empty when the list could not be had, which `slot` then says). */
export async function modelsForm(slot, form) {
  try {
    const models = await getJSON("v1/models");
    slot.replaceChildren(models.length ? form(models) : h("p", { class: "empty card" }, "Upload a model first (Models page)."));
    return new Map(models.map((m) => [m.id, m.name]));
  } catch (error) {
    showError(slot, error, "Could not list the models");
    return new Map();
  }
}

/** The current hash route's query parameters, e.g. #/tuning?model=abc -> {model: "abc"}. */
export function hashParams() {
  const query = location.hash.split("?")[1] || "";
  return Object.fromEntries(new URLSearchParams(query));
}
