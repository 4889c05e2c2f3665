// Syntax highlighting of IR listings with highlight.js (vendored core plus the languages we need).
// temper's graph IR (stages graph, optimized, fused) gets a small grammar of its own; the loop-nest
// TIR stages read as Python, LLVM IR as llvm and the assembly as x86asm.

import hljs from "../vendor/highlightjs/core.min.js";
import llvm from "../vendor/highlightjs/languages/llvm.min.js";
import python from "../vendor/highlightjs/languages/python.min.js";
import x86asm from "../vendor/highlightjs/languages/x86asm.min.js";
import { h } from "./ui.js";

function temperGraph() {
  return {
    name: "temper graph IR",
    keywords: { keyword: "def return as", built_in: "f16 f32 f64 i8 i32 i64 bool" },
    contains: [
      hljs.HASH_COMMENT_MODE,
      hljs.QUOTE_STRING_MODE,
      { className: "title", begin: /@[\w.$-]+/ },
      { className: "variable", begin: /%[\w.$-]+/ },
      { className: "attr", begin: /\b[a-z_][\w]*(?==)/ },
      { className: "number", begin: /-?\b\d+(\.\d+)?([eE][-+]?\d+)?\b/, relevance: 0 },
      { className: "built_in", begin: /\b[a-z_][\w]*(?=\()/ },
    ],
  };
}

hljs.registerLanguage("llvm", llvm);
hljs.registerLanguage("python", python);
hljs.registerLanguage("x86asm", x86asm);
hljs.registerLanguage("temper-graph", temperGraph);

const LANGUAGE = {
  graph: "temper-graph",
  optimized: "temper-graph",
  fused: "temper-graph",
  tir: "python",
  scheduled: "python",
  llvm: "llvm",
  asm: "x86asm",
};

// past this size a listing is shown as plain text (highlighting megabytes would stall the page)
const MAX_HIGHLIGHT = 400_000;

/** A <pre><code> with `text` highlighted as the stage's language. */
export function codeBlock(text, stage, label) {
  const code = h("code", { class: "hljs" });
  const language = LANGUAGE[stage];
  if (language && text.length <= MAX_HIGHLIGHT) {
    code.innerHTML = hljs.highlight(text, { language, ignoreIllegals: true }).value; // hljs escapes the text
    code.classList.add(`language-${language}`);
  } else {
    code.textContent = text;
  }
  return h("pre", { class: "code", tabindex: "0", "aria-label": label || `${stage} listing`, dataset: { stage } }, code);
}
