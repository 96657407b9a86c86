// Durations as the gateway writes them (Go's time.Duration: "1h0m0s",
// "90s", "8760h0m0s"), shown without their zero parts: "1h", "1m30s",
// "365d".

const UNIT_MS: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 0.001, "µs": 0.001, ns: 0.000001 };

/** goDurationMs parses a Go duration string; undefined when it is not one. */
export function goDurationMs(s: string): number | undefined {
  if (s === "0" || s === "0s") return 0;
  const re = /(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)/gy;
  let total = 0;
  let n = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) {
    total += Number(m[1]) * UNIT_MS[m[2]];
    n = re.lastIndex;
  }
  return n === s.length && n > 0 ? total : undefined;
}

/** fmtGoDuration renders a Go duration string briefly; anything else as it is. */
export function fmtGoDuration(s: string | undefined): string {
  if (!s) return "";
  const ms = goDurationMs(s);
  if (ms === undefined) return s;
  if (ms === 0) return "0s";
  if (ms % 1000 !== 0) return s; // sub-second parts: Go's own form says it best
  let sec = ms / 1000;
  const parts: string[] = [];
  const d = Math.floor(sec / 86_400);
  if (d >= 1 && sec % 3600 === 0) {
    parts.push(`${d}d`);
    sec -= d * 86_400;
  }
  const hr = Math.floor(sec / 3600);
  const min = Math.floor((sec % 3600) / 60);
  const rest = sec % 60;
  if (hr) parts.push(`${hr}h`);
  if (min) parts.push(`${min}m`);
  if (rest) parts.push(`${rest}s`);
  return parts.join("");
}
