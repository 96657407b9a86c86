package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/api/ui"
)

// The web UI (api/ui) is served at /ui/ from the assets embedded in the
// binary; / redirects there. Its routes need no token, since they serve
// only code: every API call the page makes carries the user's bearer
// token, as any other client's.

// uiCSP allows the page nothing but its own script, style and API: no
// inline script or style, no other origin, no framing, no form posts
// (the login form is handled by script; were script off, the browser
// could not send the token anywhere in a URL). Images may also come from
// blob: URLs, which only the page's own script can make: the previews of
// artifacts it read with the token (an SVG shown as an <img> runs no script
// and loads nothing).
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var uiTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".txt":  "text/plain; charset=utf-8",
}

type uiAsset struct {
	body  []byte
	ctype string
	etag  string
}

// uiRoutes registers the UI's routes (as public routes, which the spec
// does not describe).
func (s *server) uiRoutes(e *echo.Echo) error {
	files, err := ui.Files()
	if err != nil {
		return fmt.Errorf("api: web UI assets: %w", err)
	}
	assets := map[string]uiAsset{}
	err = fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		ctype, ok := uiTypes[path.Ext(name)]
		if !ok {
			ctype = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		assets[name] = uiAsset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return fmt.Errorf("api: web UI assets: %w", err)
	}
	if _, ok := assets["index.html"]; !ok {
		return fmt.Errorf("api: web UI assets: no index.html (run make ui)")
	}
	methods := []string{http.MethodGet, http.MethodHead}
	for _, p := range []string{"/", "/ui", "/ui/*"} {
		for _, m := range methods {
			s.routes[m+" "+p] = route{public: true, static: true}
		}
	}
	toUI := func(c echo.Context) error { return c.Redirect(http.StatusFound, "/ui/") }
	e.Match(methods, "/", toUI)
	e.Match(methods, "/ui", toUI)
	e.Match(methods, "/ui/*", func(c echo.Context) error {
		name := c.Param("*")
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok {
			return notFound("the web UI has no file %q", name)
		}
		h := c.Response().Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// Revalidate every time (the ETag makes that a 304): a new
		// gateway's assets are picked up at once, and index.html and
		// app.js never mix versions for long.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set(echo.HeaderContentType, a.ctype)
		http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(a.body))
		return nil
	})
	return nil
}
