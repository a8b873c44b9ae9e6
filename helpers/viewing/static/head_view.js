// The course's head view: attention weights of every layer and head, drawn in the browser.
//
// One file serves two hosts. In JupyterLab it is an anywidget module (`export default { render }`,
// the model is the live or saved widget state). In an exported HTML page helpers/viewing/head_view.py strips
// the export line, wraps the file in a plain <script> and renders with `staticModel`, a stand-in
// that keeps the same state in the page: no widget manager, no kernel, nothing fetched.
//
// State (set by Python, see helpers/viewing/head_view.py): kind ("self" | "causal" | "cross"), title,
// query_tokens (L), key_tokens (S), layer_names, weights_shape [layers, h, L, S] and weights_uint8: base64
// of one byte per weight w in [0, 1], round(255 w), in that order (weightsOf decodes it);
// layer, head (-1 = all heads) and view ("lines" | "heatmap" | "grid") change on clicks.

// Colour-blind-safe colours for the heads (Okabe-Ito, then four more), repeated beyond twelve heads.
const HEAD_COLOURS = [
  "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7",
  "#B8A000", "#444444", "#8C564B", "#17BECF", "#9467BD", "#7F7F7F",
];
// Viridis at eleven stops, the colour map of every figure in the course (helpers/viewing/plotting.py).
const VIRIDIS = [
  [68, 1, 84], [72, 36, 117], [65, 68, 135], [53, 95, 141], [42, 120, 142], [33, 145, 140],
  [34, 168, 132], [68, 191, 112], [122, 209, 81], [189, 223, 38], [253, 231, 37],
];
const SVG = "http://www.w3.org/2000/svg";
const ROW = 20; // pixels per token row
const MIN_WEIGHT = 0.01; // weaker links are not drawn as lines (they would be invisible anyway)

function headColour(head) {
  return HEAD_COLOURS[head % HEAD_COLOURS.length];
}

function viridis(value) {
  const x = Math.min(Math.max(value, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const t = x - i;
  const rgb = VIRIDIS[i].map((c, k) => Math.round(c + t * (VIRIDIS[i + 1][k] - c)));
  return `rgb(${rgb.join(",")})`;
}

function node(tag, attributes = {}, parent = null, namespace = null) {
  const element = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") element.textContent = value;
    else element.setAttribute(name, value);
  }
  if (parent) parent.appendChild(element);
  return element;
}

function svgNode(tag, attributes, parent) {
  return node(tag, attributes, parent, SVG);
}

// Rough text width in pixels, enough to lay out token columns without measuring the DOM.
function textWidth(tokens) {
  return 8 + 7 * Math.max(1, ...tokens.map((t) => t.length));
}

// The weights as nested arrays [layer][head][query][key] of numbers in [0, 1], decoded once per state.
const LEVELS = 255;
const decoded = new WeakMap();

function decodeWeights(text, shape) {
  const [layers, heads, L, S] = shape;
  const binary = atob(text);
  const count = layers * heads * L * S;
  if (binary.length !== count) {
    throw new Error(`weights_uint8 holds ${binary.length} weights; weights_shape [${shape}] needs ${count}`);
  }
  let k = 0;
  const next = () => binary.charCodeAt(k++) / LEVELS;
  const repeat = (n, make) => Array.from({ length: n }, make);
  return repeat(layers, () => repeat(heads, () => repeat(L, () => repeat(S, next))));
}

function weightsOf(model) {
  const text = model.get("weights_uint8");
  const cached = decoded.get(model);
  if (cached && cached.text === text) return cached.weights;
  const weights = decodeWeights(text, model.get("weights_shape"));
  decoded.set(model, { text, weights });
  return weights;
}

function visibleHeads(model) {
  const heads = weightsOf(model)[0].length;
  const isolated = model.get("head");
  return isolated >= 0 && isolated < heads ? [isolated] : [...Array(heads).keys()];
}

// ---------------------------------------------------------------------------------------------
// Controls: layer selector, view buttons, one coloured button per head
// ---------------------------------------------------------------------------------------------
function drawControls(model, parent) {
  const bar = node("div", { class: "hv-controls" }, parent);
  const layerNames = model.get("layer_names");
  if (layerNames.length > 1) {
    const label = node("label", { class: "hv-layer-label", text: "layer " }, bar);
    const select = node("select", { class: "hv-layer-select", "aria-label": "layer" }, label);
    layerNames.forEach((name, i) => {
      const option = node("option", { value: String(i), text: name }, select);
      if (i === model.get("layer")) option.selected = true;
    });
    select.addEventListener("change", () => {
      model.set("layer", Number(select.value));
      model.save_changes();
    });
  }
  const views = [["lines", "lines"], ["heatmap", "heatmap"], ["grid", "all layers × heads"]];
  for (const [view, text] of views) {
    const button = node("button", { class: "hv-view-button", "data-view": view, text }, bar);
    if (model.get("view") === view) button.classList.add("hv-active");
    button.addEventListener("click", () => {
      model.set("view", view);
      model.save_changes();
    });
  }
  const heads = node("div", { class: "hv-heads", title: "click a head to show it alone; click again for all" }, parent);
  const isolated = model.get("head");
  weightsOf(model)[0].forEach((_, h) => {
    const swatch = node("button", { class: "hv-head-swatch", "data-head": String(h), text: `head ${h}` }, heads);
    swatch.style.setProperty("--hv-head-colour", headColour(h));
    if (isolated === h) swatch.classList.add("hv-active");
    if (isolated >= 0 && isolated !== h) swatch.classList.add("hv-dimmed");
    swatch.addEventListener("click", () => {
      model.set("head", model.get("head") === h ? -1 : h);
      model.save_changes();
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Lines: queries on the left, keys on the right, one line per (head, query, key), opacity = weight
// ---------------------------------------------------------------------------------------------
function drawLines(model, parent) {
  const queries = model.get("query_tokens");
  const keys = model.get("key_tokens");
  const matrices = weightsOf(model)[model.get("layer")];
  const heads = visibleHeads(model);
  const left = textWidth(queries);
  const gap = 170;
  const right = textWidth(keys);
  const barSpace = 46; // room for the weight bars shown while hovering (a full bar is 40 pixels)
  const width = barSpace + left + gap + right + barSpace;
  const height = ROW * Math.max(queries.length, keys.length) + 24;
  const svg = svgNode("svg", { class: "hv-lines-view", width, height, role: "img" }, parent);
  svgNode("text", { x: barSpace + left - 4, y: 12, class: "hv-column-title", "text-anchor": "end" }, svg).textContent =
    "queries";
  svgNode("text", { x: barSpace + left + gap + 4, y: 12, class: "hv-column-title" }, svg).textContent = "keys";
  const x0 = barSpace + left + 4;
  const x1 = barSpace + left + gap - 4;
  const y = (i) => 24 + ROW * i + ROW / 2;
  const lines = svgNode("g", { class: "hv-line-group" }, svg);
  for (const h of heads) {
    matrices[h].forEach((row, i) =>
      row.forEach((w, j) => {
        if (w < MIN_WEIGHT) return;
        svgNode(
          "line",
          {
            class: "hv-line",
            x1: x0, y1: y(i), x2: x1, y2: y(j),
            stroke: headColour(h),
            "stroke-opacity": Math.min(1, w).toFixed(3),
            "stroke-width": 2,
            "data-head": h, "data-query": i, "data-key": j, "data-weight": w,
          },
          lines,
        );
      }),
    );
  }
  const bars = svgNode("g", { class: "hv-bars" }, svg);
  const tokenRow = (tokens, side) =>
    tokens.map((token, i) => {
      const text = svgNode(
        "text",
        {
          class: `hv-token hv-${side}-token`,
          x: side === "query" ? barSpace + left - 4 : barSpace + left + gap + 4,
          y: y(i) + 4,
          "text-anchor": side === "query" ? "end" : "start",
          tabindex: 0,
          "data-index": i,
        },
        svg,
      );
      text.textContent = token;
      const enter = () => focusToken(side, i);
      text.addEventListener("mouseenter", enter);
      text.addEventListener("focus", enter);
      text.addEventListener("mouseleave", clear);
      text.addEventListener("blur", clear);
      return text;
    });
  const queryTexts = tokenRow(queries, "query");
  const keyTexts = tokenRow(keys, "key");

  // Hovering a token keeps only its lines, and draws its weight to every token opposite as bars
  // (one bar per visible head, in the head's colour; a full bar is weight 1).
  function focusToken(side, index) {
    clear();
    svg.classList.add("hv-focused");
    (side === "query" ? queryTexts : keyTexts)[index].classList.add("hv-token-active");
    for (const line of lines.children) {
      const mine = Number(line.getAttribute(side === "query" ? "data-query" : "data-key")) === index;
      line.classList.toggle("hv-hidden", !mine);
    }
    const opposite = side === "query" ? keys : queries;
    opposite.forEach((_, k) =>
      heads.forEach((h, n) => {
        const w = side === "query" ? matrices[h][index][k] : matrices[h][k][index];
        const length = Math.max(0, Math.min(1, w)) * 40;
        const x = side === "query" ? barSpace + left + gap + right : barSpace - 6;
        svgNode(
          "rect",
          {
            class: "hv-bar",
            x: side === "query" ? x : x - length,
            y: y(k) - ROW / 2 + 3 + (n * (ROW - 6)) / heads.length,
            width: length,
            height: Math.max(1, (ROW - 6) / heads.length),
            fill: headColour(h),
          },
          bars,
        ).appendChild(document.createElementNS(SVG, "title")).textContent = `head ${h}: ${w.toFixed(2)}`;
      }),
    );
  }
  function clear() {
    svg.classList.remove("hv-focused");
    for (const t of [...queryTexts, ...keyTexts]) t.classList.remove("hv-token-active");
    for (const line of lines.children) line.classList.remove("hv-hidden");
    bars.replaceChildren();
  }
}

// ---------------------------------------------------------------------------------------------
// Heatmap: rows are queries, columns are keys (as in every figure of the course), viridis 0-1
// ---------------------------------------------------------------------------------------------
function drawHeatmap(model, parent) {
  const queries = model.get("query_tokens");
  const keys = model.get("key_tokens");
  const matrices = weightsOf(model)[model.get("layer")];
  const heads = visibleHeads(model);
  const causal = model.get("kind") === "causal";
  const cell = ROW + 2;
  const left = textWidth(queries);
  const top = textWidth(keys);
  const svg = svgNode(
    "svg",
    { class: "hv-heatmap-view", width: left + cell * keys.length + 110, height: top + cell * queries.length + 4 },
    parent,
  );
  const caption = heads.length === 1 ? `head ${heads[0]}` : `mean of ${heads.length} heads`;
  svgNode("text", { x: left + cell * keys.length + 6, y: top + 12, class: "hv-column-title" }, svg).textContent = caption;
  const mean = queries.map((_, i) =>
    keys.map((__, j) => heads.reduce((sum, h) => sum + matrices[h][i][j], 0) / heads.length),
  );
  const cells = [];
  mean.forEach((row, i) =>
    row.forEach((w, j) => {
      const masked = causal && j > i;
      const rect = svgNode(
        "rect",
        {
          class: masked ? "hv-cell hv-masked" : "hv-cell",
          x: left + j * cell, y: top + i * cell, width: cell - 1, height: cell - 1,
          fill: masked ? "none" : viridis(w),
          "data-query": i, "data-key": j, "data-weight": w,
        },
        svg,
      );
      svgNode("title", {}, rect).textContent = masked
        ? `${queries[i]} may not see the later ${keys[j]} (masked)`
        : `${queries[i]} → ${keys[j]}: ${w.toFixed(2)}`;
      cells.push(rect);
    }),
  );
  const values = svgNode("g", { class: "hv-values" }, svg);
  const label = (tokens, side) =>
    tokens.map((token, i) => {
      const attributes =
        side === "query"
          ? { x: left - 4, y: top + i * cell + cell / 2 + 4, "text-anchor": "end" }
          : { transform: `translate(${left + i * cell + cell / 2 + 4},${top - 4}) rotate(-90)` };
      const text = svgNode(
        "text",
        { ...attributes, class: `hv-token hv-${side}-token`, tabindex: 0, "data-index": i },
        svg,
      );
      text.textContent = token;
      const enter = () => focusToken(side, i, text);
      text.addEventListener("mouseenter", enter);
      text.addEventListener("focus", enter);
      text.addEventListener("mouseleave", clear);
      text.addEventListener("blur", clear);
      return text;
    });
  label(queries, "query");
  label(keys, "key");

  // Hovering a query (a key) dims every other row (column) and writes the weights into its cells.
  function focusToken(side, index, text) {
    clear();
    text.classList.add("hv-token-active");
    for (const rect of cells) {
      const i = Number(rect.getAttribute("data-query"));
      const j = Number(rect.getAttribute("data-key"));
      const mine = side === "query" ? i === index : j === index;
      rect.classList.toggle("hv-hidden", !mine);
      if (mine && !rect.classList.contains("hv-masked")) {
        const w = Number(rect.getAttribute("data-weight"));
        svgNode(
          "text",
          {
            class: "hv-value",
            x: left + j * cell + cell / 2, y: top + i * cell + cell / 2 + 3,
            "text-anchor": "middle", style: `fill: ${w > 0.6 ? "#000" : "#fff"}`,
          },
          values,
        ).textContent = w.toFixed(2).replace(/^0/, "");
      }
    }
  }
  function clear() {
    for (const t of svg.querySelectorAll(".hv-token-active")) t.classList.remove("hv-token-active");
    for (const rect of cells) rect.classList.remove("hv-hidden");
    values.replaceChildren();
  }
}

// ---------------------------------------------------------------------------------------------
// Grid: a thumbnail per layer and head; a click opens that head, alone, in the lines view
// ---------------------------------------------------------------------------------------------
function drawGrid(model, parent) {
  const weights = weightsOf(model);
  const layerNames = model.get("layer_names");
  const L = model.get("query_tokens").length;
  const S = model.get("key_tokens").length;
  const pixel = Math.max(2, Math.floor(72 / Math.max(L, S)));
  const table = node("table", { class: "hv-grid-view" }, parent);
  const header = node("tr", {}, table);
  node("th", {}, header);
  weights[0].forEach((_, h) => {
    const th = node("th", { text: `head ${h}` }, header);
    th.style.color = headColour(h);
  });
  weights.forEach((layer, l) => {
    const tr = node("tr", {}, table);
    node("th", { class: "hv-grid-layer", text: layerNames[l] }, tr);
    layer.forEach((matrix, h) => {
      const td = node("td", {}, tr);
      const canvas = node(
        "canvas",
        {
          class: "hv-thumb", width: S * pixel, height: L * pixel, "data-layer": l, "data-head": h,
          title: `${layerNames[l]}, head ${h}: click to enlarge`, tabindex: 0,
        },
        td,
      );
      canvas.style.borderColor = headColour(h);
      const context = canvas.getContext("2d");
      matrix.forEach((row, i) =>
        row.forEach((w, j) => {
          context.fillStyle = viridis(w);
          context.fillRect(j * pixel, i * pixel, pixel, pixel);
        }),
      );
      const open = () => {
        model.set("layer", l);
        model.set("head", h);
        model.set("view", "lines");
        model.save_changes();
      };
      canvas.addEventListener("click", open);
      canvas.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") open();
      });
    });
  });
}

const KIND_TEXT = {
  self: "self-attention: every token looks at every token of its own sentence",
  causal: "masked self-attention: a token looks only at itself and the tokens before it",
  cross: "cross-attention: target tokens (queries) look at source tokens (keys)",
};

function draw(root, model) {
  root.replaceChildren();
  const title = model.get("title");
  node("div", { class: "hv-title", text: title || KIND_TEXT[model.get("kind")] }, root);
  drawControls(model, root);
  const body = node("div", { class: "hv-body" }, root);
  const view = model.get("view");
  if (view === "grid") drawGrid(model, body);
  else if (view === "heatmap") drawHeatmap(model, body);
  else drawLines(model, body);
  node(
    "div",
    {
      class: "hv-hint",
      text:
        view === "grid"
          ? "Click a thumbnail to open that head."
          : "Hover a token to see only its weights; click a head to show it alone.",
    },
    root,
  );
}

function render({ model, el }) {
  const root = node("div", { class: "hv-root" }, el);
  const redraw = () => draw(root, model);
  const events = ["change:layer", "change:head", "change:view", "change:weights_uint8"];
  for (const event of events) model.on(event, redraw);
  redraw();
  return () => {
    for (const event of events) model.off(event, redraw);
  };
}

// The page-side stand-in for a widget model, for exported HTML: same get/set/on, no kernel.
function staticModel(state) {
  const listeners = {};
  return {
    get: (name) => state[name],
    set(name, value) {
      state[name] = value;
      for (const listener of listeners[`change:${name}`] || []) listener();
    },
    save_changes() {},
    on(event, listener) {
      (listeners[event] = listeners[event] || []).push(listener);
    },
    off(event, listener) {
      listeners[event] = (listeners[event] || []).filter((l) => l !== listener);
    },
  };
}

// One copy of this file per notebook or page: later head views find it here (static/head_view_stub.js).
globalThis.helpersHeadView = { render, staticModel, decodeWeights };

export default { render };
