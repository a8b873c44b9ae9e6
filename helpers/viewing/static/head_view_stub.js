// A head view whose drawing code another head view of the same notebook carries (head_view.js, sent
// with the first head view a kernel shows; see helpers/viewing/head_view.py). It waits for that code to
// register itself as globalThis.helpersHeadView, then draws with it.

const WAIT_MS = 30000;

function library() {
  return new Promise((resolve, reject) => {
    const start = Date.now();
    (function poll() {
      if (globalThis.helpersHeadView) resolve(globalThis.helpersHeadView);
      else if (Date.now() - start > WAIT_MS) reject(new Error("head_view.js was not loaded"));
      else setTimeout(poll, 25);
    })();
  });
}

async function render({ model, el }) {
  try {
    return (await library()).render({ model, el });
  } catch (error) {
    el.textContent =
      "This head view draws with the script of the notebook's first head view, which did not load: " +
      "run the notebook from the top (Run All) to redraw it.";
    return undefined;
  }
}

export default { render };
