package imports

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Store is where imported bytes go (artifactstore.Store).
type Store interface {
	PutPath(ctx context.Context, project string, root *os.Root, name string) (artifactstore.Object, error)
	Exists(ctx context.Context, project, digest string) (bool, error)
}

// Memo remembers what each URI's last import stored (internal/store).
type Memo interface {
	GetArtifactImport(ctx context.Context, project, uri string) (catalog.ArtifactImport, error)
	PutArtifactImport(ctx context.Context, im catalog.ArtifactImport) error
}

// Activities imports URI inputs.
type Activities struct {
	store Store
	memo  Memo
	allow Allow
	dir   string
	http  *http.Client
	// parallel is how many objects of a directory download at once.
	parallel  int
	heartbeat time.Duration
	// stall is how long a download may read nothing before it is given
	// up (and retried): a source that stops sending would otherwise hold
	// the step until the import's timeout, heartbeats and all.
	stall time.Duration
}

// New returns the activities storing into store (nil: imports fail saying
// the worker has no artifact store), remembering fingerprints in memo
// (nil: every import reads its source), allowing allow, with temporary
// files under dir (the worker's data dir).
func New(store Store, memo Memo, allow Allow, dir string) *Activities {
	a := &Activities{store: store, memo: memo, allow: allow, dir: dir, parallel: 16, heartbeat: 10 * time.Second, stall: 2 * time.Minute}
	a.http = &http.Client{
		// A redirect is followed only to a URI the project may import too
		// (a CDN must be allowed as well), at most 5 times.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			project, _ := req.Context().Value(projectKey{}).(string)
			target := req.URL.String()
			if _, ok := a.allow.Match(project, strings.SplitN(target, "?", 2)[0]); !ok {
				return fmt.Errorf("redirected to %s, which project %s may not import from", redactQuery(req.URL), project)
			}
			return nil
		},
	}
	return a
}

type projectKey struct{}

// Register registers Import under its contract name.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.Import, activity.RegisterOptions{Name: activities.ImportArtifactsName})
}

// problem is why an input cannot be imported, whoever retries: it fails
// the step.
type problem struct{ msg string }

func (p problem) Error() string { return p.msg }

func problemf(format string, args ...any) error { return problem{fmt.Sprintf(format, args...)} }

// Import stores each input's bytes and returns their references, in
// order. What cannot be imported by any retry (a URI not allowed, absent,
// refused) is the result's Problem; what may pass (a network error, a 5xx)
// is an error, retried by Temporal.
func (a *Activities) Import(ctx context.Context, req activities.ImportArtifactsRequest) (activities.ResolveArtifactsResult, error) {
	var out activities.ResolveArtifactsResult
	if a.store == nil {
		return activities.ResolveArtifactsResult{Problem: "this worker has no artifact store (ATELIER_ARTIFACTS_URL): it cannot import input artifacts"}, nil
	}
	producer := runstate.ArtifactProducer{Run: req.RunID, Step: req.Step, Item: req.Item}
	for _, in := range req.Inputs {
		o, err := a.importOne(ctx, req.Project, in)
		var p problem
		switch {
		case errors.As(err, &p):
			return activities.ResolveArtifactsResult{Problem: fmt.Sprintf("input artifact %q: %s", in.Name, p.msg)}, nil
		case err != nil:
			return out, fmt.Errorf("input artifact %q: %w", in.Name, err)
		}
		out.Artifacts = append(out.Artifacts, runstate.Imported(req.Project, producer, in, o.Digest, o.Size, o.Files))
	}
	return out, nil
}

func (a *Activities) importOne(ctx context.Context, project string, in pipeline.ArtifactInput) (artifactstore.Object, error) {
	if msg := pipeline.BadImportURI(in.URI); msg != "" {
		return artifactstore.Object{}, problem{msg}
	}
	rule, ok := a.allow.Match(project, in.URI)
	if !ok {
		allowed := a.allow.For(project)
		if len(allowed) == 0 {
			return artifactstore.Object{}, problemf("project %s may not import from %s: the operator allows it no import prefix (--artifacts-import)", project, in.URI)
		}
		return artifactstore.Object{}, problemf("project %s may not import from %s: the operator allows it only %s (--artifacts-import)", project, in.URI, strings.Join(allowed, ", "))
	}
	last, reusable := a.recall(ctx, project, in.URI)
	var p progress
	stop := a.heartbeatWhile(ctx, &p)
	defer stop()
	return a.fetch(ctx, project, rule, in, last, reusable, &p)
}

// recall returns what the last import of uri stored, and whether its
// bytes are still in the store (collection may have removed them).
func (a *Activities) recall(ctx context.Context, project, uri string) (catalog.ArtifactImport, bool) {
	if a.memo == nil {
		return catalog.ArtifactImport{}, false
	}
	last, err := a.memo.GetArtifactImport(ctx, project, uri)
	if err != nil {
		return catalog.ArtifactImport{}, false // none, or unknown: read the source
	}
	ok, err := a.store.Exists(ctx, project, last.Digest)
	return last, err == nil && ok
}

// fetch reads the source unless its fingerprint says it still holds what
// the last import stored, then stores it and remembers its fingerprint.
func (a *Activities) fetch(ctx context.Context, project string, rule Rule, in pipeline.ArtifactInput, last catalog.ArtifactImport, reusable bool, p *progress) (artifactstore.Object, error) {
	u, _ := url.Parse(in.URI)
	var (
		src source
		err error
	)
	// Only reading the source is watched for stalls, from its opening to
	// its last byte: not storing what was read (hashing and uploading a
	// large file read nothing from the source for long).
	wctx, done := a.watchStall(ctx, in.URI, p)
	watching := true
	endWatch := func(err error) error {
		watching = false
		if stalled := done(); stalled != nil && ctx.Err() == nil {
			return stalled
		}
		return err
	}
	defer func() {
		if watching {
			_ = done()
		}
	}()
	if isBucket(u.Scheme) {
		src, err = a.openBucket(wctx, rule, u, p)
	} else {
		etag := ""
		if reusable {
			etag, _ = strings.CutPrefix(last.Fingerprint, "etag:")
		}
		src, err = a.openHTTP(context.WithValue(wctx, projectKey{}, project), in.URI, etag)
	}
	if err != nil {
		return artifactstore.Object{}, endWatch(err)
	}
	defer src.close()
	fp := src.fingerprint()
	if reusable && fp != "" && fp == last.Fingerprint {
		_ = endWatch(nil)
		o := artifactstore.Object{Digest: last.Digest, Size: last.Size, Files: last.Files}
		a.remember(ctx, project, in.URI, fp, o) // renews it: the collector keeps it a day
		return o, nil
	}

	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return artifactstore.Object{}, err
	}
	tmp, err := os.MkdirTemp(a.dir, "import-")
	if err != nil {
		return artifactstore.Object{}, err
	}
	defer os.RemoveAll(tmp)
	if err := endWatch(src.download(wctx, filepath.Join(tmp, in.Name), p)); err != nil {
		return artifactstore.Object{}, err
	}
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return artifactstore.Object{}, err
	}
	defer root.Close()
	o, err := a.store.PutPath(ctx, project, root, in.Name)
	if err != nil {
		return artifactstore.Object{}, fmt.Errorf("store the bytes of %s: %w", in.URI, err)
	}
	if fp != "" {
		a.remember(ctx, project, in.URI, fp, o)
	}
	return o, nil
}

// remember records what an import of uri stored and when (the collector
// keeps what an import recorded in the last day: the run that reads it
// has no lineage row yet). Best effort: without it the next import reads
// the source again.
func (a *Activities) remember(ctx context.Context, project, uri, fp string, o artifactstore.Object) {
	if a.memo == nil {
		return
	}
	err := a.memo.PutArtifactImport(ctx, catalog.ArtifactImport{
		Project: project, URI: uri, Fingerprint: fp, Digest: o.Digest, Size: o.Size, Files: o.Files,
	})
	if err != nil && activity.IsActivity(ctx) {
		activity.GetLogger(ctx).Warn("remembering an import failed: the next one reads its source again", "uri", uri, "error", err)
	}
}

// source is a URI looked at but not yet read.
type source interface {
	// fingerprint identifies what the source holds now: equal
	// fingerprints mean equal bytes ("" when nothing trustworthy says so).
	fingerprint() string
	download(ctx context.Context, dest string, p *progress) error
	close()
}

// httpSource is a GET's answer: a 200's body, or a 304 (notModified).
type httpSource struct {
	uri  string
	resp *http.Response
	fp   string
}

func (s *httpSource) fingerprint() string { return s.fp }
func (s *httpSource) close()              { _ = s.resp.Body.Close() }
func (s *httpSource) download(_ context.Context, dest string, p *progress) error {
	if s.resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %s to a request for the whole file", s.uri, s.resp.Status)
	}
	return writeFile(dest, s.resp.Body, p)
}

// openHTTP GETs uri, conditionally on etag when given (a 304 then
// fingerprints as that etag). 4xx answers are problems (404, 403: no
// retry makes them pass), others errors. Only a strong ETag fingerprints
// a 200: a weak one promises equivalent content, not the same bytes.
func (a *Activities) openHTTP(ctx context.Context, uri, etag string) (source, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, problem{err.Error()}
	}
	req.Header.Set("User-Agent", "atelier-import")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			if strings.Contains(ue.Err.Error(), "may not import from") {
				return nil, problem{ue.Err.Error()}
			}
			// Not ue itself: after a redirect its URL may be a signed
			// one, whose query must not reach the run's history.
			return nil, fmt.Errorf("GET %s: %s", uri, ue.Err)
		}
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	src := &httpSource{uri: uri, resp: resp}
	switch {
	case resp.StatusCode == http.StatusNotModified && etag != "":
		src.fp = "etag:" + etag
	case resp.StatusCode == http.StatusOK:
		if e := resp.Header.Get("ETag"); e != "" && !strings.HasPrefix(e, "W/") {
			src.fp = "etag:" + e
		}
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		src.close()
		return nil, problemf("GET %s answered %s", uri, resp.Status)
	default:
		src.close()
		return nil, fmt.Errorf("GET %s answered %s", uri, resp.Status)
	}
	return src, nil
}

// bucketSource is one object (key), or every object under a prefix
// (objects, listed), of an open bucket.
type bucketSource struct {
	a       *Activities
	b       *blob.Bucket
	uri     string
	key     string
	attrs   *blob.Attributes
	objects []*blob.ListObject
	fp      string
}

func (s *bucketSource) fingerprint() string { return s.fp }
func (s *bucketSource) close()              { _ = s.b.Close() }

// openBucket opens the rule's bucket and looks at the URI: one object's
// attributes (its ETag, size and time fingerprint it), or the listing of
// a prefix (whose keys, sizes, times and MD5s do).
func (a *Activities) openBucket(ctx context.Context, rule Rule, u *url.URL, p *progress) (source, error) {
	bu := url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: rule.Options.Encode()}
	b, err := blob.OpenBucket(ctx, bu.String())
	if err != nil {
		return nil, problemf("open %s://%s (the operator's options in --artifacts-import): %v", u.Scheme, u.Host, err)
	}
	s := &bucketSource{a: a, b: b, uri: u.String(), key: strings.TrimPrefix(u.Path, "/")}
	if !strings.HasSuffix(s.key, "/") {
		s.attrs, err = b.Attributes(ctx, s.key)
		if err != nil {
			s.close()
			return nil, bucketErr(s.uri, err)
		}
		if s.attrs.ETag != "" {
			s.fp = fmt.Sprintf("object:%s:%d:%s", s.attrs.ETag, s.attrs.Size, s.attrs.ModTime.UTC().Format(time.RFC3339Nano))
		}
		return s, nil
	}
	h := sha256.New()
	it := b.List(&blob.ListOptions{Prefix: s.key})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			s.close()
			return nil, bucketErr(s.uri, err)
		}
		p.steps.Add(1)
		rel := strings.TrimPrefix(obj.Key, s.key)
		if obj.IsDir || rel == "" || strings.HasSuffix(rel, "/") {
			continue // a "folder" marker object holds nothing
		}
		if path.Clean(rel) != rel || strings.HasPrefix(rel, "../") || rel == ".." {
			s.close()
			return nil, problemf("%s holds an object %q whose name is not a clean relative path: it cannot be a file of a directory", s.uri, obj.Key)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%x\n", obj.Key, obj.Size, obj.ModTime.UTC().Format(time.RFC3339Nano), obj.MD5)
		s.objects = append(s.objects, obj)
	}
	if len(s.objects) == 0 {
		s.close()
		return nil, problemf("%s holds no object", s.uri)
	}
	s.fp = fmt.Sprintf("prefix:%d:%x", len(s.objects), h.Sum(nil))
	return s, nil
}

func (s *bucketSource) download(ctx context.Context, dest string, p *progress) error {
	if s.objects == nil {
		return s.object(ctx, s.key, dest, p)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.a.parallel)
	for _, obj := range s.objects {
		k := obj.Key
		to := filepath.Join(dest, filepath.FromSlash(strings.TrimPrefix(k, s.key)))
		g.Go(func() error { return s.object(gctx, k, to, p) })
	}
	return g.Wait()
}

func (s *bucketSource) object(ctx context.Context, key, dest string, p *progress) error {
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		return bucketErr(s.uri, err)
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return err
	}
	if err := writeFile(dest, r, p); err != nil {
		return bucketErr(s.uri, err)
	}
	return nil
}

// bucketErr makes what no retry can change a problem.
func bucketErr(uri string, err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return problemf("%s: no such object", uri)
	case gcerrors.PermissionDenied:
		return problemf("%s: the worker may not read it (its credentials were refused)", uri)
	case gcerrors.InvalidArgument:
		return problemf("%s: %v", uri, err)
	}
	return fmt.Errorf("read %s: %w", uri, err)
}

func writeFile(dest string, r io.Reader, p *progress) error {
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, countingReader{r, p})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// progress counts an import's bytes (for its heartbeats) and its steps,
// bytes read or objects listed (for its stall watch).
type progress struct {
	bytes, steps atomic.Int64
}

type countingReader struct {
	r io.Reader
	p *progress
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.bytes.Add(int64(n))
	c.p.steps.Add(1)
	return n, err
}

// Progress is the import's heartbeat detail: bytes read from the source
// so far.
type Progress struct {
	Bytes int64 `json:"bytes"`
}

// heartbeatWhile heartbeats the bytes moved every a.heartbeat until the
// returned stop is called: an import can outlast the heartbeat timeout.
func (a *Activities) heartbeatWhile(ctx context.Context, p *progress) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(a.heartbeat)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx, Progress{Bytes: p.bytes.Load()})
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

// watchStall returns a context cancelled when p's steps have not grown
// for a.stall; done stops the watch and returns the stall's error, if
// that is what cancelled it.
func (a *Activities) watchStall(ctx context.Context, uri string, p *progress) (context.Context, func() error) {
	wctx, cancel := context.WithCancelCause(ctx)
	stop, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := max(a.stall/10, 10*time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
		last, since := p.steps.Load(), time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if n := p.steps.Load(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) >= a.stall {
				cancel(fmt.Errorf("reading %s: no byte came for %s (%d read)", uri, a.stall, p.bytes.Load()))
				return
			}
		}
	}()
	return wctx, func() error {
		close(stop)
		<-finished
		err := context.Cause(wctx)
		cancel(nil)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil // ctx's own end, not a stall
		}
		return err
	}
}

func redactQuery(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	return c.String()
}
