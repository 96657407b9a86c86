package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// fakeCatalog is an in-memory Catalog with the store's documented
// semantics (sentinel errors, idempotent CreateRun, digest dedup).
type fakeCatalog struct {
	mu       sync.Mutex
	projects map[string]catalog.Project
	tokens   map[string]catalog.Token // by hex hash
	versions map[string][]catalog.PipelineVersion
	// versionReads and pipelineReads count GetPipelineVersion and
	// GetPipeline calls (the cache's tests).
	versionReads, pipelineReads int
	workflows                   map[string]catalog.GoWorkflow
	runs                        map[string]catalog.Run
	logs                        map[activities.LogKey][]byte
	clusters                    map[string]catalog.Cluster
	policies                    map[string]catalog.GPUPolicy
	cache                       []catalog.CacheEntry // step cache, newest first
	chunkSize                   int                  // ReadLog cuts logs at multiples of this

	pingErr         error
	panicOnList     bool // ListPipelines panics, to test recovery
	createRunErr    error
	listClustersErr error
	deleted         []string
}

func newFakeCatalog() *fakeCatalog {
	return &fakeCatalog{
		projects:  map[string]catalog.Project{},
		tokens:    map[string]catalog.Token{},
		versions:  map[string][]catalog.PipelineVersion{},
		workflows: map[string]catalog.GoWorkflow{},
		runs:      map[string]catalog.Run{},
		logs:      map[activities.LogKey][]byte{},
		clusters:  map[string]catalog.Cluster{},
		policies:  map[string]catalog.GPUPolicy{},
		chunkSize: 4,
	}
}

func (f *fakeCatalog) CreateProject(_ context.Context, p catalog.Project) (catalog.Project, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.projects[p.Name]; ok {
		return catalog.Project{}, catalog.ErrConflict
	}
	f.projects[p.Name] = p
	return p, nil
}

func (f *fakeCatalog) GetProject(_ context.Context, name string) (catalog.Project, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.projects[name]
	if !ok {
		return p, catalog.ErrNotFound
	}
	return p, nil
}

func (f *fakeCatalog) ListProjects(context.Context) ([]catalog.Project, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []catalog.Project
	for _, p := range f.projects {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeCatalog) CreateToken(_ context.Context, t catalog.Token, hash []byte) (catalog.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.tokens {
		if x.Project == t.Project && x.Name == t.Name {
			return catalog.Token{}, catalog.ErrConflict
		}
	}
	f.tokens[hex.EncodeToString(hash)] = t
	return t, nil
}

func (f *fakeCatalog) TokenBySecretHash(_ context.Context, hash []byte) (catalog.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[hex.EncodeToString(hash)]
	if !ok {
		return t, catalog.ErrNotFound
	}
	return t, nil
}

func (f *fakeCatalog) RevokeToken(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for h, t := range f.tokens {
		if t.ID == id {
			delete(f.tokens, h)
			return nil
		}
	}
	return catalog.ErrNotFound
}

func (f *fakeCatalog) CreatePipelineVersion(_ context.Context, project, pipeline string, spec json.RawMessage, digest, createdBy string) (catalog.PipelineVersion, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := project + "/" + pipeline
	vs := f.versions[k]
	if n := len(vs); n > 0 && vs[n-1].Digest == digest {
		return vs[n-1], false, nil
	}
	v := catalog.PipelineVersion{
		Project: project, Pipeline: pipeline, Version: len(vs) + 1, Spec: spec, Digest: digest,
		CreatedAt: time.Date(2025, 1, 1, 0, 0, len(vs), 0, time.UTC), CreatedBy: createdBy,
	}
	f.versions[k] = append(vs, v)
	return v, true, nil
}

func (f *fakeCatalog) pipeline(project, name string) (catalog.Pipeline, bool) {
	vs := f.versions[project+"/"+name]
	if len(vs) == 0 {
		return catalog.Pipeline{}, false
	}
	return catalog.Pipeline{
		Project: project, Name: name, LatestVersion: len(vs),
		CreatedAt: vs[0].CreatedAt, UpdatedAt: vs[len(vs)-1].CreatedAt,
	}, true
}

func (f *fakeCatalog) GetPipeline(_ context.Context, project, name string) (catalog.Pipeline, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pipelineReads++
	p, ok := f.pipeline(project, name)
	if !ok {
		return p, catalog.ErrNotFound
	}
	return p, nil
}

func (f *fakeCatalog) ListPipelines(_ context.Context, project string) ([]catalog.Pipeline, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panicOnList {
		panic("secret internal detail: dsn=postgres://admin:hunter2@db")
	}
	var out []catalog.Pipeline
	for k := range f.versions {
		proj, name, _ := strings.Cut(k, "/")
		if proj == project {
			p, _ := f.pipeline(proj, name)
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeCatalog) GetPipelineVersion(_ context.Context, project, name string, version int) (catalog.PipelineVersion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versionReads++
	vs := f.versions[project+"/"+name]
	if version == 0 {
		version = len(vs)
	}
	if version < 1 || version > len(vs) {
		return catalog.PipelineVersion{}, catalog.ErrNotFound
	}
	return vs[version-1], nil
}

func (f *fakeCatalog) ListGoWorkflows(context.Context) ([]catalog.GoWorkflow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []catalog.GoWorkflow
	for _, w := range f.workflows {
		out = append(out, w)
	}
	return out, nil
}

func (f *fakeCatalog) GetGoWorkflow(_ context.Context, name string) (catalog.GoWorkflow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.workflows[name]
	if !ok {
		return w, catalog.ErrNotFound
	}
	return w, nil
}

func (f *fakeCatalog) CreateRun(_ context.Context, r catalog.Run) (catalog.Run, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createRunErr != nil {
		return catalog.Run{}, false, f.createRunErr
	}
	if r.IdempotencyKey != "" {
		for _, x := range f.runs {
			if x.Project == r.Project && x.IdempotencyKey == r.IdempotencyKey {
				return x, false, nil
			}
		}
	}
	f.runs[r.ID] = r
	return r, true, nil
}

func (f *fakeCatalog) CreateRunIfLatest(ctx context.Context, r catalog.Run) (catalog.Run, bool, error) {
	f.mu.Lock()
	if r.IdempotencyKey != "" {
		for _, x := range f.runs {
			if x.Project == r.Project && x.IdempotencyKey == r.IdempotencyKey {
				f.mu.Unlock()
				return x, false, nil
			}
		}
	}
	latest := len(f.versions[r.Project+"/"+r.Pipeline])
	f.mu.Unlock()
	if r.Pipeline == "" || r.Version <= 0 {
		return catalog.Run{}, false, catalog.ErrInvalidArgument
	}
	if latest != r.Version {
		return catalog.Run{}, false, fmt.Errorf("version %d of %s: %w", r.Version, r.Pipeline, catalog.ErrNotLatest)
	}
	return f.CreateRun(ctx, r)
}

func (f *fakeCatalog) GetRun(_ context.Context, project, id string) (catalog.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[id]
	if !ok || r.Project != project {
		return catalog.Run{}, catalog.ErrNotFound
	}
	return r, nil
}

// setRun replaces a run row (the mirror's job in production).
func (f *fakeCatalog) setRun(r catalog.Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[r.ID] = r
}

// fakeFilterKey binds a page token to its filter, as the store does.
func fakeFilterKey(f catalog.RunFilter) string {
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return strconv.FormatInt(t.UnixNano(), 10)
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%q %q %q %q %s %s", f.Project, f.Pipeline, f.State, f.CreatedBy, ts(f.CreatedAfter), ts(f.CreatedBefore)))
	return hex.EncodeToString(h[:8])
}

func (f *fakeCatalog) ListRuns(_ context.Context, flt catalog.RunFilter) (catalog.RunPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []catalog.Run
	for _, r := range f.runs {
		if r.Project != flt.Project ||
			(flt.Pipeline != "" && r.Pipeline != flt.Pipeline) ||
			(flt.State != "" && r.State != flt.State) ||
			(flt.CreatedBy != "" && r.CreatedBy != flt.CreatedBy) ||
			(flt.CreatedAfter != nil && r.CreatedAt.Before(*flt.CreatedAfter)) ||
			(flt.CreatedBefore != nil && !r.CreatedAt.Before(*flt.CreatedBefore)) {
			continue
		}
		all = append(all, r)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.After(all[j].CreatedAt)
		}
		return all[i].ID > all[j].ID
	})
	// Keyset paging like the store: the token is the last run's
	// (created_at, id), and the next page starts strictly after it, so runs
	// added meanwhile never shift pages.
	if flt.PageToken != "" {
		key, tail, ok1 := strings.Cut(flt.PageToken, "|")
		ns, id, ok := strings.Cut(tail, "|")
		n, err := strconv.ParseInt(ns, 10, 64)
		if !ok1 || !ok || err != nil || key != fakeFilterKey(flt) {
			return catalog.RunPage{}, fmt.Errorf("page token %q: %w", flt.PageToken, catalog.ErrInvalidArgument)
		}
		at := time.Unix(0, n)
		rest := all[:0:0]
		for _, r := range all {
			if r.CreatedAt.Before(at) || (r.CreatedAt.Equal(at) && r.ID < id) {
				rest = append(rest, r)
			}
		}
		all = rest
	}
	limit := flt.Limit
	if limit <= 0 {
		limit = 50
	}
	end := min(limit, len(all))
	page := catalog.RunPage{Runs: all[:end]}
	if end < len(all) {
		last := all[end-1]
		page.NextPageToken = fakeFilterKey(flt) + "|" + strconv.FormatInt(last.CreatedAt.UnixNano(), 10) + "|" + last.ID
	}
	return page, nil
}

func (f *fakeCatalog) DeleteRun(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.runs[id]; !ok {
		return catalog.ErrNotFound
	}
	delete(f.runs, id)
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeCatalog) appendLog(k activities.LogKey, s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[k] = append(f.logs[k], s...)
}

// ReadLog returns chunks cut at multiples of chunkSize, the first one
// possibly starting before fromOffset, as a real store may.
// Wide forEach items: the fake catalogue has none (integration tests cover
// the real ones).
func (f *fakeCatalog) ListStepItems(context.Context, string, string, runstate.StepState, string, int) (catalog.ItemPage, error) {
	return catalog.ItemPage{}, nil
}

func (f *fakeCatalog) CountStepItems(context.Context, string, string) (map[runstate.StepState]int, error) {
	return nil, nil
}

func (f *fakeCatalog) GetStepItem(context.Context, string, string, int) (runstate.ItemRecord, error) {
	return runstate.ItemRecord{}, catalog.ErrNotFound
}

func (f *fakeCatalog) ReadLog(_ context.Context, k activities.LogKey, from int64, maxBytes int) ([]catalog.LogChunk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := f.logs[k]
	var out []catalog.LogChunk
	n := 0
	for off := from - from%int64(f.chunkSize); off < int64(len(data)) && n < maxBytes; off += int64(f.chunkSize) {
		end := min(off+int64(f.chunkSize), int64(len(data)))
		out = append(out, catalog.LogChunk{Offset: off, Data: append([]byte(nil), data[off:end]...)})
		n += int(end - max(off, from))
	}
	return out, nil
}

// UpsertCluster mirrors the store: nil labels and an empty description keep
// the stored values; timestamps come from a fixed clock.
func (f *fakeCatalog) UpsertCluster(_ context.Context, c catalog.Cluster) (catalog.Cluster, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !catalog.ValidClusterName(c.Name) || c.TaskQueue == "" {
		return catalog.Cluster{}, false, fmt.Errorf("cluster %q: %w", c.Name, catalog.ErrInvalidArgument)
	}
	old, exists := f.clusters[c.Name]
	if !exists {
		old = catalog.Cluster{Name: c.Name, Labels: map[string]string{}, CreatedAt: t0}
	}
	if c.Description != "" {
		old.Description = c.Description
	}
	if c.Labels != nil {
		old.Labels = c.Labels
	}
	old.TaskQueue = c.TaskQueue
	old.UpdatedAt = t0.Add(time.Duration(len(f.clusters)) * time.Second)
	f.clusters[c.Name] = old
	return old, !exists, nil
}

func (f *fakeCatalog) GetCluster(_ context.Context, name string) (catalog.Cluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clusters[name]
	if !ok {
		return c, catalog.ErrNotFound
	}
	return c, nil
}

func (f *fakeCatalog) ListClusters(context.Context) ([]catalog.Cluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listClustersErr != nil {
		return nil, f.listClustersErr
	}
	var out []catalog.Cluster
	for _, c := range f.clusters {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeCatalog) DeleteCluster(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.clusters[name]; !ok {
		return catalog.ErrNotFound
	}
	delete(f.clusters, name)
	return nil
}

func (f *fakeCatalog) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pingErr
}

// fakeEngine records what the gateway asks of Temporal.
func (f *fakeCatalog) PutGPUPolicy(_ context.Context, p catalog.GPUPolicy) (catalog.GPUPolicy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.projects[p.Name]; !ok {
		return catalog.GPUPolicy{}, catalog.ErrNotFound
	}
	p.UpdatedAt = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f.policies[p.Name] = p
	return p, nil
}

func (f *fakeCatalog) GetGPUPolicy(_ context.Context, project string) (catalog.GPUPolicy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.policies[project]
	if !ok {
		return p, catalog.ErrNotFound
	}
	return p, nil
}

func (f *fakeCatalog) DeleteGPUPolicy(_ context.Context, project string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.policies[project]; !ok {
		return catalog.ErrNotFound
	}
	delete(f.policies, project)
	return nil
}

func (f *fakeCatalog) ListStepCache(_ context.Context, fl catalog.CacheFilter) (catalog.CachePage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl.PageToken != "" {
		return catalog.CachePage{}, catalog.ErrInvalidArgument // the fake hands out single pages
	}
	var page catalog.CachePage
	for _, e := range f.cache {
		if f.cacheMatch(e, fl.Project, fl.Pipeline, fl.Step) && (e.ExpiresAt == nil || e.ExpiresAt.After(fl.Now)) {
			page.Entries = append(page.Entries, e)
		}
	}
	return page, nil
}

func (f *fakeCatalog) cacheMatch(e catalog.CacheEntry, project, pipeline, step string) bool {
	return e.Project == project && (pipeline == "" || e.Pipeline == pipeline) && (step == "" || e.Step == step)
}

func (f *fakeCatalog) EvictStepCache(_ context.Context, project, pipeline, step string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var kept []catalog.CacheEntry
	for _, e := range f.cache {
		if !f.cacheMatch(e, project, pipeline, step) {
			kept = append(kept, e)
		}
	}
	n := int64(len(f.cache) - len(kept))
	f.cache = kept
	return n, nil
}

func (f *fakeCatalog) EvictStepCacheKey(_ context.Context, project, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range f.cache {
		if e.Project == project && e.Key == key {
			f.cache = append(f.cache[:i], f.cache[i+1:]...)
			return nil
		}
	}
	return catalog.ErrNotFound
}

type fakeEngine struct {
	mu        sync.Mutex
	queue     activities.AdmissionQueue
	startErr  error
	started   []runclient.StartRequest
	statuses  map[string]runstate.Status // live query answers
	queries   int
	signals   []runstate.CancelRequest
	signalErr error
	// decisions are the approval decisions sent; decideErr refuses them.
	decisions []runstate.ApprovalRequest
	decideErr error
	healthErr error
	// inputs are the start inputs Temporal recorded, by run (StartInput).
	inputs map[string]json.RawMessage
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{statuses: map[string]runstate.Status{}}
}

func (e *fakeEngine) StartRun(_ context.Context, r runclient.StartRequest) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.startErr != nil {
		return e.startErr
	}
	e.started = append(e.started, r)
	return nil
}

func (e *fakeEngine) SignalCancel(_ context.Context, _ string, req runstate.CancelRequest) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.signalErr != nil {
		return e.signalErr
	}
	e.signals = append(e.signals, req)
	return nil
}

func (e *fakeEngine) DecideApproval(_ context.Context, runID string, req runstate.ApprovalRequest) (runstate.Status, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.decisions = append(e.decisions, req)
	if e.decideErr != nil {
		return runstate.Status{}, e.decideErr
	}
	if st, ok := e.statuses[runID]; ok {
		return st, nil
	}
	return runstate.Status{RunID: runID, Workflow: runstate.PipelineWorkflowName, State: runstate.Running, Steps: []runstate.StepStatus{}}, nil
}

func (e *fakeEngine) QueryStatus(_ context.Context, runID string) (runstate.Status, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queries++
	st, ok := e.statuses[runID]
	if !ok {
		return st, runclient.ErrRunNotFound
	}
	return st, nil
}

func (e *fakeEngine) QueryAdmissionQueue(_ context.Context, cluster string) (activities.AdmissionQueue, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queue
	q.Cluster = cluster
	return q, nil
}

func (e *fakeEngine) StartInput(_ context.Context, runID string) (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.inputs[runID]
	if !ok {
		return nil, runclient.ErrRunNotFound
	}
	return in, nil
}

func (e *fakeEngine) setStatus(st runstate.Status) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.statuses[st.RunID] = st
}

func (e *fakeEngine) UIURL(runID string) string {
	return "http://temporal-ui/namespaces/default/workflows/" + runID
}

func (e *fakeEngine) Health(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.healthErr
}
