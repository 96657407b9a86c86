// The REST client of the UI. Every call carries the bearer token in the
// Authorization header; the token never goes into a URL (URLs end up in
// access logs, browser history and Referer headers).
//
// The token lives in sessionStorage: it survives reloads of the tab but
// not the tab itself, and other tabs and later visits never see it, which
// keeps a pasted admin token's exposure short. (localStorage would keep it
// on disk until logout.) Any script on the page could read either, which
// is why the page runs no script but its own (Content-Security-Policy) and
// renders user data as text only (dom.ts).

import type { Problem } from "./types";

const TOKEN_KEY = "atelier.token";
const PROJECT_KEY = "atelier.project";

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t: string): void {
  sessionStorage.setItem(TOKEN_KEY, t);
}

export function logout(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(PROJECT_KEY);
}

export function lastProject(): string | null {
  return sessionStorage.getItem(PROJECT_KEY);
}

export function rememberProject(p: string): void {
  sessionStorage.setItem(PROJECT_KEY, p);
}

/** ApiError is a failed call, with the gateway's RFC 9457 problem. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(problem.detail || problem.title || `HTTP ${status}`);
  }
}

/** onUnauthorized is called on a 401 (set by main: back to the login form). */
export let onUnauthorized: () => void = () => {};
export function setOnUnauthorized(f: () => void): void {
  onUnauthorized = f;
}

function headers(extra?: Record<string, string>, token = getToken()): Record<string, string> {
  return { Authorization: `Bearer ${token ?? ""}`, ...extra };
}

async function fail(r: Response): Promise<never> {
  let p: Problem = { status: r.status, title: r.statusText };
  try {
    p = (await r.json()) as Problem;
  } catch {
    /* not a problem document */
  }
  if (r.status === 401) onUnauthorized();
  throw new ApiError(r.status, p);
}

const base: RequestInit = { cache: "no-store", credentials: "omit", redirect: "error" };

/** call sends one JSON request (with any extra headers) and decodes the JSON answer. */
export async function call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal, token?: string, extra?: Record<string, string>): Promise<T> {
  const init: RequestInit = { ...base, method, signal, headers: headers({ Accept: "application/json", ...extra }, token ?? getToken()) };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)["Content-Type"] = "application/json";
  }
  const r = await fetch(path, init);
  if (!r.ok) return fail(r);
  if (r.status === 204) return undefined as T;
  return (await r.json()) as T;
}

export function get<T>(path: string, signal?: AbortSignal): Promise<T> {
  return call<T>("GET", path, undefined, signal);
}

/**
 * fetchBlob reads a route's bytes (an artifact's content) with the token,
 * which a plain link could not send, as a Blob to preview or save.
 */
export async function fetchBlob(path: string, signal?: AbortSignal): Promise<Blob> {
  const r = await fetch(path, { ...base, signal, headers: headers() });
  if (!r.ok) return fail(r);
  return r.blob();
}

/**
 * idempotencyKey is a fresh random Idempotency-Key (128 bits, hex), so a
 * start sent again with the same body (a double click, a retry after a
 * lost answer) returns the run the first one created. getRandomValues,
 * unlike randomUUID, works on a gateway served over plain HTTP too.
 */
export function idempotencyKey(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return `ui-${Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")}`;
}

/**
 * enc escapes one path segment. A colon is left as it is (RFC 3986 allows
 * it in a segment): a scheduled run's ID holds one
 * (`sched.<project>.<name>-2025-06-01T02:00:00Z`), and the gateway checks
 * path parameters against their pattern before unescaping them, so
 * `%3A` would be refused (400).
 */
export const enc = (segment: string): string => encodeURIComponent(segment).replace(/%3A/gi, ":");

export function query(params: Record<string, string | number | boolean | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });

/**
 * streamEvents follows a run's server-sent events. EventSource cannot send
 * an Authorization header, so this reads the stream with fetch and parses
 * the SSE format itself, reconnecting with Last-Event-ID (as EventSource
 * would) until the server answers 204: the run is over and its end was
 * seen. It resolves then, or when signal aborts.
 */
export async function streamEvents(
  path: string,
  onEvent: (name: string, data: string) => void,
  signal: AbortSignal,
  onError?: (e: unknown) => void,
  /** over says the events showed the end: a stream that ends then is not reopened. */
  over?: () => boolean,
): Promise<void> {
  let lastId = "";
  let retry = 3000;
  while (!signal.aborted) {
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (lastId) h["Last-Event-ID"] = lastId;
      const r = await fetch(path, { ...base, signal, headers: h });
      if (r.status === 204) return;
      if (!r.ok) await fail(r);
      const reader = r.body!.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        // Events end with a blank line; lines end with \n, \r\n or \r.
        let m: RegExpExecArray | null;
        while ((m = /\r\n\r\n|\n\n|\r\r/.exec(buf))) {
          const block = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          let name = "message";
          const data: string[] = [];
          for (const line of block.split(/\r\n|\n|\r/)) {
            if (line === "" || line.startsWith(":")) continue;
            const i = line.indexOf(":");
            const field = i < 0 ? line : line.slice(0, i);
            const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
            if (field === "event") name = val;
            else if (field === "data") data.push(val);
            else if (field === "id") lastId = val;
            else if (field === "retry" && /^\d+$/.test(val)) retry = Number(val);
          }
          if (data.length) onEvent(name, data.join("\n"));
        }
      }
      if (over?.()) return;
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && (e.status === 401 || e.status === 403 || e.status === 404)) {
        onError?.(e);
        return;
      }
      onError?.(e);
    }
    await sleep(retry, signal);
  }
}

/**
 * followLog streams one attempt's log from offset 0 (follow=true), calling
 * onData with each piece of text, until the attempt is over (the server
 * ends the stream and a last read says the log is complete) or signal
 * aborts. A dropped connection resumes at the byte offset reached.
 */
export async function followLog(path: string, onData: (text: string) => void, signal: AbortSignal, onState: (s: "streaming" | "complete" | "error", msg?: string) => void): Promise<void> {
  let offset = 0;
  const sep = path.includes("?") ? "&" : "?";
  while (!signal.aborted) {
    try {
      onState("streaming");
      const r = await fetch(`${path}${sep}follow=true&offset=${offset}`, { ...base, signal, headers: headers() });
      if (!r.ok) await fail(r);
      const reader = r.body!.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        offset += value.byteLength;
        onData(dec.decode(value, { stream: true }));
      }
      onData(dec.decode());
      // The stream ended: the attempt is over, or the connection dropped.
      // A plain read from the offset tells which (and returns any rest).
      const p = await fetch(`${path}${sep}offset=${offset}`, { ...base, signal, headers: headers() });
      if (!p.ok) await fail(p);
      const rest = new Uint8Array(await p.arrayBuffer());
      offset += rest.byteLength;
      if (rest.byteLength) onData(new TextDecoder().decode(rest));
      if (p.headers.get("X-Atelier-Log-Complete") === "true") {
        onState("complete");
        return;
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError) {
        onState("error", e.message);
        if (e.status !== 429 && e.status < 500) return;
      } else {
        onState("error", "connection lost; reconnecting");
      }
    }
    await sleep(2000, signal);
  }
}
