package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
)

// A worker's replicas die with it, but the endpoint workflow applies a
// layout only when the layout changes: after a worker restart nothing
// would start them again. So the worker records each endpoint's layout
// (<endpoint dir>/layout.json) and each engine's process group
// (<revision dir>/<replica>.pid), and the first time a worker process
// meets an endpoint (its workflow observes it every tick) it kills what
// the previous worker process left running and starts the recorded
// replicas again. An endpoint whose workflow is gone is never met, so
// nothing is started for it.

// layoutRecord is an endpoint's layout as last applied.
type layoutRecord struct {
	Revisions []activities.RevisionLayout `json:"revisions"`
	Traffic   []inference.RevisionWeight  `json:"traffic,omitempty"`
}

func (s *Serving) endpointDir(ref activities.EndpointRef) string {
	return filepath.Join(s.r.dataDir, "endpoints", ref.Project, ref.Endpoint)
}

func (s *Serving) recordPath(ref activities.EndpointRef) string {
	return filepath.Join(s.endpointDir(ref), "layout.json")
}

// endpointLocked returns the endpoint's entry, adopting it (see above)
// when this worker process has not met it yet; s.mu is held.
func (s *Serving) endpointLocked(ref activities.EndpointRef) *servedEndpoint {
	if ep := s.endpoints[ref]; ep != nil {
		return ep
	}
	s.killLeftovers(ref)
	ep := &servedEndpoint{revisions: map[int]*servedRevision{}}
	s.endpoints[ref] = ep
	rec, err := s.readRecord(ref)
	if err != nil {
		s.logger.Warn("cannot read an endpoint's recorded layout; not restarting its replicas",
			zap.String("project", ref.Project), zap.String("endpoint", ref.Endpoint), zap.Error(err))
		return ep
	}
	if rec == nil {
		return ep
	}
	ep.traffic = rec.Traffic
	s.logger.Info("restarting an endpoint's recorded replicas",
		zap.String("project", ref.Project), zap.String("endpoint", ref.Endpoint), zap.Int("revisions", len(rec.Revisions)))
	for _, l := range rec.Revisions {
		s.restoreRevision(ref, ep, l)
	}
	return ep
}

// restoreRevision starts a recorded revision's replicas. When it cannot
// (the engine is gone, say), the revision keeps its recorded count with
// the reason, reported as its Waiting, and Observe tries again; s.mu is
// held.
func (s *Serving) restoreRevision(ref activities.EndpointRef, ep *servedEndpoint, l activities.RevisionLayout) {
	if l.Replicas == 0 {
		return
	}
	ln, err := s.prepare(ref, l)
	if err != nil {
		ep.revisions[l.Revision] = &servedRevision{spec: l.Spec, digest: specDigest(l.Spec), wanted: l.Replicas,
			problem: "cannot start the replicas again after the worker restarted: " + err.Error()}
		return
	}
	delete(ep.revisions, l.Revision) // a failed earlier attempt
	s.grow(ref, ep, []activities.RevisionLayout{l}, map[int]launch{l.Revision: ln})
}

// readRecord returns the endpoint's recorded layout, nil if none.
func (s *Serving) readRecord(ref activities.EndpointRef) (*layoutRecord, error) {
	b, err := os.ReadFile(s.recordPath(ref))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec layoutRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", s.recordPath(ref), err)
	}
	return &rec, nil
}

// saveRecordLocked writes the endpoint's layout (every revision it serves
// and their replica counts) for a later worker process; s.mu is held.
func (s *Serving) saveRecordLocked(ref activities.EndpointRef, ep *servedEndpoint) error {
	rec := layoutRecord{Traffic: ep.traffic}
	for _, n := range slices.Sorted(maps.Keys(ep.revisions)) {
		rev := ep.revisions[n]
		replicas := len(rev.replicas)
		if rev.problem != "" {
			replicas = rev.wanted // still to restore
		}
		rec.Revisions = append(rec.Revisions, activities.RevisionLayout{Revision: n, Spec: rev.spec, Replicas: replicas})
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the endpoint's layout: %w", err)
	}
	if err := mkdirChain(s.r.dataDir, "endpoints", ref.Project, ref.Endpoint); err != nil {
		return err
	}
	// Write and rename: a crash mid-write must not leave half a record.
	tmp, err := os.CreateTemp(s.endpointDir(ref), ".layout-*.json")
	if err != nil {
		return fmt.Errorf("record the endpoint's layout: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record the endpoint's layout: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.recordPath(ref)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record the endpoint's layout: %w", err)
	}
	return nil
}

// removeRecord forgets the endpoint's layout: it is deleted.
func (s *Serving) removeRecord(ref activities.EndpointRef) error {
	if err := os.Remove(s.recordPath(ref)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the endpoint's layout record: %w", err)
	}
	return nil
}

// replicaMarker is the part of a replica's environment that tells its
// processes from whatever has their (recycled) process group id later.
func replicaMarker(ref activities.EndpointRef, name string) []string {
	return []string{"ATELIER_PROJECT=" + ref.Project, "ATELIER_ENDPOINT=" + ref.Endpoint, "ATELIER_REPLICA=" + name}
}

// writePidFile records a replica process's group, for killLeftovers.
func writePidFile(path string, pgid int) error {
	return os.WriteFile(path, []byte(strconv.Itoa(pgid)+"\n"), 0o600)
}

// killLeftovers kills the process groups of the endpoint's replicas that
// an earlier worker process left (their pid files), when the group still
// carries that replica's environment: Pdeathsig reached the engine, not
// the processes it started.
func (s *Serving) killLeftovers(ref activities.EndpointRef) {
	files, _ := filepath.Glob(filepath.Join(s.endpointDir(ref), "r*", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		pgid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if alive, owned := groupState(pgid, replicaMarker(ref, name)); alive && owned {
			s.logger.Warn("killing a replica's processes left by an earlier worker", zap.String("replica", name), zap.Int("pgid", pgid))
			if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
				s.logger.Error("cannot kill a replica's leftover processes", zap.String("replica", name), zap.Error(err))
				continue
			}
		}
		_ = os.Remove(f)
	}
}
