// Package ui holds Atelier's web UI, built: the gateway serves dist/ at
// /ui/ (api/webui.go), embedded in the binary, so `make dev`, `go test` and
// CI need no Node.
//
// The sources are in src/: plain TypeScript without a framework (DOM built
// with the DOM API, never HTML strings, so user data is text), bundled by
// esbuild; the DAG is laid out by @dagrejs/dagre and drawn as SVG.
// package.json and package-lock.json pin every npm package; `make ui`
// runs `npm ci` and rebuilds dist/, which is committed; the build is
// deterministic (same sources and lockfile, same bytes), and `make ui`
// checks that a second build gives the same bytes.
//
// The page talks only to the REST API, with the bearer token the user
// pastes (kept in sessionStorage, see src/api.ts); run events come from
// GET …/runs/{id}/events read with fetch(), since EventSource cannot send
// an Authorization header. Artifact bytes are read the same way (with
// redirect=false, so they never come from another origin) and offered as
// Blobs to save or preview (src/views/artifacts.ts).
package ui

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Files is the built UI: index.html, app.js, app.css and the rest of dist/.
func Files() (fs.FS, error) { return fs.Sub(dist, "dist") }
