package imports

import (
	"context"
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
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Store is where imported bytes go (artifactstore.Store).
type Store interface {
	PutPath(ctx context.Context, project string, root *os.Root, name string) (artifactstore.Object, error)
}

// Activities imports URI inputs.
type Activities struct {
	store Store
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
// the worker has no artifact store), allowing allow, with temporary files
// under dir (the worker's data dir).
func New(store Store, allow Allow, dir string) *Activities {
	a := &Activities{store: store, allow: allow, dir: dir, parallel: 16, heartbeat: 10 * time.Second, stall: 2 * time.Minute}
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
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return artifactstore.Object{}, err
	}
	tmp, err := os.MkdirTemp(a.dir, "import-")
	if err != nil {
		return artifactstore.Object{}, err
	}
	defer os.RemoveAll(tmp)

	var moved atomic.Int64
	stop := a.heartbeatWhile(ctx, &moved)
	defer stop()
	dest := filepath.Join(tmp, in.Name)
	u, _ := url.Parse(in.URI)
	dctx, done := a.watchStall(ctx, in.URI, &moved)
	if isBucket(u.Scheme) {
		err = a.fromBucket(dctx, rule, u, dest, &moved)
	} else {
		err = a.fromHTTP(context.WithValue(dctx, projectKey{}, project), in.URI, dest, &moved)
	}
	if stalled := done(); stalled != nil && ctx.Err() == nil {
		err = stalled
	}
	if err != nil {
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
	return o, nil
}

// fromHTTP downloads one file. 4xx answers are problems (404, 403: no
// retry makes them pass), others errors.
func (a *Activities) fromHTTP(ctx context.Context, uri, dest string, moved *atomic.Int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return problem{err.Error()}
	}
	req.Header.Set("User-Agent", "atelier-import")
	resp, err := a.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && strings.Contains(ue.Err.Error(), "may not import from") {
			return problem{ue.Err.Error()}
		}
		return fmt.Errorf("GET %s: %w", uri, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		return problemf("GET %s answered %s", uri, resp.Status)
	default:
		return fmt.Errorf("GET %s answered %s", uri, resp.Status)
	}
	return writeFile(dest, resp.Body, moved)
}

// fromBucket downloads one object, or every object under a prefix (a URI
// ending in "/") into a directory.
func (a *Activities) fromBucket(ctx context.Context, rule Rule, u *url.URL, dest string, moved *atomic.Int64) error {
	bu := url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: rule.Options.Encode()}
	b, err := blob.OpenBucket(ctx, bu.String())
	if err != nil {
		return problemf("open %s://%s (the operator's options in --artifacts-import): %v", u.Scheme, u.Host, err)
	}
	defer b.Close()
	key := strings.TrimPrefix(u.Path, "/")
	if !strings.HasSuffix(key, "/") {
		return a.object(ctx, b, u.String(), key, dest, moved)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.parallel)
	n := 0
	it := b.List(&blob.ListOptions{Prefix: key})
	for {
		obj, err := it.Next(gctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = g.Wait()
			return a.bucketErr(u.String(), err)
		}
		rel := strings.TrimPrefix(obj.Key, key)
		if obj.IsDir || rel == "" || strings.HasSuffix(rel, "/") {
			continue // a "folder" marker object holds nothing
		}
		if path.Clean(rel) != rel || strings.HasPrefix(rel, "../") || rel == ".." {
			_ = g.Wait()
			return problemf("%s holds an object %q whose name is not a clean relative path: it cannot be a file of a directory", u.String(), obj.Key)
		}
		n++
		k, to := obj.Key, filepath.Join(dest, filepath.FromSlash(rel))
		g.Go(func() error { return a.object(gctx, b, u.String(), k, to, moved) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if n == 0 {
		return problemf("%s holds no object", u.String())
	}
	return nil
}

func (a *Activities) object(ctx context.Context, b *blob.Bucket, uri, key, dest string, moved *atomic.Int64) error {
	r, err := b.NewReader(ctx, key, nil)
	if err != nil {
		return a.bucketErr(uri, err)
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return err
	}
	if err := writeFile(dest, r, moved); err != nil {
		return a.bucketErr(uri, err)
	}
	return nil
}

// bucketErr makes what no retry can change a problem.
func (a *Activities) bucketErr(uri string, err error) error {
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

func writeFile(dest string, r io.Reader, moved *atomic.Int64) error {
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, countingReader{r, moved})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Progress is the import's heartbeat detail: bytes read from the source
// so far.
type Progress struct {
	Bytes int64 `json:"bytes"`
}

// heartbeatWhile heartbeats the bytes moved every a.heartbeat until the
// returned stop is called: an import can outlast the heartbeat timeout.
func (a *Activities) heartbeatWhile(ctx context.Context, moved *atomic.Int64) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(a.heartbeat)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx, Progress{Bytes: moved.Load()})
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

// watchStall returns a context cancelled when moved has not grown for
// a.stall; done stops the watch and returns the stall's error, if that is
// what cancelled it.
func (a *Activities) watchStall(ctx context.Context, uri string, moved *atomic.Int64) (context.Context, func() error) {
	wctx, cancel := context.WithCancelCause(ctx)
	stop, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := max(a.stall/10, 10*time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
		last, since := moved.Load(), time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if n := moved.Load(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) >= a.stall {
				cancel(fmt.Errorf("reading %s: no byte came for %s (%d read)", uri, a.stall, n))
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
