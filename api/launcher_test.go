package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/process/launcher"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
	"github.com/atelier-ml/atelier/runstate"
)

// launcherSetup is a gateway serving launchers over store, a run of
// project alpha, and an input directory stored for it.
type launcherSetup struct {
	h     *harness
	box   *secretbox.Box
	store *artifactstore.Store
	input tree.Object
}

func newLauncherSetup(t *testing.T, storeURL string, opts ...Option) launcherSetup {
	t.Helper()
	ctx := context.Background()
	key, err := secretbox.NewLocalKeyURL()
	require.NoError(t, err)
	box, err := secretbox.Open(ctx, key)
	require.NoError(t, err)
	store, err := artifactstore.Open(ctx, storeURL)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	h := newHarness(t, append([]Option{WithLauncher(box, store)}, opts...)...)
	h.cat.runs["run-1"] = catalog.Run{ID: "run-1", Project: "alpha", State: runstate.Running}
	h.cat.runs["run-done"] = catalog.Run{ID: "run-done", Project: "alpha", State: runstate.Succeeded}

	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "data", "train"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "data", "train", "a.csv"), []byte("1,2\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "data", "b.csv"), []byte("3,4\n"), 0o644))
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()
	in, err := store.PutPath(ctx, "alpha", root, "data")
	require.NoError(t, err)
	return launcherSetup{h: h, box: box, store: store, input: in}
}

func (s launcherSetup) grant(t *testing.T, run string, expires time.Time) string {
	t.Helper()
	tok, err := grant.Seal(context.Background(), s.box, grant.Grant{Project: "alpha", Run: run, Step: "train", Attempt: 1,
		Inputs: []grant.GrantInput{{Digest: s.input.Digest, Files: s.input.Files}}, Expires: expires})
	require.NoError(t, err)
	return tok
}

// runLauncher runs the real launcher against the gateway: it places the
// input directory, runs a shell command that turns it into a model, and
// stores the model.
func (s launcherSetup) runLauncher(t *testing.T, tok string) launch.Result {
	t.Helper()
	dir := t.TempDir()
	spec := launch.Spec{Gateway: s.h.srv.URL, ResultPath: filepath.Join(dir, "result.json"),
		Inputs:  []launch.Input{{Name: "data", Digest: s.input.Digest, Size: s.input.Size, Files: s.input.Files}},
		Outputs: []launch.Output{{Name: "model", Path: "model.bin"}}}
	paths := launcher.Paths{Inputs: filepath.Join(dir, "inputs"), Artifacts: filepath.Join(dir, "artifacts"), Outputs: filepath.Join(dir, "outputs.json")}
	var stderr strings.Builder
	code := launcher.Run(context.Background(), spec, tok, paths,
		[]string{"sh", "-c", `cat "$ATELIER_INPUTS/data/train/a.csv" "$ATELIER_INPUTS/data/b.csv" > "$ATELIER_ARTIFACTS/model.bin"; echo '{"rows": 2}' > "$ATELIER_OUTPUTS"`}, &stderr)
	b, err := os.ReadFile(spec.ResultPath)
	require.NoError(t, err, "stderr: %s", stderr.String())
	r, err := launch.ParseResult(string(b))
	require.NoError(t, err)
	if r.Error == "" {
		assert.Equal(t, 0, code, "stderr: %s", stderr.String())
	}
	return r
}

func checkModel(t *testing.T, s launcherSetup, r launch.Result) {
	t.Helper()
	require.Empty(t, r.Error)
	assert.JSONEq(t, `{"rows": 2}`, string(r.Outputs))
	require.Len(t, r.Artifacts, 1)
	sum := sha256.Sum256([]byte("1,2\n3,4\n"))
	assert.Equal(t, launch.Stored{Name: "model", Digest: tree.DigestOf(sum[:]), Size: 8}, r.Artifacts[0])
	ok, err := s.store.Exists(context.Background(), "alpha", r.Artifacts[0].Digest)
	require.NoError(t, err)
	assert.True(t, ok, "the model is in the project's store")
}

// A launcher moves a step's artifacts through the gateway of a store that
// cannot sign URLs (a directory: the gateway streams and checks the
// bytes), with nothing but its grant.
func TestLauncherThroughTheGateway(t *testing.T) {
	s := newLauncherSetup(t, "file://"+t.TempDir())
	checkModel(t, s, s.runLauncher(t, s.grant(t, "run-1", time.Now().Add(time.Hour))))
}

// usageOf is a project's artifact bytes, fixed.
type usageOf int64

func (u usageOf) ArtifactBytesUsed(context.Context, string) (int64, error) { return int64(u), nil }

// The project's artifact cap holds for launchers too: outputs that would
// pass it are refused before a byte is stored, the launcher's result says
// why (a kind the worker does not retry), and under the cap they pass.
func TestLauncherArtifactLimit(t *testing.T) {
	s := newLauncherSetup(t, "file://"+t.TempDir(), WithLauncherLimit(1<<20, usageOf(1<<20-4)))
	r := s.runLauncher(t, s.grant(t, "run-1", time.Now().Add(time.Hour)))
	assert.Equal(t, launch.ErrLimit, r.Kind)
	assert.Contains(t, r.Error, "over the limit of 1.0 MiB per project")
	sum := sha256.Sum256([]byte("1,2\n3,4\n"))
	ok, err := s.store.Exists(context.Background(), "alpha", tree.DigestOf(sum[:]))
	require.NoError(t, err)
	assert.False(t, ok, "nothing of the refused outputs is stored")

	s = newLauncherSetup(t, "file://"+t.TempDir(), WithLauncherLimit(1<<20, usageOf(1<<19)))
	checkModel(t, s, s.runLauncher(t, s.grant(t, "run-1", time.Now().Add(time.Hour))))
}

// On S3 the gateway signs URLs and the launcher moves the bytes straight
// to and from the store (versitygw), which checks an upload's sha256.
func TestLauncherWithSignedURLs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 server")
	}
	srv := s3test.Start(t)
	srv.Setenv(t)
	s := newLauncherSetup(t, srv.URL("artifacts/"))
	tok := s.grant(t, "run-1", time.Now().Add(time.Hour))
	checkModel(t, s, s.runLauncher(t, tok))

	c := launch.NewClient(s.h.srv.URL, tok, nil)
	res, err := c.Sign(context.Background(), launch.SignRequest{Get: []string{s.input.Digest}})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(res.Get[0].URL, srv.Endpoint), "a URL of the store itself: %s", res.Get[0].URL)
	assert.False(t, res.Get[0].Grant, "a signed URL never gets the grant")
}

// Grants are the launcher routes' only key, and reach only their
// attempt's inputs: no grant, a forged or expired one, one whose run has
// ended, or a digest that is not an input are refused; uploads whose bytes
// do not match their digest store nothing.
func TestLauncherRoutesRefuse(t *testing.T) {
	s := newLauncherSetup(t, "file://"+t.TempDir())
	sign := func(tok string, req launch.SignRequest) resp {
		hdr := []string{}
		if tok != "" {
			hdr = []string{"Authorization", "Bearer " + tok}
		}
		return s.h.do(http.MethodPost, launch.SignPath, "", req, hdr...)
	}
	get := launch.SignRequest{Get: []string{s.input.Digest}}
	good := s.grant(t, "run-1", time.Now().Add(time.Hour))
	wantStatus(t, sign(good, get), http.StatusOK)

	wantProblem(t, sign("", get), http.StatusUnauthorized, "unauthenticated")
	wantProblem(t, sign(s.h.editor, get), http.StatusUnauthorized, "unauthenticated") // a user's token is not a grant
	wantProblem(t, sign(tamper(t, good), get), http.StatusUnauthorized, "unauthenticated")
	wantProblem(t, sign(s.grant(t, "run-1", t0), get), http.StatusUnauthorized, "unauthenticated")
	p := wantProblem(t, sign(s.grant(t, "run-done", time.Now().Add(time.Hour)), get), http.StatusUnauthorized, "unauthenticated")
	assert.Contains(t, derefOr(p.Detail, ""), "has ended")
	other, err := secretbox.NewLocalKeyURL()
	require.NoError(t, err)
	otherBox, err := secretbox.Open(context.Background(), other)
	require.NoError(t, err)
	forged, err := grant.Seal(context.Background(), otherBox, grant.Grant{Project: "alpha", Run: "run-1", Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	wantProblem(t, sign(forged, get), http.StatusUnauthorized, "unauthenticated")

	// Reads: the input, and the files of its manifest; nothing else.
	m, err := s.store.ReadManifest(context.Background(), "alpha", s.input.Digest)
	require.NoError(t, err)
	wantStatus(t, sign(good, launch.SignRequest{Get: []string{m.Files[0].Digest}}), http.StatusOK)
	stranger := tree.DigestOf(make([]byte, 32))
	wantProblem(t, sign(good, launch.SignRequest{Get: []string{stranger}}), http.StatusNotFound, "not-found")
	wantProblem(t, sign(good, launch.SignRequest{Get: []string{"md5:abc"}}), http.StatusBadRequest, "invalid-request")
	wantProblem(t, sign(good, launch.SignRequest{}), http.StatusBadRequest, "invalid-request")
	r := s.h.do(http.MethodGet, launch.ObjectsPath+stranger, "", nil, "Authorization", "Bearer "+good)
	wantStatus(t, r, http.StatusNotFound)

	// Writes: bytes that do not hash to the digest are not stored.
	body := "not the bytes of that digest"
	sum := sha256.Sum256([]byte("other bytes"))
	d := tree.DigestOf(sum[:])
	r = s.h.do(http.MethodPut, launch.ObjectsPath+d, "", body, "Authorization", "Bearer "+good, "Content-Type", "application/octet-stream")
	wantProblem(t, r, http.StatusBadRequest, "invalid-request")
	ok, err := s.store.Exists(context.Background(), "alpha", d)
	require.NoError(t, err)
	assert.False(t, ok)
	// A PUT's answer says whether bytes are stored already.
	res := sign(good, launch.SignRequest{Put: []launch.PutRequest{{Digest: s.input.Digest, Size: 1, ContentType: artifactstore.ManifestContentType}}})
	wantStatus(t, res, http.StatusOK)
	var sr launch.SignResponse
	require.NoError(t, json.Unmarshal(res.body, &sr))
	assert.True(t, sr.Put[0].Stored)
}

// Without a secrets key or a store, the routes say what the gateway lacks.
func TestLauncherRoutesOff(t *testing.T) {
	h := newHarness(t)
	p := wantProblem(t, h.do(http.MethodPost, launch.SignPath, "", launch.SignRequest{Get: []string{tree.DigestOf(make([]byte, 32))}}, "Authorization", "Bearer x"), http.StatusServiceUnavailable, "unavailable")
	assert.Contains(t, derefOr(p.Detail, ""), "ATELIER_SECRETS_KEY_URL")
}

// tamper flips a bit of a sealed grant's ciphertext.
func tamper(t *testing.T, tok string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err)
	var sealed secretbox.Sealed
	require.NoError(t, json.Unmarshal(b, &sealed))
	sealed.Ciphertext[len(sealed.Ciphertext)/2] ^= 1
	b, err = json.Marshal(sealed)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(b)
}

// An endpoint revision's grant reads its model while the endpoint exists,
// and stores nothing.
func TestEndpointGrants(t *testing.T) {
	ctx := context.Background()
	key, err := secretbox.NewLocalKeyURL()
	require.NoError(t, err)
	box, err := secretbox.Open(ctx, key)
	require.NoError(t, err)
	store, err := artifactstore.Open(ctx, "file://"+t.TempDir())
	require.NoError(t, err)
	defer store.Close()
	eps := newFakeEndpoints()
	h := newHarness(t, WithLauncher(box, store), WithEndpoints(eps))
	eps.eps["alpha/chat"] = &activities.EndpointStatus{}
	model := tree.DigestOf(make([]byte, 32))
	seal := func(endpoint string) string {
		tok, err := grant.Seal(ctx, box, grant.Grant{Project: "alpha", Endpoint: endpoint, Revision: 3,
			Inputs: []grant.GrantInput{{Digest: model}}, Expires: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		return tok
	}
	sign := func(tok string, req launch.SignRequest) resp {
		return h.do(http.MethodPost, launch.SignPath, "", req, "Authorization", "Bearer "+tok)
	}
	tok := seal("chat")
	wantStatus(t, sign(tok, launch.SignRequest{Get: []string{model}}), http.StatusOK)
	wantProblem(t, sign(tok, launch.SignRequest{Put: []launch.PutRequest{{Digest: model, Size: 1, ContentType: "application/octet-stream"}}}), http.StatusForbidden, "forbidden")
	r := h.do(http.MethodPut, launch.ObjectsPath+model, "", "x", "Authorization", "Bearer "+tok, "Content-Type", "application/octet-stream")
	wantProblem(t, r, http.StatusForbidden, "forbidden")
	p := wantProblem(t, sign(seal("gone"), launch.SignRequest{Get: []string{model}}), http.StatusUnauthorized, "unauthenticated")
	assert.Contains(t, derefOr(p.Detail, ""), "endpoint gone is gone")
}

// countSigns counts a client's requests to the sign route.
type countSigns struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countSigns) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == launch.SignPath {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// A sign request names at most launch.MaxSign objects: the gateway's work
// for one request is bounded. The launcher's client signs a directory's
// files in batches of launch.Batch through the real gateway, and what it
// stores reads back.
func TestLauncherSignsInBatches(t *testing.T) {
	s := newLauncherSetup(t, "file://"+t.TempDir())
	good := s.grant(t, "run-1", time.Now().Add(time.Hour))
	m, err := s.store.ReadManifest(context.Background(), "alpha", s.input.Digest)
	require.NoError(t, err)
	sign := func(n int) resp {
		gets := make([]string, n)
		for i := range gets {
			gets[i] = m.Files[i%len(m.Files)].Digest
		}
		return s.h.do(http.MethodPost, launch.SignPath, "", launch.SignRequest{Get: gets}, "Authorization", "Bearer "+good)
	}
	r := sign(launch.MaxSign)
	wantStatus(t, r, http.StatusOK)
	var sr launch.SignResponse
	require.NoError(t, json.Unmarshal(r.body, &sr))
	assert.Len(t, sr.Get, launch.MaxSign)
	p := wantProblem(t, sign(launch.MaxSign+1), http.StatusBadRequest, "invalid-request")
	assert.Contains(t, derefOr(p.Detail, ""), "1 to 1000 objects")

	const n = 1200
	dir := t.TempDir()
	for i := range n {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte(fmt.Sprintf("%d\n", i)), 0o644))
	}
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	counter := &countSigns{next: http.DefaultTransport}
	c := launch.NewClient(s.h.srv.URL, good, &http.Client{Transport: counter})
	o, err := tree.Put(context.Background(), c, root, ".", 8)
	require.NoError(t, err)
	assert.EqualValues(t, (n+launch.Batch-1)/launch.Batch+1, counter.n.Load(), "a request per batch and one for the manifest")
	got, err := s.store.ReadManifest(context.Background(), "alpha", o.Digest)
	require.NoError(t, err)
	assert.Len(t, got.Files, n)
}
