// DOM building without HTML strings. Everything a page shows (step names,
// logs, outputs, errors) is user data: it only ever reaches the document as
// text nodes or attribute values set through the DOM API, never through
// innerHTML, so nothing a pipeline writes can become markup or script.

export type Child = Node | string | number | null | undefined | false | Child[];
export type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent: Node, kids: Child[]): void {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) append(parent, k);
    else if (k instanceof Node) parent.appendChild(k);
    else parent.appendChild(document.createTextNode(String(k)));
  }
}

function setAttrs(el: Element, attrs: Attrs | undefined): void {
  if (!attrs) return;
  for (const [name, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") {
      el.addEventListener(name.replace(/^on/, ""), v);
    } else if (name === "href") {
      const safe = safeHref(String(v));
      if (safe !== null) el.setAttribute("href", safe);
    } else {
      el.setAttribute(name, v === true ? "" : String(v));
    }
  }
}

/** h creates an HTML element: h("a", {href, class}, "text", child...). */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs, ...kids: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, kids);
  return el;
}

/** s creates an SVG element. */
export function s(tag: string, attrs?: Attrs, ...kids: Child[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag) as SVGElement;
  setAttrs(el, attrs);
  append(el, kids);
  return el;
}

/** replace empties el and appends kids. */
export function replace(el: Element, ...kids: Child[]): void {
  el.replaceChildren();
  append(el, kids);
}

/**
 * safeHref lets through same-document fragments, same-origin paths and
 * absolute http(s) URLs; anything else (javascript:, data:, ...), which a
 * step's links could carry, is dropped.
 */
export function safeHref(v: string): string | null {
  if (v.startsWith("#")) return v;
  try {
    const u = new URL(v, window.location.href);
    if (u.protocol === "http:" || u.protocol === "https:") return u.href;
  } catch {
    /* not a URL */
  }
  return null;
}

/** fmtTime renders an RFC 3339 time in local time, to the second. */
export function fmtTime(iso?: string): string {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d.getTime())) return iso;
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** fmtDuration renders the time from start to end (or now): 1h 2m, 3m 4s, 5.2s. */
export function fmtDuration(start?: string, end?: string): string {
  if (!start) return "";
  const ms = (end ? Date.parse(end) : Date.now()) - Date.parse(start);
  if (!(ms >= 0)) return "";
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`;
  const sec = Math.round(ms / 1000);
  const hr = Math.floor(sec / 3600);
  const min = Math.floor((sec % 3600) / 60);
  if (hr > 0) return `${hr}h ${min}m`;
  if (min > 0) return `${min}m ${sec % 60}s`;
  return `${sec}s`;
}

/** fmtBytes renders a size in bytes: 812 B, 4.2 KiB, 37 MiB. */
export function fmtBytes(n: number): string {
  if (!(n >= 0)) return "";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** json pretty-prints a value for a <pre>. */
export function json(v: unknown): string {
  return JSON.stringify(v, null, 2) ?? "";
}

/** badge is a coloured state pill (colours in app.css by data-state). */
export function badge(state: string, id?: string): HTMLElement {
  return h("span", { class: "badge", "data-state": state, id }, state.replace(/_/g, " "));
}
