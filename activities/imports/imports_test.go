package imports_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/imports"
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
	a := imports.New(store, allow, t.TempDir())
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
	res, err = imports.New(nil, allow, t.TempDir()).Import(ctx, req("p", web.URL+"/ok/model.bin"))
	require.NoError(t, err)
	assert.Contains(t, res.Problem, "no artifact store")
}
