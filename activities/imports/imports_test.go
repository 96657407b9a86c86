package imports_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/imports"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/pipeline"
)

func TestParseAllowAndMatch(t *testing.T) {
	a, err := imports.ParseAllow(" https://hf.co/ , team-a=s3://data/raw?region=eu-west-1&endpoint=http://x, s3://data/raw/shared/")
	require.NoError(t, err)
	require.Len(t, a, 3)
	assert.Equal(t, "team-a", a[1].Project)
	assert.Equal(t, "s3://data/raw", a[1].Prefix)
	assert.Equal(t, "eu-west-1", a[1].Options.Get("region"))

	for _, tc := range []struct {
		project, uri string
		want         string // the matching prefix, "" for none
	}{
		{"team-a", "https://hf.co/org/model/x.bin", "https://hf.co/"},
		{"team-b", "https://hf.co/x", "https://hf.co/"},
		{"team-a", "s3://data/raw/a.csv", "s3://data/raw"},
		{"team-a", "s3://data/raw/shared/a.csv", "s3://data/raw/shared/"}, // the longest
		{"team-a", "s3://data/rawer/a.csv", ""},                           // not at a segment's end
		{"team-b", "s3://data/raw/a.csv", ""},                             // team-a's rule
		{"team-b", "s3://data/raw/shared/a", "s3://data/raw/shared/"},
		{"team-a", "https://hf.co.evil/x", ""},
	} {
		r, ok := a.Match(tc.project, tc.uri)
		assert.Equal(t, tc.want != "", ok, "%s %s", tc.project, tc.uri)
		assert.Equal(t, tc.want, r.Prefix, "%s %s", tc.project, tc.uri)
	}
	assert.Equal(t, []string{"https://hf.co/", "s3://data/raw/shared/"}, a.For("team-b"))

	for _, bad := range []string{"ftp://x/", "s3:///nobucket", "https://u:p@h/", "https://h/?a=b", "=s3://b/"} {
		_, err := imports.ParseAllow(bad)
		assert.Error(t, err, bad)
	}
	none, err := imports.ParseAllow("")
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestImportOverHTTP(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok/model.bin":
			_, _ = w.Write([]byte("weights"))
		case "/ok/flaky":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/ok/stuck":
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/ok/away":
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer web.Close()
	ctx := context.Background()
	store, err := artifactstore.Open(ctx, "mem://")
	require.NoError(t, err)
	defer store.Close()
	allow, err := imports.ParseAllow("p=" + web.URL + "/ok/")
	require.NoError(t, err)
	a := imports.New(store, nil, allow, t.TempDir())
	req := func(project, uri string) activities.ImportArtifactsRequest {
		return activities.ImportArtifactsRequest{Project: project, RunID: "r1", Step: "s", Inputs: []pipeline.ArtifactInput{{Name: "m", URI: uri}}}
	}

	res, err := a.Import(ctx, req("p", web.URL+"/ok/model.bin"))
	require.NoError(t, err)
	require.Empty(t, res.Problem)
	require.Len(t, res.Artifacts, 1)
	got := res.Artifacts[0]
	sum := sha256.Sum256([]byte("weights"))
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), got.Digest)
	assert.Equal(t, int64(7), got.Size)
	assert.Equal(t, "file", got.Type)
	assert.Equal(t, web.URL+"/ok/model.bin", got.Source)
	assert.Equal(t, "uri:"+web.URL+"/ok/model.bin", got.From)
	assert.Equal(t, 0, got.Producer.Attempt)
	ok, err := store.Exists(ctx, "p", got.Digest)
	require.NoError(t, err)
	assert.True(t, ok, "stored in the project's part of the store")

	for uri, want := range map[string]string{
		web.URL + "/ok/missing": "answered 404 Not Found",
		web.URL + "/ok/away":    "which project p may not import from",
		web.URL + "/other":      "project p may not import from " + web.URL + "/other: the operator allows it only " + web.URL + "/ok/",
		"s3://b/x?y=z":          "must have no query or fragment",
	} {
		res, err := a.Import(ctx, req("p", uri))
		require.NoError(t, err, uri)
		assert.Contains(t, res.Problem, want, uri)
		assert.True(t, strings.HasPrefix(res.Problem, `input artifact "m": `), res.Problem)
	}
	// Another project has no rule.
	res, err = a.Import(ctx, req("q", web.URL+"/ok/model.bin"))
	require.NoError(t, err)
	assert.Contains(t, res.Problem, "the operator allows it no import prefix")
	// A 5xx is retried (an error), not a problem.
	_, err = a.Import(ctx, req("p", web.URL+"/ok/flaky"))
	assert.ErrorContains(t, err, "503")

	// A source that stops sending is given up (and retried), not waited
	// for until the import's timeout.
	a.SetStall(300 * time.Millisecond)
	_, err = a.Import(ctx, req("p", web.URL+"/ok/stuck"))
	assert.ErrorContains(t, err, "no byte came for 300ms (7 read)")

	// A worker without a store says so.
	res, err = imports.New(nil, nil, allow, t.TempDir()).Import(ctx, req("p", web.URL+"/ok/model.bin"))
	require.NoError(t, err)
	assert.Contains(t, res.Problem, "no artifact store")
}

// memo is an in-memory imports.Memo.
type memo map[string]catalog.ArtifactImport

func (m memo) GetArtifactImport(_ context.Context, project, uri string) (catalog.ArtifactImport, error) {
	im, ok := m[project+" "+uri]
	if !ok {
		return im, catalog.ErrNotFound
	}
	return im, nil
}

func (m memo) PutArtifactImport(_ context.Context, im catalog.ArtifactImport) error {
	m[im.Project+" "+im.URI] = im
	return nil
}

// An unchanged source (a strong ETag answered 304) is not read again
// while its bytes are stored; a changed one, or one whose bytes were
// collected, is.
func TestImportRemembersStrongETags(t *testing.T) {
	content, etag := "v1", `"1"`
	var bodies atomic.Int32
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/weak" {
			w.Header().Set("ETag", `W/"1"`)
		} else {
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		bodies.Add(1)
		_, _ = w.Write([]byte(content))
	}))
	defer web.Close()
	ctx := context.Background()
	store, err := artifactstore.Open(ctx, "mem://")
	require.NoError(t, err)
	defer store.Close()
	allow, err := imports.ParseAllow(web.URL + "/")
	require.NoError(t, err)
	m := memo{}
	a := imports.New(store, m, allow, t.TempDir())
	get := func(path string) string {
		res, err := a.Import(ctx, activities.ImportArtifactsRequest{Project: "p", RunID: "r", Step: "s", Inputs: []pipeline.ArtifactInput{{Name: "f", URI: web.URL + path}}})
		require.NoError(t, err)
		require.Empty(t, res.Problem)
		return res.Artifacts[0].Digest
	}

	first := get("/f")
	assert.Equal(t, int32(1), bodies.Load())
	assert.Equal(t, first, get("/f"), "the same bytes")
	assert.Equal(t, int32(1), bodies.Load(), "a 304: nothing read again")

	content, etag = "v2", `"2"`
	second := get("/f")
	assert.NotEqual(t, first, second)
	assert.Equal(t, int32(2), bodies.Load())

	require.NoError(t, store.Delete(ctx, "p", second)) // collected
	assert.Equal(t, second, get("/f"))
	assert.Equal(t, int32(3), bodies.Load(), "bytes gone: read again")

	get("/weak")
	get("/weak")
	assert.Equal(t, int32(5), bodies.Load(), "a weak ETag is not trusted")
}
