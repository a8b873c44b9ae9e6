// The course site's behaviour (course/site.py writes the pages): formulas drawn by KaTeX (shipped in
// _static/katex), folded solutions, and search over window.COURSE_SEARCH (_static/search-index.js, one entry
// per lesson section). Nothing is fetched.
"use strict";

// The lessons write formulas as TeX between $…$ (inline) and $$…$$ (display), as JupyterLab reads them.
const MATH_DELIMITERS = [
  { left: "$$", right: "$$", display: true },
  { left: "$", right: "$", display: false },
];
const FORMULA = /\$\$[\s\S]+?\$\$|\$[^$]+?\$/g;

// Draw the formulas of the lessons' prose (markdown cells only: a $ in code or in an output is not TeX).
// A formula KaTeX cannot read stays as its source, in red (class katex-error), and the page goes on.
function renderFormulas() {
  if (!window.renderMathInElement) return;
  for (const prose of document.querySelectorAll(".jp-RenderedMarkdown")) {
    window.renderMathInElement(prose, { delimiters: MATH_DELIMITERS, throwOnError: false });
  }
}

// Solution cells (class celltag_site-solution) show their code only after a click.
function foldSolutions() {
  for (const cell of document.querySelectorAll(".celltag_site-solution")) {
    const input = cell.querySelector(".jp-Cell-inputWrapper");
    if (!input || cell.querySelector(".site-solution-toggle")) continue;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "site-solution-toggle";
    button.setAttribute("aria-expanded", "false");
    button.textContent = "Show the solution";
    // a class, not the hidden attribute: JupyterLab's style sheet sets the wrapper's display itself
    input.classList.add("site-folded");
    button.addEventListener("click", () => {
      const folded = input.classList.toggle("site-folded");
      button.setAttribute("aria-expanded", String(!folded));
      button.textContent = folded ? "Show the solution" : "Hide the solution";
    });
    cell.insertBefore(button, input);
  }
}

// Entries holding every word of the query; a word in the heading counts more than one in the text.
function search(query, entries, limit = 12) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return [];
  const scored = [];
  for (const entry of entries) {
    const heading = entry.heading.toLowerCase();
    const text = entry.text.toLowerCase();
    if (!words.every((w) => heading.includes(w) || text.includes(w))) continue;
    scored.push([words.reduce((s, w) => s + (heading.includes(w) ? 10 : 1), 0), entry]);
  }
  scored.sort((a, b) => b[0] - a[0]);
  return scored.slice(0, limit).map(([, entry]) => entry);
}

// About 140 characters of an entry's text around the first query word, widened so that no formula is cut:
// [start, end) into text.
function snippetRange(text, word) {
  const at = Math.max(0, text.toLowerCase().indexOf(word));
  let start = Math.max(0, at - 50);
  let end = Math.min(text.length, start + 140);
  for (const formula of text.matchAll(FORMULA)) {
    const [from, to] = [formula.index, formula.index + formula[0].length];
    if (from < start && start < to) start = from;
    if (from < end && end < to) end = to;
  }
  return [start, end];
}

// The snippet as nodes: prose as text, each formula drawn by KaTeX in the line (never as TeX source).
function snippetNodes(text, word) {
  const [start, end] = snippetRange(text, word);
  const part = text.slice(start, end);
  const nodes = [document.createTextNode(start > 0 ? "…" : "")];
  let last = 0;
  for (const formula of part.matchAll(FORMULA)) {
    nodes.push(document.createTextNode(part.slice(last, formula.index)));
    const tex = formula[0].replace(/^\$\$?|\$?\$$/g, "");
    const math = document.createElement("span");
    math.className = "site-search-formula";
    if (window.katex) window.katex.render(tex, math, { displayMode: false, throwOnError: false });
    else math.textContent = tex;
    nodes.push(math);
    last = formula.index + formula[0].length;
  }
  nodes.push(document.createTextNode(part.slice(last) + (end < text.length ? "…" : "")));
  return nodes;
}

function wireSearch() {
  const input = document.querySelector(".site-search-input");
  const list = document.querySelector(".site-search-results");
  if (!input || !list) return;
  const show = () => {
    const found = search(input.value, window.COURSE_SEARCH || []);
    list.replaceChildren();
    list.hidden = input.value.trim() === "";
    if (!list.hidden && !found.length) {
      const none = document.createElement("li");
      none.className = "site-search-none";
      none.textContent = "Nothing found.";
      list.appendChild(none);
    }
    const first = input.value.toLowerCase().split(/\s+/).filter(Boolean)[0] || "";
    for (const entry of found) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = entry.href;
      link.className = "site-search-result";
      const lesson = document.createElement("span");
      lesson.className = "site-search-lesson";
      lesson.textContent = entry.lesson;
      const heading = document.createElement("strong");
      heading.textContent = entry.heading;
      const text = document.createElement("span");
      text.className = "site-search-snippet";
      text.append(...snippetNodes(entry.text, first));
      link.append(lesson, heading, text);
      item.appendChild(link);
      list.appendChild(item);
    }
  };
  input.addEventListener("input", show);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      input.value = "";
      show();
    }
  });
}

renderFormulas();
foldSolutions();
wireSearch();
