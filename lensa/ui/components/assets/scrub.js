// Lensa's scrub component (lensa/ui/components/scrub.py): a step's sliders, charts and cards.
//
// The server sends every stop's frame (one whole, the others as differences from it). While a slider is dragged
// or moved by keys, each `input` event shows that stop's frame here, with Plotly and no server round trip;
// when the gesture ends the component sets its state once and the server reruns the lesson once. The JavaScript
// draws nothing itself: the charts are the plotly JSON the server built, the cards and tables its text.

const MOUNTS = new WeakMap();
const KEY_COMMIT_MS = 300; // a key let go with no other key within this time ends the gesture
const LIVE_MS = 700; // the cards are read out this long after the last move (a screen reader's live region)
const PENDING_MS = 4000; // how long a sent value outranks an older one the server is still answering with
const COMPACT_PX = 560; // narrower than this, a chart takes its phone height
const STEP_KEYS = new Set(["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End"]);
// The axes are fixed (the server's figures say fixedrange): no zoom, pan or double-click to set up at every stop.
const PLOTLY_CONFIG = { displayModeBar: false, responsive: true, scrollZoom: false, doubleClick: false, showTips: false };
// While the hand moves, a stop whose chart differs from the last drawn one only in its traces' data goes through
// Plotly.animate with no redraw and no transition: Plotly recomputes those traces and moves their points, and keeps
// the axes, shapes, annotations and legend it drew (react draws them all again at every stop). "immediate": a
// newer stop replaces one still waiting for its frame. The gesture's end draws its stop with react, at rest.
const ANIMATE_NOW = { mode: "immediate", transition: { duration: 0 }, frame: { duration: 0, redraw: false } };
const DATA_KEYS = new Set(["x", "y", "text", "hovertext", "customdata"]);
const ANIMATED_TYPES = new Set(["bar", "scatter", undefined]);
let plotly = null;

function loadPlotly(file) {
  if (!plotly) plotly = import(new URL(`./${file}`, import.meta.url)).then(() => window.Plotly);
  return plotly;
}

// The browser's half of scrub.py's delta/patch.
export function patch(base, d) {
  if (d === null || d === undefined) return base;
  if ("=" in d) return d["="];
  if ("$" in d) {
    const out = { ...base };
    for (const [k, sub] of Object.entries(d.$)) out[k] = patch(base ? base[k] : undefined, sub);
    for (const k of d["-"] || []) delete out[k];
    return out;
  }
  const items = base.slice();
  for (const [i, sub] of Object.entries(d["@"])) items[Number(i)] = patch(items[Number(i)], sub);
  return items;
}

function el(tag, className, attrs = {}) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// Captions, titles and "Try this" are the catalogue's text: **bold**, *italic*, `code` and a glossary link
// [words](glossary?lang=..&term=..) are written as such (it opens beside the page, as the page's own links do; any
// other link reads as its words), nothing else is markup (and nothing is ever parsed as HTML).
const LINK = /^\[([^\]]+)\]\(([^)]*)\)$/;
const GLOSSARY_HREF = /^glossary\?lang=[a-z]+&term=[a-z0-9_]+$/;
function setRich(node, text) {
  node.replaceChildren();
  for (const piece of String(text || "").split(/(\[[^\]]+\]\([^)]*\)|\*\*[^*]+\*\*|\*[^*]+\*|`[^`]+`)/)) {
    if (!piece) continue;
    const link = LINK.exec(piece);
    if (link && GLOSSARY_HREF.test(link[2])) {
      const a = node.appendChild(el("a", "lensa-term", { href: link[2], target: "_blank", rel: "noopener" }));
      a.textContent = link[1];
    } else if (link) {
      node.appendChild(document.createTextNode(link[1]));
    } else if (piece.startsWith("**") && piece.endsWith("**") && piece.length > 4) {
      node.appendChild(el("strong")).textContent = piece.slice(2, -2);
    } else if (piece.startsWith("*") && piece.endsWith("*") && piece.length > 2) {
      node.appendChild(el("em")).textContent = piece.slice(1, -1);
    } else if (piece.startsWith("`") && piece.endsWith("`") && piece.length > 2) {
      node.appendChild(el("code")).textContent = piece.slice(1, -1);
    } else {
      node.appendChild(document.createTextNode(piece));
    }
  }
}

// The server's phone layout for a chart, over its own: objects merge key by key, anything else replaces.
function merge(base, over) {
  const out = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = base[k];
    out[k] = v && typeof v === "object" && !Array.isArray(v) && b && typeof b === "object" && !Array.isArray(b)
      ? merge(b, v) : v;
  }
  return out;
}

// ``layout`` with the margins fixed at ``margins`` and no axis fitting them to its labels (see fillChart).
const AXIS = /^[xy]axis\d*$/;
function frozen(layout, margins) {
  const out = { ...layout, margin: margins };
  for (const k of new Set([...Object.keys(layout), ...Object.keys(layout.template.layout)])) {
    if (AXIS.test(k)) out[k] = { ...(layout[k] || {}), automargin: false };
  }
  return out;
}

function same(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

// Traces of Plotly's own: it keeps the ones it is given as the chart's and writes a stop's data into them in place
// (Plotly.animate), where they would change the frames they came from.
function own(data) {
  return data.map((trace) => ({ ...trace }));
}

// Whether traces ``after`` differ from ``before`` only in their data arrays (the frames share what did not change).
function onlyData(before, after) {
  if (!before || before.length !== after.length) return false;
  return after.every((trace, t) => {
    const old = before[t];
    if (!ANIMATED_TYPES.has(trace.type) || old.type !== trace.type) return false;
    const keys = Object.keys(trace);
    if (keys.length !== Object.keys(old).length) return false;
    // A trace that empties or fills again is drawn anew (Plotly's animation leaves an emptied trace's points).
    if (!(trace.x || []).length !== !(old.x || []).length) return false;
    return keys.every((k) => trace[k] === old[k] || (DATA_KEYS.has(k) && k in old));
  });
}

class Scrub {
  constructor(parent) {
    this.root = el("div", "lensa-scrub");
    this.root.dataset.testid = "lensaScrub";
    this.sliderBox = el("div", "lensa-sliders");
    this.blockBox = el("div", "lensa-blocks");
    this.live = el("div", "lensa-live", { "aria-live": "polite", role: "status" });
    this.root.append(this.sliderBox, this.blockBox, this.live);
    parent.appendChild(this.root);
    this.texts = [];
    this.parts = [];
    this.at = [];
    this.sent = null; // {at, time}: the last values this component sent, until the server answers with them
    this.pointer = false;
    this.keyTimer = null;
    this.liveTimer = null;
    this.drawn = null;
    this.frameCache = new Map();
    this.compact = null;
    this.template = null;
    this.frameRequest = null;
    this.pendingDraw = 0;
    this.gestures = 0;
    this.token = Math.random().toString(36).slice(2, 10);
    this.resize = new ResizeObserver(() => this.onResize());
    this.resize.observe(this.root);
    this.onPointerEnd = () => this.pointerEnd();
    window.addEventListener("pointerup", this.onPointerEnd, true);
    window.addEventListener("pointercancel", this.onPointerEnd, true);
  }

  // When Streamlit unmounts the component (another page): nothing of it stays behind.
  destroy() {
    this.resize.disconnect();
    window.removeEventListener("pointerup", this.onPointerEnd, true);
    window.removeEventListener("pointercancel", this.onPointerEnd, true);
    for (const timer of [this.keyTimer, this.liveTimer]) if (timer !== null) clearTimeout(timer);
    if (this.frameRequest !== null) cancelAnimationFrame(this.frameRequest);
    if (window.Plotly) for (const view of this.blocks || []) if (view.plot) window.Plotly.purge(view.plot);
    this.root.remove();
  }

  update(data, setStateValue) {
    this.setStateValue = setStateValue;
    this.plotlyFile = data.plotly;
    this.lang = data.lang;
    const texts = data.parts;
    const changed = !same(texts, this.texts);
    if (changed) {
      this.parts = texts.map((t, i) => (this.texts[i] === t && this.parts[i] ? this.parts[i] : JSON.parse(t)));
      this.texts = texts.slice();
      this.frameCache.clear();
    }
    const structure = this.parts.map((p) => `${p.name}:${p.stops.length}`).join("|")
      + "#" + this.parts[0].base.map((b) => b.k).join(",");
    if (structure !== this.structure) this.build(structure);
    const now = performance.now();
    const waiting = this.sent && !same(data.at, this.sent.at) && now - this.sent.time < PENDING_MS;
    this.serverAt = data.at.slice();
    if (!this.busy() && !waiting) {
      this.at = data.at.slice();
      this.sent = null;
    }
    this.syncInputs();
    this.template = this.theme(); // read once per update: getComputedStyle on every stop would force a restyle
    this.compact = this.root.clientWidth < COMPACT_PX;
    this.draw(0, true);
  }

  busy() {
    return this.pointer || this.keyTimer !== null;
  }

  build(structure) {
    this.structure = structure;
    this.sliderBox.replaceChildren();
    this.inputs = this.parts.map((part, s) => {
      const box = el("div", "lensa-slider");
      const id = `lensa-scrub-${this.token}-${part.name}`;
      const label = el("label", "lensa-slider-label", { for: id });
      const name = el("span", "lensa-slider-name");
      name.textContent = part.label;
      const value = el("output", "lensa-slider-value", { for: id });
      label.append(name, value);
      const input = el("input", "lensa-slider-input", {
        type: "range", id, min: "0", max: String(part.stops.length - 1), step: "1",
      });
      input.dataset.name = part.name;
      box.append(label, input);
      if (part.help) {
        const help = el("div", "lensa-slider-help", { id: `${id}-help` });
        help.textContent = part.help;
        input.setAttribute("aria-describedby", help.id);
        // On a phone the help folds away behind a button beside the label, to keep the picture on the screen.
        const more = el("button", "lensa-slider-more", {
          type: "button", "aria-expanded": "false", "aria-controls": help.id, "aria-label": part.about || part.label,
        });
        more.textContent = "?";
        more.addEventListener("click", () => {
          const open = box.classList.toggle("lensa-help-open");
          more.setAttribute("aria-expanded", String(open));
        });
        label.insertBefore(more, value);
        box.appendChild(help);
      }
      input.addEventListener("input", () => this.onInput(s));
      input.addEventListener("pointerdown", () => { this.pointer = true; });
      input.addEventListener("change", () => { if (!this.pointer && this.keyTimer === null) this.commit(); });
      input.addEventListener("keydown", (e) => { if (STEP_KEYS.has(e.key)) this.keyDown(); });
      input.addEventListener("keyup", (e) => { if (STEP_KEYS.has(e.key)) this.keyUp(); });
      input.addEventListener("blur", () => { if (this.keyTimer !== null) this.flushKeys(); });
      this.sliderBox.appendChild(box);
      return { input, value };
    });
    this.blockBox.replaceChildren();
    this.blocks = this.parts[0].base.map((block) => {
      if (block.k === "cards") return this.buildCards();
      if (block.k === "note") return this.buildNote();
      return this.buildChart();
    });
  }

  buildCards() {
    const node = el("div", "lensa-cards");
    this.blockBox.appendChild(node);
    return { kind: "cards", node, cards: [] };
  }

  buildNote() {
    const node = el("div", "lensa-note", { role: "note" });
    this.blockBox.appendChild(node);
    return { kind: "note", node, text: null };
  }

  fillNote(view, block) {
    const text = `${block.label}\u0000${block.text}`;
    if (view.text === text) return;
    view.text = text;
    const label = el("strong", "lensa-note-label");
    label.textContent = block.label;
    const body = el("span");
    setRich(body, block.text);
    view.node.replaceChildren(label, document.createTextNode(" "), body);
  }

  buildChart() {
    const node = el("figure", "lensa-chart");
    const title = el("div", "lensa-chart-title");
    const plot = el("div", "lensa-plot", { role: "img" });
    const caption = el("figcaption", "lensa-chart-caption");
    node.append(title, plot, caption);
    this.blockBox.appendChild(node);
    return { kind: "chart", node, title, plot, caption };
  }

  syncInputs() {
    this.inputs.forEach(({ input, value }, s) => {
      const i = this.at[s];
      if (input.valueAsNumber !== i) input.value = String(i);
      const text = this.parts[s].stops[i];
      input.setAttribute("aria-valuetext", text);
      value.textContent = text;
    });
  }

  frame(s, i) {
    const key = `${s}:${i}`;
    let frame = this.frameCache.get(key);
    if (!frame) {
      frame = patch(this.parts[s].base, this.parts[s].frames[i]);
      this.frameCache.set(key, frame);
    }
    return frame;
  }

  onInput(s) {
    const i = this.inputs[s].input.valueAsNumber;
    if (Number.isNaN(i)) return;
    this.at[s] = i;
    this.syncInputs();
    // One draw a frame, of the latest stop: a hand moves faster than a chart redraws, and a queue of stale
    // stops would only make the picture lag behind it.
    this.pendingDraw = s;
    if (this.quick(s, i)) {
      if (this.frameRequest !== null) cancelAnimationFrame(this.frameRequest);
      this.frameRequest = null;
      this.draw(s, false, true); // its charts drawn by Plotly.animate, before the coming frame is painted
    } else if (this.frameRequest === null) {
      this.frameRequest = requestAnimationFrame(() => {
        this.frameRequest = null;
        this.draw(this.pendingDraw, false);
      });
    }
    this.announceLater();
  }

  // Whether stop ``i`` of slider ``s`` can be drawn by the quick path on every chart (see ANIMATE_NOW).
  quick(s, i) {
    if (!window.Plotly || !this.busy()) return false;
    const frame = this.frame(s, i);
    return frame.every((block, b) => {
      const view = this.blocks[b];
      return !view || view.kind !== "chart" || this.animatable(view, block);
    });
  }

  animatable(view, block) {
    return Boolean(view.margins) && !view.reacting && view.layoutFrom === block.fig.layout
      && view.compactDrawn === this.compact && onlyData(view.data, block.fig.data);
  }

  keyDown() {
    if (this.keyTimer !== null) clearTimeout(this.keyTimer);
    this.keyTimer = setTimeout(() => this.flushKeys(), KEY_COMMIT_MS * 10); // a key held down
  }

  keyUp() {
    if (this.keyTimer !== null) clearTimeout(this.keyTimer);
    this.keyTimer = setTimeout(() => this.flushKeys(), KEY_COMMIT_MS);
  }

  flushKeys() {
    if (this.keyTimer !== null) clearTimeout(this.keyTimer);
    this.keyTimer = null;
    this.drawLatest();
    this.commit();
  }

  pointerEnd() {
    if (!this.pointer) return;
    this.pointer = false;
    this.drawLatest(); // at rest: margins fitted again
    this.commit();
  }

  commit() {
    const last = this.sent ? this.sent.at : this.serverAt;
    if (last && same(last, this.at)) return;
    this.gestures += 1;
    const v = {};
    this.parts.forEach((part, s) => { v[part.name] = this.at[s]; });
    this.sent = { at: this.at.slice(), time: performance.now() };
    this.setStateValue("value", { g: `${this.token}-${this.gestures}`, v });
  }

  announceLater() {
    if (this.liveTimer !== null) clearTimeout(this.liveTimer);
    this.liveTimer = setTimeout(() => {
      this.liveTimer = null;
      if (!this.root.contains(document.activeElement)) return;
      const cards = this.blocks.find((b) => b.kind === "cards");
      if (!cards) return;
      this.live.textContent = cards.cards.map(([l, v]) => `${l}: ${v}`).join("; ");
    }, LIVE_MS);
  }

  onResize() {
    const compact = this.root.clientWidth < COMPACT_PX;
    if (compact === this.compact || !this.drawn) return;
    this.compact = compact;
    this.draw(this.drawn.s, true);
  }

  theme() {
    const css = getComputedStyle(this.root);
    const text = css.getPropertyValue("--st-text-color").trim() || css.color;
    const font = css.getPropertyValue("--st-font").trim() || css.fontFamily;
    const grid = "rgba(128,128,128,0.22)";
    const axis = { gridcolor: grid, zerolinecolor: "rgba(128,128,128,0.45)", linecolor: grid, automargin: true };
    return {
      layout: {
        font: { family: font, color: text },
        paper_bgcolor: "rgba(0,0,0,0)",
        plot_bgcolor: "rgba(0,0,0,0)",
        xaxis: axis,
        yaxis: axis,
        yaxis2: axis,
        legend: { bgcolor: "rgba(0,0,0,0)" },
        hoverlabel: { font: { family: font } },
        dragmode: false,
      },
    };
  }

  draw(s, force, quick = false) {
    const i = this.at[s];
    if (!force && this.drawn && this.drawn.s === s && this.drawn.i === i) return;
    const frame = this.frame(s, i);
    this.drawn = { s, i };
    const template = this.template || this.theme();
    const at = this.at.join(",");
    // On the quick path (see quick) the cards and notes are written when Plotly first changes a chart, in the same
    // turn, so that no frame on the screen mixes two stops.
    const texts = () => frame.forEach((block, b) => {
      const view = this.blocks[b];
      if (!view) return;
      if (view.kind === "cards") this.fillCards(view, block.cards);
      else if (view.kind === "note") this.fillNote(view, block);
    });
    if (!quick) texts();
    const charts = frame.map((block, b) => {
      const view = this.blocks[b];
      return view && view.kind === "chart" ? this.fillChart(view, block, template, quick, texts) : true;
    });
    // "lensa-drawn" tells a watcher (the tests, bench/scrub.py) that a stop's charts and cards are drawn.
    const done = (drawn) => {
      if (!drawn.every(Boolean)) return; // replaced by a newer stop before its frame
      this.root.dataset.at = at; // the stop the page shows
      this.root.dispatchEvent(new CustomEvent("lensa-drawn", { detail: { at }, bubbles: true }));
    };
    Promise.all(charts).then(done);
  }

  drawLatest() {
    if (this.drawn) this.draw(this.drawn.s, true);
  }

  fillCards(view, cards) {
    if (view.node.childElementCount !== cards.length) {
      view.node.replaceChildren();
      for (let c = 0; c < cards.length; c += 1) {
        const card = el("div", "lensa-card");
        card.append(el("div", "lensa-card-label"), el("div", "lensa-card-value"));
        view.node.appendChild(card);
      }
    }
    cards.forEach(([label, value], c) => {
      const card = view.node.children[c];
      if (card.firstChild.textContent !== label) card.firstChild.textContent = label;
      if (card.lastChild.textContent !== value) card.lastChild.textContent = value;
    });
    view.cards = cards;
  }

  // Plotly.animate leaves the bars it adds unstyled (black): they take their trace's colours from a style-only
  // restyle to the colours they have, before the frame is painted.
  restyleBars(view, data) {
    const traces = [];
    const colors = [];
    data.forEach((trace, t) => {
      if (trace.type === "bar" && trace.marker && trace.marker.color !== undefined) {
        traces.push(t);
        colors.push(trace.marker.color);
      }
    });
    if (traces.length) window.Plotly.restyle(view.plot, { "marker.color": colors }, traces);
  }

  // Draws one chart; a promise of whether it was drawn (false: a newer stop took its place first).
  fillChart(view, block, template, quick, onShown) {
    if (view.titleText !== block.title) {
      view.titleText = block.title;
      setRich(view.title, block.title);
      view.title.hidden = !block.title;
    }
    if (view.captionText !== block.caption) {
      view.captionText = block.caption;
      setRich(view.caption, block.caption);
      view.caption.hidden = !block.caption;
    }
    if (view.plot.getAttribute("aria-label") !== block.alt) view.plot.setAttribute("aria-label", block.alt);
    view.spec = block.fig; // what the server built, for the tests: the browser adds only the theme and height
    if (!window.Plotly) {
      loadPlotly(this.plotlyFile).then(() => this.drawLatest());
      return false;
    }
    if (quick) {
      const data = block.fig.data;
      view.data = data;
      const traces = data.map((_, t) => t);
      const animation = window.Plotly.animate(view.plot, { data: own(data), traces }, ANIMATE_NOW);
      const settled = animation.then(() => true, () => false); // drawn, or replaced by a newer stop
      view.animation = settled;
      settled.then(() => { if (view.animation === settled) view.animation = null; });
      // Plotly draws the traces in the promises that follow this call, or in its own callback of the coming frame
      // when an animation of its own is still under way, and says it is done only a frame later. Its first change
      // to the chart is seen here in the same turn, so that the cards are written with it and no frame on the
      // screen, and no state of the page, mixes two stops.
      const shown = () => view.plot.data.every((trace, t) => trace.x === data[t].x && trace.y === data[t].y);
      // The cards are written with the chart's first change (onShown, the same turn); the drawn stop is told
      // in the coming frame's callback, once its new bars have their colours.
      let told = false;
      const tell = () => { if (!told) { told = true; onShown(); } };
      return new Promise((resolve) => {
        let ended = false;
        const finish = (drawn) => {
          if (ended) return;
          ended = true;
          observer.disconnect();
          if (drawn) {
            tell();
            this.restyleBars(view, data);
          }
          resolve(drawn);
        };
        const observer = new MutationObserver(() => { if (shown()) tell(); });
        observer.observe(view.plot, { subtree: true, childList: true, attributes: true });
        requestAnimationFrame(() => { if (shown()) finish(true); else settled.then(finish); });
      });
    }
    let layout = { ...block.fig.layout, template };
    if (this.compact && block.compact) {
      layout = merge(layout, block.compact.layout || {});
      if (block.compact.height) layout.height = block.compact.height;
    }
    const height = `${layout.height || 360}px`;
    if (view.plot.style.height !== height) view.plot.style.height = height;
    // While the hand moves, the margins stay those of the last draw at rest: measuring the tick labels for them
    // at every stop (automargin) is a fifth of a redraw, and a margin that changed would make Plotly draw the
    // chart a second time. The gesture's end draws its stop at rest again, with margins fitted to its labels.
    const moving = this.busy() && view.margins;
    if (moving) layout = frozen(layout, view.margins);
    view.data = block.fig.data;
    view.layoutFrom = block.fig.layout;
    view.compactDrawn = this.compact;
    const ticket = (view.ticket || 0) + 1;
    view.ticket = ticket;
    const react = () => {
      if (view.ticket !== ticket) return false; // a newer stop's react came while this one waited
      view.reacting = false;
      return window.Plotly.react(view.plot, own(block.fig.data), layout, PLOTLY_CONFIG).then(() => {
        if (!moving && view.plot._fullLayout && view.plot._fullLayout._size) {
          const { l, r, t, b, p } = view.plot._fullLayout._size;
          view.margins = { l, r, t, b, pad: p, autoexpand: false };
        }
        return true;
      });
    };
    // A stop Plotly.animate has yet to draw would land over this one: react once it has (or was replaced), and
    // until then no stop takes the quick path (it would start from a chart that is not yet this one).
    const waiting = view.animation;
    view.animation = null;
    if (!waiting) return react();
    view.reacting = true;
    return waiting.then(react);
  }

}

export default function (args) {
  const { data, parentElement, setStateValue } = args;
  if (!data || !Array.isArray(data.parts) || !data.parts.length) return undefined;
  let scrub = MOUNTS.get(parentElement);
  if (!scrub) {
    scrub = new Scrub(parentElement);
    MOUNTS.set(parentElement, scrub);
  }
  scrub.update(data, setStateValue);
  // Streamlit keeps the cleanup of the latest call and runs it when the component unmounts; an older call's
  // cleanup can still run late (a rerun's data arriving while the last was loading): only the latest counts.
  scrub.generation = (scrub.generation || 0) + 1;
  const generation = scrub.generation;
  return () => {
    if (scrub.generation !== generation) return;
    MOUNTS.delete(parentElement);
    scrub.destroy();
  };
}
