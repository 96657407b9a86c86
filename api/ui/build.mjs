// Builds dist/ (committed; embedded in the gateway by embed.go) from src/.
// Deterministic: same sources and lockfile, same bytes (`make ui` checks).
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist");
await build({
  entryPoints: ["src/main.ts"],
  outfile: "dist/app.js",
  bundle: true,
  format: "iife",
  target: "es2020",
  minify: true,
  // The licences of bundled code go to THIRD_PARTY_LICENSES.txt instead.
  legalComments: "none",
  banner: { js: "/* Atelier web UI. Bundled third-party code and its licences: THIRD_PARTY_LICENSES.txt */" },
  charset: "utf8",
  logLevel: "warning",
});
for (const f of ["index.html", "app.css", "favicon.svg"]) copyFileSync(`src/${f}`, `dist/${f}`);
const licences = ["@dagrejs/dagre", "@dagrejs/graphlib"].map((pkg) => {
  const { version } = JSON.parse(readFileSync(`node_modules/${pkg}/package.json`, "utf8"));
  return `${pkg} ${version}\n\n${readFileSync(`node_modules/${pkg}/LICENSE`, "utf8").trim()}\n`;
});
writeFileSync("dist/THIRD_PARTY_LICENSES.txt", licences.join("\n---\n\n"));

// dist/SOURCE is the digest of what dist was built from; ui_test.go
// recomputes it, so a change to src/ committed without `make ui` fails
// `go test` (which needs no Node).
const inputs = [
  ...readdirSync("src", { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => `${d.parentPath ?? d.path}/${d.name}`.replace(/\\/g, "/")),
  "build.mjs",
  "package-lock.json",
  "package.json",
  "tsconfig.json",
].sort();
const h = createHash("sha256");
for (const f of inputs) {
  const b = readFileSync(f);
  h.update(`${f}\n${b.length}\n`);
  h.update(b);
}
writeFileSync("dist/SOURCE", `sha256:${h.digest("hex")}\n`);
