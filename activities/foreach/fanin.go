package foreach

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/runstate"
)

// A wide step's items write their artifacts as any step does; what they
// wrote is kept with each item's row in Postgres (step_items.artifacts),
// not in any workflow. A step that reads the wide step's artifact gets,
// as from a small forEach, a directory holding each item's artifact under
// its index. FanIn makes that directory as a manifest: a file item is the
// entry "<index>", a directory item's files are "<index>/<path>", each
// with the digest the item stored, so no byte is copied and the reading
// step downloads it like any directory. Only the manifest's reference
// enters the reading run's history.

// Objects is the artifact store FanIn reads the items' manifests from and
// stores its own in (*artifactstore.Store).
type Objects interface {
	Objects(project string) tree.Objects
}

// FanInStore is what FanIn needs of the catalogue (*store.Store).
type FanInStore interface {
	StepItemArtifacts(ctx context.Context, runID, step string, n int, fn func(idx int, arts []runstate.Artifact) error) error
	RecordFanIn(ctx context.Context, project string, art runstate.Artifact) error
}

// MaxFanInFiles bounds the files of a fan-in's directory: its manifest
// (about 130 bytes a file) is held in memory here, by the worker that
// downloads it and by a step's launcher.
const MaxFanInFiles = 1_000_000

// fanInParallel is how many items' manifests are read at once.
const fanInParallel = 16

// fanInItem is one item's artifact in a fan-in.
type fanInItem struct {
	idx   int
	art   runstate.Artifact
	files []tree.ManifestFile // a directory's, prefixed by the index
}

// FanIn assembles, stores and records the directory of req's items'
// artifacts. A store or catalogue error is retried; what no retry would
// fix (too many files, an item's manifest gone) is a Problem.
func (a *Activities) FanIn(ctx context.Context, req activities.FanInRequest) (activities.FanInResult, error) {
	if a.arts == nil {
		return activities.FanInResult{}, temporal.NewNonRetryableApplicationError(
			"this worker has no artifact store (ATELIER_ARTIFACTS_URL): it cannot assemble a wide step's artifacts", activities.ErrTypeInvalidStep, nil)
	}
	objs := a.arts.Objects(req.Project)
	ref, name := req.Wide, req.Artifact
	items := func(fn func(idx int, arts []runstate.Artifact) error) error {
		return a.fanIn.StepItemArtifacts(ctx, ref.Run, ref.Step, ref.Items, fn)
	}
	if len(req.Items) > 0 { // a small forEach's, from the workflow
		items = func(fn func(idx int, arts []runstate.Artifact) error) error {
			for _, it := range req.Items {
				art := runstate.Artifact{Name: name, Type: it.Type, Digest: it.Digest, Size: it.Size, Files: it.Files}
				if err := fn(it.Index, []runstate.Artifact{art}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var found []fanInItem
	files, typ := 0, ""
	err := items(func(idx int, arts []runstate.Artifact) error {
		for _, art := range arts {
			if art.Name != name {
				continue
			}
			files += max(art.Files, 1)
			if files > MaxFanInFiles {
				return errTooManyFiles
			}
			if typ == "" {
				typ = art.Type
			}
			found = append(found, fanInItem{idx: idx, art: art})
			if len(found)%1000 == 0 {
				activity.RecordHeartbeat(ctx, len(found))
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errTooManyFiles):
		return activities.FanInResult{Problem: fmt.Sprintf("the items of step %q hold more than %d files in their artifact %q: a step can read at most that many from a wide step (write fewer, larger files per item)", ref.Step, MaxFanInFiles, name)}, nil
	case err != nil:
		return activities.FanInResult{}, err
	}
	if problem, err := readItemManifests(ctx, objs, found); problem != "" || err != nil {
		return activities.FanInResult{Problem: problem}, err
	}
	m := fanInManifest(found)
	b, err := json.Marshal(m)
	if err != nil {
		return activities.FanInResult{}, err
	}
	sum := sha256.Sum256(b)
	digest := tree.DigestOf(sum[:])
	if err := objs.Put(ctx, digest, int64(len(b)), bytes.NewReader(b), tree.ManifestContentType); err != nil {
		return activities.FanInResult{}, fmt.Errorf("store the manifest of the fan-in of %s.%s: %w", ref.Step, name, err)
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	if typ == "" {
		typ = "file"
	}
	producer := runstate.ArtifactProducer{Run: ref.Run, Step: ref.Step}
	art := runstate.Artifact{
		ID:   runstate.ArtifactID(req.Project, ref.Run, ref.Step, nil, name),
		Name: name, Type: typ, Digest: digest, Size: size,
		// At least 1, as for any directory: 0 means a file.
		Files: max(len(m.Files), 1), Producer: producer,
	}
	if err := a.fanIn.RecordFanIn(ctx, req.Project, art); err != nil {
		return activities.FanInResult{}, fmt.Errorf("record the fan-in of %s.%s: %w", ref.Step, name, err)
	}
	return activities.FanInResult{Artifact: art}, nil
}

var errTooManyFiles = errors.New("too many files")

// readItemManifests fills the files of the items whose artifact is a
// directory, fanInParallel manifests at a time, each digest read once.
func readItemManifests(ctx context.Context, objs tree.Objects, items []fanInItem) (string, error) {
	var mu sync.Mutex
	read := map[string][]tree.ManifestFile{}
	var problem string
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fanInParallel)
	for i := range items {
		it := &items[i]
		if it.art.Files == 0 {
			continue
		}
		g.Go(func() error {
			mu.Lock()
			fs, ok := read[it.art.Digest]
			mu.Unlock()
			if !ok {
				m, err := tree.ReadManifest(gctx, objs, it.art.Digest)
				if errors.Is(err, tree.ErrNotFound) {
					mu.Lock()
					if problem == "" {
						problem = fmt.Sprintf("item %d's artifact %q (%s) is no longer in the artifact store", it.idx, it.art.Name, it.art.Digest)
					}
					mu.Unlock()
					return nil
				}
				if err != nil {
					return fmt.Errorf("read the manifest of item %d's artifact %q: %w", it.idx, it.art.Name, err)
				}
				fs = m.Files
				mu.Lock()
				read[it.art.Digest] = fs
				mu.Unlock()
			}
			prefix := strconv.Itoa(it.idx) + "/"
			it.files = make([]tree.ManifestFile, len(fs))
			for k, f := range fs {
				f.Path = prefix + f.Path
				it.files[k] = f
			}
			if i%1000 == 0 {
				activity.RecordHeartbeat(ctx, i)
			}
			return nil
		})
	}
	return problem, g.Wait()
}

// fanInManifest is the directory's manifest: its entries in the order a
// walk of the directory visits them (lexical per directory: "10" before
// "2"), as tree.Put lists a directory it uploads, so the same files make
// the same digest however they were stored.
func fanInManifest(items []fanInItem) tree.Manifest {
	slices.SortFunc(items, func(x, y fanInItem) int {
		return strings.Compare(strconv.Itoa(x.idx), strconv.Itoa(y.idx))
	})
	m := tree.Manifest{Files: []tree.ManifestFile{}}
	for _, it := range items {
		if it.art.Files == 0 {
			m.Files = append(m.Files, tree.ManifestFile{Path: strconv.Itoa(it.idx), Digest: it.art.Digest, Size: it.art.Size})
			continue
		}
		m.Files = append(m.Files, it.files...)
	}
	return m
}
