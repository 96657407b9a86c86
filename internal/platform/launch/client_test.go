package launch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

// fakeGateway signs its own URLs (as the gateway of a directory store
// does) and keeps the objects in memory, counting what it is asked.
type fakeGateway struct {
	srv *httptest.Server

	mu      sync.Mutex
	objects map[string][]byte
	items   []int // objects named per sign request

	signs, puts, gets atomic.Int64
	failPuts          atomic.Int64 // the next failPuts uploads answer 503
	forbidPuts        atomic.Int64 // the next forbidPuts uploads answer 403 (an expired URL)
	overLimit         atomic.Bool  // sign requests with puts answer 507
	refusePuts        atomic.Bool  // uploads answer 400
}

func newFakeGateway(t *testing.T) *fakeGateway {
	g := &fakeGateway{objects: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+SignPath, func(w http.ResponseWriter, r *http.Request) {
		g.signs.Add(1)
		var req SignRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if n := len(req.Get) + len(req.Put); n == 0 || n > MaxSign {
			http.Error(w, "too many", http.StatusBadRequest)
			return
		}
		if len(req.Put) > 0 && g.overLimit.Load() {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusInsufficientStorage)
			fmt.Fprint(w, `{"detail": "over the limit"}`)
			return
		}
		g.mu.Lock()
		g.items = append(g.items, len(req.Get)+len(req.Put))
		var res SignResponse
		for _, d := range req.Get {
			res.Get = append(res.Get, Target{Method: http.MethodGet, URL: ObjectsPath + d, Grant: true})
		}
		for _, p := range req.Put {
			if _, ok := g.objects[p.Digest]; ok {
				res.Put = append(res.Put, Target{Stored: true})
				continue
			}
			res.Put = append(res.Put, Target{Method: http.MethodPut, URL: ObjectsPath + p.Digest, Grant: true})
		}
		g.mu.Unlock()
		_ = json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc("PUT "+ObjectsPath+"{digest}", func(w http.ResponseWriter, r *http.Request) {
		g.puts.Add(1)
		b, _ := io.ReadAll(r.Body)
		if g.refusePuts.Load() {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		if g.failPuts.Add(-1) >= 0 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if g.forbidPuts.Add(-1) >= 0 {
			http.Error(w, "Request has expired", http.StatusForbidden)
			return
		}
		sum := sha256.Sum256(b)
		if d := r.PathValue("digest"); tree.DigestOf(sum[:]) != d {
			http.Error(w, "mismatch", http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		g.objects[r.PathValue("digest")] = b
		g.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+ObjectsPath+"{digest}", func(w http.ResponseWriter, r *http.Request) {
		g.gets.Add(1)
		g.mu.Lock()
		b, ok := g.objects[r.PathValue("digest")]
		g.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *fakeGateway) client() *Client { return NewClient(g.srv.URL, "grant", nil) }

// smallFiles writes n files of distinct bytes (and two empty ones, the
// same object twice) under a fresh directory's "data".
func smallFiles(t *testing.T, n int) *os.Root {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data", "sub"), 0o755))
	for i := range n {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "data", "sub", fmt.Sprintf("f%05d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644))
	}
	for _, e := range []string{"empty1", "empty2"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "data", e), nil, 0o644))
	}
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	return root
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// A directory of N files moves with ceil(N/Batch) signing requests each
// way (and one for the manifest), where it took one per object; every
// file arrives intact.
func TestTreeSignsInBatches(t *testing.T) {
	ctx := context.Background()
	const n = 1198 // + 2 empty files: 1,200 files, 1,199 objects
	root := smallFiles(t, n)
	for _, batch := range []int{Batch, 100, 0} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			g := newFakeGateway(t)
			c := g.client()
			c.SetBatch(batch)
			o, err := tree.Put(ctx, c, root, "data", 16)
			require.NoError(t, err)
			assert.Equal(t, n+2, o.Files)
			wantSigns := n + 2 + 1 // each file, the manifest
			if batch > 0 {
				wantSigns = ceilDiv(n+2, batch) + 1
			}
			assert.EqualValues(t, wantSigns, g.signs.Load(), "sign requests to store")
			// Uploads: each file and the manifest; bytes held twice (the
			// empty files) go up once when presigned, and twice when
			// signed alone before the first's upload ended.
			if batch > 0 {
				assert.EqualValues(t, n+1+1, g.puts.Load())
			} else {
				assert.Contains(t, []int64{n + 1 + 1, n + 2 + 1}, g.puts.Load())
			}
			for _, k := range g.items {
				assert.LessOrEqual(t, k, max(batch, 1))
			}

			g.signs.Store(0)
			dest := filepath.Join(t.TempDir(), "out")
			require.NoError(t, tree.Get(ctx, c, o, dest, 16))
			wantSigns = 1 + n + 2
			if batch > 0 {
				wantSigns = 1 + ceilDiv(n+2, batch)
			}
			assert.EqualValues(t, wantSigns, g.signs.Load(), "sign requests to fetch")
			b, err := os.ReadFile(filepath.Join(dest, "sub", "f01197"))
			require.NoError(t, err)
			assert.Equal(t, "file 1197\n", string(b))
			assert.Empty(t, c.presigned, "every presigned target was used")
		})
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return tree.DigestOf(sum[:])
}

// Presign signs at most Batch objects a request, ceil(N/Batch) requests,
// and Put uses the presigned targets without asking again.
func TestPresignChunks(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t)
	c := g.client()
	var puts []tree.Upload
	var bodies [][]byte
	for i := range 1234 {
		b := []byte(fmt.Sprint("object ", i))
		bodies = append(bodies, b)
		puts = append(puts, tree.Upload{Digest: digestOf(b), Size: int64(len(b)), ContentType: tree.FileContentType})
	}
	require.NoError(t, c.Presign(ctx, nil, puts))
	assert.EqualValues(t, ceilDiv(1234, Batch), g.signs.Load())
	assert.Equal(t, []int{Batch, Batch, 1234 - 2*Batch}, g.items)
	require.NoError(t, c.Presign(ctx, nil, puts[:10]), "young presigned targets are not signed again")
	assert.EqualValues(t, ceilDiv(1234, Batch), g.signs.Load())
	for i, b := range bodies {
		require.NoError(t, c.Put(ctx, puts[i].Digest, puts[i].Size, bytes.NewReader(b), tree.FileContentType))
	}
	assert.EqualValues(t, ceilDiv(1234, Batch), g.signs.Load(), "the puts used their presigned targets")
	assert.EqualValues(t, 1234, g.puts.Load())
	// The ten announced twice are used twice (the same bytes twice in a
	// directory): the second Put of each finds them stored... through
	// its presigned target, with no request.
	for i := range 10 {
		require.NoError(t, c.Put(ctx, puts[i].Digest, puts[i].Size, bytes.NewReader(bodies[i]), tree.FileContentType))
	}
	assert.EqualValues(t, ceilDiv(1234, Batch), g.signs.Load())
	assert.Empty(t, c.presigned)
}

// A failed upload is retried with a URL signed again, not the presigned
// one.
func TestPresignedRetrySignsAgain(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t)
	c := g.client()
	b := []byte("bytes")
	d := digestOf(b)
	require.NoError(t, c.Presign(ctx, nil, []tree.Upload{{Digest: d, Size: 5, ContentType: tree.FileContentType}}))
	g.failPuts.Store(1)
	require.NoError(t, c.Put(ctx, d, 5, bytes.NewReader(b), tree.FileContentType))
	assert.EqualValues(t, 2, g.signs.Load(), "the presign, then the retry's own")
	assert.EqualValues(t, 2, g.puts.Load())

	// Opening: the presigned target first, then one signed again.
	g.signs.Store(0)
	require.NoError(t, c.Presign(ctx, []string{d}, nil))
	r, err := c.Open(ctx, d)
	require.NoError(t, err)
	got, _ := io.ReadAll(r)
	r.Close()
	assert.Equal(t, b, got)
	assert.EqualValues(t, 1, g.signs.Load(), "the open used its presigned target")
	_, err = c.Open(ctx, d) // nothing presigned: a miss signs
	require.NoError(t, err)
	assert.EqualValues(t, 2, g.signs.Load())
}

// A URL signed ahead that the store refuses (403: expired, a skewed
// clock) is signed again rather than failing the upload; a 403 on a URL
// signed for that very try is final.
func TestPresignedForbiddenSignsAgain(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t)
	c := g.client()
	b := []byte("bytes")
	d := digestOf(b)
	require.NoError(t, c.Presign(ctx, nil, []tree.Upload{{Digest: d, Size: 5, ContentType: tree.FileContentType}}))
	g.forbidPuts.Store(1)
	require.NoError(t, c.Put(ctx, d, 5, bytes.NewReader(b), tree.FileContentType))
	assert.EqualValues(t, 2, g.signs.Load(), "the presign, then the retry's own")

	other := []byte("other bytes")
	g.forbidPuts.Store(1)
	err := c.Put(ctx, digestOf(other), int64(len(other)), bytes.NewReader(other), tree.FileContentType)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Request has expired")
}

// A presigned target older than presignedTTL is not used: the object is
// signed again, alone.
func TestPresignedExpires(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t)
	c := g.client()
	now := time.Now()
	c.now = func() time.Time { return now }
	b := []byte("bytes")
	d := digestOf(b)
	require.NoError(t, c.Presign(ctx, nil, []tree.Upload{{Digest: d, Size: 5, ContentType: tree.FileContentType}}))
	now = now.Add(presignedTTL - time.Second)
	require.NoError(t, c.Put(ctx, d, 5, bytes.NewReader(b), tree.FileContentType))
	assert.EqualValues(t, 1, g.signs.Load(), "young: used")
	require.NoError(t, c.Presign(ctx, []string{d}, nil))
	assert.EqualValues(t, 2, g.signs.Load())
	now = now.Add(presignedTTL)
	_, err := c.Open(ctx, d)
	require.NoError(t, err)
	assert.EqualValues(t, 3, g.signs.Load(), "old: signed again")
	assert.EqualValues(t, 1, g.gets.Load())
	assert.Less(t, presignedTTL, URLExpiry/2, "well within the URLs' life")

	// Stale entries never used go at the next Presign.
	require.NoError(t, c.Presign(ctx, []string{d}, nil))
	now = now.Add(presignedTTL)
	require.NoError(t, c.Presign(ctx, nil, nil))
	assert.Empty(t, c.presigned)
}

// Objects the gateway answers as stored are not uploaded.
func TestPresignedStored(t *testing.T) {
	ctx := context.Background()
	g := newFakeGateway(t)
	c := g.client()
	b := []byte("bytes")
	d := digestOf(b)
	g.objects[d] = b
	require.NoError(t, c.Presign(ctx, nil, []tree.Upload{{Digest: d, Size: 5, ContentType: tree.FileContentType}}))
	require.NoError(t, c.Put(ctx, d, 5, bytes.NewReader(b), tree.FileContentType))
	assert.EqualValues(t, 1, g.signs.Load())
	assert.EqualValues(t, 0, g.puts.Load())
}

// Outputs over the project's cap are refused at the first batch, before
// any byte moves.
func TestPresignOverLimit(t *testing.T) {
	g := newFakeGateway(t)
	g.overLimit.Store(true)
	c := g.client()
	c.SetStoring(1 << 40)
	root := smallFiles(t, 50)
	_, err := tree.Put(context.Background(), c, root, "data", 16)
	require.ErrorIs(t, err, ErrOverLimit)
	assert.True(t, strings.Contains(err.Error(), "over the limit"), err.Error())
	assert.EqualValues(t, 1, g.signs.Load())
	assert.EqualValues(t, 0, g.puts.Load())
}

// SetBatch is bounded by the gateway's MaxSign.
func TestSetBatch(t *testing.T) {
	c := NewClient("http://gateway", "g", nil)
	assert.Equal(t, Batch, c.PresignWindow())
	c.SetBatch(5000)
	assert.Equal(t, MaxSign, c.PresignWindow())
	c.SetBatch(-1)
	assert.Equal(t, 0, c.PresignWindow())
	require.NoError(t, c.Presign(context.Background(), []string{"x"}, nil), "off: nothing to do")
}

// An upload refused for good fails the directory with its own error, not
// the cancellation it causes, and stops the rest.
func TestPresignedUploadFails(t *testing.T) {
	g := newFakeGateway(t)
	g.refusePuts.Store(true)
	c := g.client()
	c.SetBatch(100)
	root := smallFiles(t, 1000)
	_, err := tree.Put(context.Background(), c, root, "data", 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "400 Bad Request: refused")
	assert.Less(t, g.puts.Load(), int64(500), "the other uploads stopped")
}
