package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// staging (tests, one machine)
	_ "gocloud.dev/blob/memblob"  // mem:// for unit tests
	_ "gocloud.dev/blob/s3blob"   // s3:// staging
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Parallel is how many objects of one attempt move at once.
const Parallel = 8

// Store is the staging store. It is safe for concurrent use.
type Store struct {
	b   *blob.Bucket
	uri string // the store's root as the pods see it, without a trailing '/'
	now func() time.Time
}

// Open opens the staging store: bucketURL is how the worker opens it (a
// gocloud.dev/blob URL, e.g. s3://bucket?region=..&prefix=atelier-staging/;
// its credentials are the worker's), podURI the same place as the job's
// pods name it (e.g. s3://bucket/atelier-staging), which Atelier never
// opens: it prefixes the keys with it.
func Open(ctx context.Context, bucketURL, podURI string) (*Store, error) {
	u, err := url.Parse(podURI)
	if err != nil || u.Scheme == "" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("staging URI %q: want <scheme>://<bucket>[/<prefix>] as the pods name it, such as s3://bucket/atelier-staging", podURI)
	}
	bu, err := url.Parse(bucketURL)
	if err != nil {
		return nil, fmt.Errorf("staging store URL: %w", err)
	}
	// The store is swept and its attempts' parts deleted: it must be a
	// prefix of its own, the one the pods name, never a bucket's root
	// (which may hold the artifact store or anything else).
	if bu.Scheme != "file" && bu.Scheme != "mem" {
		want := strings.Trim(u.Path, "/")
		if want == "" || bu.Host != u.Host || strings.Trim(bu.Query().Get("prefix"), "/") != want {
			return nil, fmt.Errorf("staging store URL and URI must name the same prefix of one bucket, not a bucket's root: the URI %q wants a URL like %s://%s?prefix=%s/&…", podURI, bu.Scheme, u.Host, want)
		}
	}
	if bu.Scheme == "file" {
		q := bu.Query()
		if q.Get("create_dir") == "" {
			q.Set("create_dir", "1")
		}
		bu.RawQuery = q.Encode()
	}
	b, err := blob.OpenBucket(ctx, bu.String())
	if err != nil {
		return nil, fmt.Errorf("open staging store %s://%s%s: %w", bu.Scheme, bu.Host, bu.Path, err)
	}
	return &Store{b: b, uri: strings.TrimRight(podURI, "/"), now: time.Now}, nil
}

// Close closes the bucket.
func (s *Store) Close() error { return s.b.Close() }

// Attempt is one attempt's part of the store.
type Attempt struct {
	s      *Store
	prefix string // "<project>/<run>/<step>[/<item>]/<attempt>"
}

// Attempt is the part of the store of a step's attempt (of an item).
func (s *Store) Attempt(project, run, step string, item *int, attempt int) (Attempt, error) {
	parts := []string{project, run, step}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00") {
			return Attempt{}, fmt.Errorf("%q cannot name a part of the staging store", p)
		}
	}
	if item != nil {
		parts = append(parts, strconv.Itoa(*item))
	}
	parts = append(parts, strconv.Itoa(attempt))
	return Attempt{s: s, prefix: strings.Join(parts, "/")}, nil
}

// InputsURI is where the job finds its inputs: <InputsURI>/<name>.
func (a Attempt) InputsURI() string { return a.s.uri + "/" + a.prefix + "/inputs" }

// OutputsURI is where the job writes its outputs: <OutputsURI>/<path>.
func (a Attempt) OutputsURI() string { return a.s.uri + "/" + a.prefix + "/outputs" }

// Source reads stored artifacts (artifactstore.Store).
type Source interface {
	Reader(ctx context.Context, project, digest string) (*blob.Reader, error)
	ReadManifest(ctx context.Context, project, digest string) (tree.Manifest, error)
}

// Stage copies the inputs (project's artifacts) to inputs/<name>: a file
// as one object, a directory's files under inputs/<name>/ at their paths.
// An object already there with the size it should have is kept, so a
// retried activity does not copy a dataset again.
func (a Attempt) Stage(ctx context.Context, src Source, project string, inputs []runstate.Artifact) error {
	type copyOne struct{ key, digest string }
	var todo []copyOne
	for _, in := range inputs {
		k := a.prefix + "/inputs/" + in.Name
		if in.Files == 0 {
			todo = append(todo, copyOne{k, in.Digest})
			continue
		}
		m, err := src.ReadManifest(ctx, project, in.Digest)
		if err != nil {
			return fmt.Errorf("input %q: %w", in.Name, err)
		}
		for _, f := range m.Files {
			todo = append(todo, copyOne{k + "/" + f.Path, f.Digest})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(Parallel)
	for _, c := range todo {
		g.Go(func() error { return a.s.copyIn(gctx, src, project, c.digest, c.key) })
	}
	return g.Wait()
}

// stagedBuffer is the part size of a copy into the store: 5 MiB (S3's
// least) and two in flight bound a copy's memory, whatever its size.
const stagedBuffer = 5 << 20

func (s *Store) copyIn(ctx context.Context, src Source, project, digest, key string) error {
	r, err := src.Reader(ctx, project, digest)
	if err != nil {
		return fmt.Errorf("read %s: %w", digest, err)
	}
	defer r.Close()
	if at, err := s.b.Attributes(ctx, key); err == nil && at.Size == r.Size() {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.b.NewWriter(wctx, key, &blob.WriterOptions{BufferSize: stagedBuffer, MaxConcurrency: 2, ContentType: tree.FileContentType})
	if err != nil {
		return fmt.Errorf("stage %s: %w", key, err)
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel() // aborts the upload: nothing half-written under key
		_ = w.Close()
		return fmt.Errorf("stage %s: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("stage %s: %w", key, err)
	}
	return nil
}

// MissingError is an output the job did not write.
type MissingError struct {
	Output pipeline.ArtifactOutput
	URI    string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("the job wrote no output artifact %q: nothing at %s (a file) or under %s/ (a directory)", e.Output.Name, e.URI, e.URI)
}

// AmbiguousError is an output written both as a file and as a directory.
type AmbiguousError struct {
	Output pipeline.ArtifactOutput
	URI    string
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("output artifact %q is both a file (%s) and a directory (%s/): write one", e.Output.Name, e.URI, e.URI)
}

// Ingest stores each declared output into objs (the project's part of the
// artifact store), in order: the object at outputs/<path> as a file, or
// the objects under outputs/<path>/ as a directory. An output the job did
// not write is a *MissingError, one written both ways an *AmbiguousError.
func (a Attempt) Ingest(ctx context.Context, objs tree.Objects, outputs []pipeline.ArtifactOutput) ([]tree.Object, error) {
	open := func(ctx context.Context, name string) (io.ReadCloser, error) {
		return a.s.b.NewReader(ctx, name, nil)
	}
	out := make([]tree.Object, 0, len(outputs))
	for _, o := range outputs {
		k := a.prefix + "/outputs/" + o.StoredPath()
		uri := a.OutputsURI() + "/" + o.StoredPath()
		isFile, err := a.s.b.Exists(ctx, k)
		if err != nil {
			return nil, err
		}
		files, err := a.s.list(ctx, k+"/")
		if err != nil {
			return nil, err
		}
		var obj tree.Object
		switch {
		case isFile && len(files) > 0:
			return nil, &AmbiguousError{Output: o, URI: uri}
		case isFile:
			obj, err = tree.PutFileFrom(ctx, objs, open, k)
		case len(files) > 0:
			obj, err = tree.PutDirFrom(ctx, objs, open, k, files, Parallel)
		default:
			return nil, &MissingError{Output: o, URI: uri}
		}
		if err != nil {
			return nil, fmt.Errorf("store output artifact %q: %w", o.Name, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

// list is the keys under prefix, relative to it; "directory" markers (keys
// ending in '/', which some tools write) are not files.
func (s *Store) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return keys, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		if !o.IsDir && !strings.HasSuffix(o.Key, "/") {
			rel := strings.TrimPrefix(o.Key, prefix)
			if path.Clean(rel) != rel {
				return nil, fmt.Errorf("%s%s: an output's file must have a clean path", prefix, rel)
			}
			keys = append(keys, rel)
		}
	}
}

// Remove deletes the attempt's part of the store.
func (a Attempt) Remove(ctx context.Context) error {
	_, err := a.s.deleteWhere(ctx, a.prefix+"/", func(*blob.ListObject) bool { return true })
	return err
}

// Sweep deletes what is older than age anywhere in the store: the parts
// of attempts whose worker died before removing them. age must exceed the
// longest a job may run (its inputs were staged when it started).
func (s *Store) Sweep(ctx context.Context, age time.Duration) (int, error) {
	cut := s.now().Add(-age)
	return s.deleteWhere(ctx, "", func(o *blob.ListObject) bool { return o.ModTime.Before(cut) && attemptKey(o.Key) })
}

// attemptKey reports whether key is laid out as an attempt's staged
// object, <project>/<run>/<step>[/<item>]/<attempt>/{inputs,outputs}/…:
// the sweep deletes nothing else, whatever else shares the prefix.
func attemptKey(key string) bool {
	parts := strings.Split(key, "/")
	for _, i := range []int{4, 5} {
		if len(parts) > i+1 && (parts[i] == "inputs" || parts[i] == "outputs") {
			return true
		}
	}
	return false
}

func (s *Store) deleteWhere(ctx context.Context, prefix string, match func(*blob.ListObject) bool) (int, error) {
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	n := 0
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("list %s: %w", prefix, err)
		}
		if o.IsDir || !match(o) {
			continue
		}
		if err := s.b.Delete(ctx, o.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return n, fmt.Errorf("delete %s: %w", o.Key, err)
		}
		n++
	}
}
