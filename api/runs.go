package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/schema"
	"github.com/atelier-ml/atelier/workflows"
)

// RunStore is the Postgres index of runs.
type RunStore interface {
	// CreateRun is idempotent on (project, IdempotencyKey) when the key is
	// not empty: it then returns the existing row and created=false.
	CreateRun(ctx context.Context, r catalog.Run) (catalog.Run, bool, error)
	// CreateRunIfLatest is CreateRun, but writes nothing and returns an
	// error wrapping catalog.ErrNotLatest when r.Version is no longer the
	// newest version of r.Pipeline.
	CreateRunIfLatest(ctx context.Context, r catalog.Run) (catalog.Run, bool, error)
	GetRun(ctx context.Context, project, id string) (catalog.Run, error)
	// ListRuns returns an error wrapping catalog.ErrInvalidArgument for a
	// bad page token.
	ListRuns(ctx context.Context, f catalog.RunFilter) (catalog.RunPage, error)
	DeleteRun(ctx context.Context, id string) error
}

// Engine runs workflows; client/runclient implements it over Temporal.
type Engine interface {
	// StartRun must succeed without effect when the run was already started.
	StartRun(ctx context.Context, r runclient.StartRequest) error
	// SignalCancel returns runclient.ErrRunNotFound when no execution is open.
	SignalCancel(ctx context.Context, runID string, req runstate.CancelRequest) error
	QueryStatus(ctx context.Context, runID string) (runstate.Status, error)
	// DecideApproval decides a waiting approval step; a refusal is a
	// *runclient.RefusedError, a run with no open execution
	// runclient.ErrRunNotFound.
	DecideApproval(ctx context.Context, runID string, req runstate.ApprovalRequest) (runstate.Status, error)
	// QueryAdmissionQueue returns an empty queue for a cluster whose
	// admission workflow never started.
	QueryAdmissionQueue(ctx context.Context, cluster string) (activities.AdmissionQueue, error)
	// StartInput is the input Temporal recorded when the run started (nil:
	// none), for a run whose row has none; runclient.ErrRunNotFound when
	// Temporal no longer has it.
	StartInput(ctx context.Context, runID string) (json.RawMessage, error)
	UIURL(runID string) string
	Health(ctx context.Context) error
}

// cleanupTimeout bounds the compensating delete after a failed start; it
// runs even if the client went away.
const cleanupTimeout = 5 * time.Second

const defaultCancelReason = "cancelled via REST"

// CreateRun writes a PENDING row, then starts the workflow. The row comes
// first so a run is never running without being listed; if the start fails
// the row is deleted, so nothing is left half-created.
func (s *server) CreateRun(ctx context.Context, request gen.CreateRunRequestObject) (gen.CreateRunResponseObject, error) {
	req, project := deref(request.Body), request.Project
	if err := checkRunRequest(req); err != nil {
		return nil, err
	}
	tok := principal(ctx)

	id := s.newID()
	var row catalog.Run
	var start runclient.StartRequest
	var err error
	guessed := false // the pipeline's newest version came from this gateway's cache
	kind := "workflow"
	if req.Pipeline != nil {
		kind = "pipeline"
		row, start, guessed, err = s.planPipelineRun(ctx, project, id, req, false)
	} else {
		row, start, err = s.planWorkflowRun(ctx, project, id, req)
	}
	if err != nil {
		return nil, err
	}
	hash, err := requestHash(req)
	if err != nil {
		return nil, internalError(err)
	}
	complete := func(row *catalog.Run) {
		now := s.now().UTC()
		row.CreatedAt, row.UpdatedAt = now, now
		row.CreatedBy = tok.Name
		row.IdempotencyKey = deref(request.Params.IdempotencyKey)
		row.RequestHash = hash
	}
	complete(&row)
	start.CreatedBy = tok.Name

	var run catalog.Run
	var created bool
	if guessed {
		// One statement checks the guess and inserts; a version posted
		// since (through any gateway) makes it write nothing, and the run
		// is planned again from the catalogue.
		run, created, err = s.cat.CreateRunIfLatest(ctx, row)
		if errors.Is(err, catalog.ErrNotLatest) {
			if row, start, _, err = s.planPipelineRun(ctx, project, id, req, true); err != nil {
				return nil, err
			}
			complete(&row)
			start.CreatedBy = tok.Name
			run, created, err = s.cat.CreateRun(ctx, row)
		}
	} else {
		run, created, err = s.cat.CreateRun(ctx, row)
	}
	if err != nil {
		return nil, internalError(err)
	}
	if !created {
		return s.replayRun(ctx, run, row.RequestHash)
	}
	if err := s.startOrUndo(ctx, run, start); err != nil {
		return nil, err
	}
	s.metrics.runsStarted.WithLabelValues(kind).Inc()
	return gen.CreateRun201JSONResponse{
		Body:    s.runView(run, nil),
		Headers: gen.CreateRun201ResponseHeaders{Location: s.runPath(run)},
	}, nil
}

// startOrUndo starts the workflow of a run whose row was just written. A
// start that surely failed deletes the row (nothing is left half-created);
// one that may have happened keeps it, for a retry with the same
// Idempotency-Key or the reconciler to settle.
func (s *server) startOrUndo(ctx context.Context, run catalog.Run, start runclient.StartRequest) error {
	err := s.eng.StartRun(ctx, start)
	if err == nil {
		return nil
	}
	if errors.Is(err, runclient.ErrStartUncertain) {
		// Deleting the row now could orphan a workflow that did start,
		// and a retry would start a second run. Keep it: a retry with
		// the same key completes the start (the run ID makes it
		// idempotent), and the reconciler fails it if it never started.
		s.log.Warn("start run not confirmed; keeping its row", zap.String("run", run.ID), zap.Error(err))
		return newProblem(ptUnavailable, "the workflow engine did not confirm the start of run %s; it may have started. Retry with the same Idempotency-Key to complete it: it never starts twice", run.ID).
			withHeader("Retry-After", retryAfterSeconds).withCause(err)
	}
	s.log.Error("start run failed; deleting its row", zap.String("run", run.ID), zap.Error(err))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if derr := s.cat.DeleteRun(dctx, run.ID); derr != nil {
		s.log.Error("could not delete the row of an unstarted run", zap.String("run", run.ID), zap.Error(derr))
	}
	return newProblem(ptUnavailable, "the workflow engine could not start the run; nothing was created, retry later").withHeader("Retry-After", retryAfterSeconds).withCause(err)
}

// replayRun answers a request whose Idempotency-Key matched an earlier one.
func (s *server) replayRun(ctx context.Context, run catalog.Run, hash string) (gen.CreateRunResponseObject, error) {
	if run.RequestHash != hash {
		return nil, newProblem(ptIdempotencyReused, "this Idempotency-Key was used for a different request (run %s); use a new key", run.ID)
	}
	// A PENDING row may belong to a request that crashed between insert and
	// start; starting again is a no-op if it did start.
	if run.State == runstate.Pending {
		if err := s.restart(ctx, run); err != nil {
			return nil, err
		}
	}
	return gen.CreateRun200JSONResponse(s.runView(run, nil)), nil
}

// restart rebuilds the start request from the stored row.
func (s *server) restart(ctx context.Context, run catalog.Run) error {
	start := runclient.StartRequest{
		RunID: run.ID, Workflow: run.Workflow, Project: run.Project, Pipeline: run.Pipeline,
		TaskQueue: s.taskQueue, CreatedBy: run.CreatedBy,
	}
	if run.Workflow != runstate.PipelineWorkflowName {
		wf, err := s.cat.GetGoWorkflow(ctx, run.Workflow)
		if errors.Is(err, catalog.ErrNotFound) {
			return notFound("no worker has registered workflow %q", run.Workflow)
		}
		if err != nil {
			return internalError(err)
		}
		start.TaskQueue = wf.TaskQueue
	}
	if in := bytes.TrimSpace(run.Input); len(in) > 0 && !bytes.Equal(in, []byte("null")) {
		start.Input = json.RawMessage(in)
	}
	if err := s.eng.StartRun(ctx, start); err != nil {
		return newProblem(ptUnavailable, "the workflow engine could not start the run, retry later").withHeader("Retry-After", retryAfterSeconds).withCause(err)
	}
	return nil
}

func checkRunRequest(req gen.CreateRunRequest) error {
	hasP, hasW := req.Pipeline != nil, req.Workflow != nil
	var fe []gen.FieldError
	switch {
	case hasP == hasW:
		fe = append(fe, gen.FieldError{Path: "body", Message: "give exactly one of pipeline and workflow"})
	case hasP && req.Input != nil:
		fe = append(fe, gen.FieldError{Path: "input", Message: "input is for workflows; pipelines take params"})
	case hasW && req.Params != nil:
		fe = append(fe, gen.FieldError{Path: "params", Message: "params are for pipelines; workflows take input"})
	case hasW && req.Version != nil:
		fe = append(fe, gen.FieldError{Path: "version", Message: "version is for pipelines"})
	case hasW && req.Cache != nil:
		fe = append(fe, gen.FieldError{Path: "cache", Message: "applies to declarative pipelines; a Go pipeline sets workflows.RunOptions.CacheBypass in its code"})
	case hasW && req.Targets != nil:
		fe = append(fe, gen.FieldError{Path: "targets", Message: "applies to declarative pipelines; a Go pipeline decides what runs in its code"})
	}
	if fe != nil {
		return newProblem(ptInvalid, "%s", summarize(fe)).withErrors(fe)
	}
	// A NUL cannot be stored (jsonb, text) nor passed to a process; refuse
	// it here rather than let the run fail later.
	if req.Params != nil {
		if path := nulPath("params", *req.Params); path != "" {
			fe = append(fe, gen.FieldError{Path: path, Message: "contains a NUL character (\\u0000), which runs cannot carry"})
		}
	}
	if req.Input != nil && bytes.Contains(*req.Input, []byte(`\u0000`)) {
		var v any
		if json.Unmarshal(*req.Input, &v) == nil {
			if path := nulPath("input", v); path != "" {
				fe = append(fe, gen.FieldError{Path: path, Message: "contains a NUL character (\\u0000), which runs cannot carry"})
			}
		}
	}
	if fe != nil {
		return newProblem(ptInvalidParams, "%s", summarize(fe)).withErrors(fe)
	}
	return nil
}

// nulPath returns the path of the first string (or key) in v holding a NUL
// byte, or "". Keys are visited in sorted order so the answer is stable.
func nulPath(path string, v any) string {
	switch x := v.(type) {
	case string:
		if strings.ContainsRune(x, 0) {
			return path
		}
	case []any:
		for i, e := range x {
			if p := nulPath(fmt.Sprintf("%s[%d]", path, i), e); p != "" {
				return p
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if strings.ContainsRune(k, 0) {
				return path
			}
			if p := nulPath(path+"."+k, x[k]); p != "" {
				return p
			}
		}
	}
	return ""
}

// planPipelineRun resolves a declarative run: the version, its spec and
// the params (defaults applied, types checked: 422 lists every problem).
// With fresh, the newest version is read from the catalogue even if this
// gateway has it cached; guessed reports that it was taken from the cache
// (then the row must be written with CreateRunIfLatest).
func (s *server) planPipelineRun(ctx context.Context, project, id string, req gen.CreateRunRequest, fresh bool) (catalog.Run, runclient.StartRequest, bool, error) {
	name, version := *req.Pipeline, deref(req.Version)
	v, guessed, err := s.pipelineVersion(ctx, project, name, version, fresh)
	if errors.Is(err, catalog.ErrNotFound) {
		if version == 0 {
			return catalog.Run{}, runclient.StartRequest{}, false, notFound("pipeline %q not found in project %q", name, project)
		}
		return catalog.Run{}, runclient.StartRequest{}, false, notFound("pipeline %q has no version %d in project %q", name, version, project)
	}
	if err != nil {
		return catalog.Run{}, runclient.StartRequest{}, false, internalError(err)
	}
	row, start, err := s.planPipelineRunFrom(ctx, project, id, name, v, req)
	return row, start, guessed, err
}

// planPipelineRunFrom resolves the params of a run of version v.
func (s *server) planPipelineRunFrom(ctx context.Context, project, id, name string, v catalog.PipelineVersion, req gen.CreateRunRequest) (catalog.Run, runclient.StartRequest, error) {
	var p pipeline.Spec
	if err := json.Unmarshal(v.Spec, &p); err != nil {
		return catalog.Run{}, runclient.StartRequest{}, internalError(err)
	}
	var given map[string]any
	if req.Params != nil {
		given = *req.Params
	}
	params, err := pipeline.ResolveParams(&p, given)
	if err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) && len(ve.Problems) > 0 {
			fe := fieldErrors(ve.Problems)
			return catalog.Run{}, runclient.StartRequest{}, newProblem(ptInvalidParams, "%s", summarize(fe)).withErrors(fe)
		}
		return catalog.Run{}, runclient.StartRequest{}, newProblem(ptInvalidParams, "%s", err.Error())
	}
	if err := s.checkGPUPriority(ctx, project, req.GpuPriority); err != nil {
		return catalog.Run{}, runclient.StartRequest{}, err
	}
	targets, err := checkTargets(&p, name, v.Version, req.Targets)
	if err != nil {
		return catalog.Run{}, runclient.StartRequest{}, err
	}
	in := workflows.PipelineInput{
		RunID: id, Project: project, Pipeline: name, Version: v.Version, Spec: p, Params: params,
		GPUPriority: req.GpuPriority, Targets: targets,
	}
	if c := req.Cache; c != nil && deref(c.Bypass) {
		in.Cache = &workflows.RunCache{Bypass: true}
	}
	input, err := json.Marshal(in)
	if err != nil {
		return catalog.Run{}, runclient.StartRequest{}, internalError(err)
	}
	row := catalog.Run{
		ID: id, Project: project, Pipeline: name, Version: v.Version,
		Workflow: runstate.PipelineWorkflowName, State: runstate.Pending, Input: input,
	}
	start := runclient.StartRequest{
		RunID: id, Workflow: runstate.PipelineWorkflowName, TaskQueue: s.taskQueue,
		Input: json.RawMessage(input), Project: project, Pipeline: name,
	}
	return row, start, nil
}

// pipelineVersion returns a version of a pipeline, the newest for 0.
// Versions are immutable, so they are cached. Which one is newest is
// taken from this gateway's last look (guessed: the insert then checks it,
// CreateRunIfLatest) unless fresh or never looked, then read from the
// pipeline's row.
func (s *server) pipelineVersion(ctx context.Context, project, name string, version int, fresh bool) (v catalog.PipelineVersion, guessed bool, err error) {
	if version == 0 {
		if n, ok := s.versions.latest(project, name); ok && !fresh {
			version, guessed = n, true
		} else {
			p, err := s.cat.GetPipeline(ctx, project, name)
			if err != nil {
				return catalog.PipelineVersion{}, false, err
			}
			if p.LatestVersion <= 0 {
				return catalog.PipelineVersion{}, false, fmt.Errorf("pipeline %s/%s has no version: %w", project, name, catalog.ErrNotFound)
			}
			version = p.LatestVersion
			s.versions.setLatest(project, name, version)
		}
	}
	if v, ok := s.versions.get(versionKey{project, name, version}); ok {
		return v, guessed, nil
	}
	v, err = s.cat.GetPipelineVersion(ctx, project, name, version)
	if err != nil {
		return catalog.PipelineVersion{}, false, err
	}
	s.versions.put(v)
	return v, guessed, nil
}

// planWorkflowRun resolves a native Go run; only workflows some worker
// registered can start, or the run would wait forever on a dead queue.
func (s *server) planWorkflowRun(ctx context.Context, project, id string, req gen.CreateRunRequest) (catalog.Run, runclient.StartRequest, error) {
	name := *req.Workflow
	if req.GpuPriority != nil {
		fe := []gen.FieldError{{Path: "gpuPriority", Message: "applies to declarative pipelines; a Go pipeline sets workflows.RunOptions.GPUPriority in its code"}}
		return catalog.Run{}, runclient.StartRequest{}, newProblem(ptInvalid, "%s", summarize(fe)).withErrors(fe)
	}
	wf, err := s.cat.GetGoWorkflow(ctx, name)
	if errors.Is(err, catalog.ErrNotFound) {
		return catalog.Run{}, runclient.StartRequest{}, notFound("no worker has registered workflow %q", name)
	}
	if err != nil {
		return catalog.Run{}, runclient.StartRequest{}, internalError(err)
	}
	row := catalog.Run{ID: id, Project: project, Workflow: name, State: runstate.Pending}
	start := runclient.StartRequest{RunID: id, Workflow: name, TaskQueue: wf.TaskQueue, Project: project}
	if req.Input != nil {
		var buf bytes.Buffer
		if err := json.Compact(&buf, *req.Input); err != nil {
			return catalog.Run{}, runclient.StartRequest{}, newProblem(ptMalformed, "input is not valid JSON")
		}
		row.Input = buf.Bytes()
		start.Input = json.RawMessage(buf.Bytes())
	}
	return row, start, nil
}

// checkTargets returns a run's targets, each a step of version v of the
// pipeline (not an exit handler: they always run), in the order given
// without repeats; every unknown name is a problem at targets[i].
func checkTargets(p *pipeline.Spec, name string, version int, targets *[]string) ([]string, error) {
	if targets == nil {
		return nil, nil
	}
	steps := make(map[string]bool, len(p.Steps))
	names := make([]string, 0, len(p.Steps))
	for _, s := range p.Steps {
		steps[s.Name] = true
		names = append(names, s.Name)
	}
	var out []string
	var fe []gen.FieldError
	seen := map[string]bool{}
	for i, t := range *targets {
		switch {
		case !steps[t]:
			msg := fmt.Sprintf("no step %q in pipeline %q version %d", t, name, version)
			if len(names) <= 20 {
				msg += " (steps: " + strings.Join(names, ", ") + ")"
			}
			fe = append(fe, gen.FieldError{Path: fmt.Sprintf("targets[%d]", i), Message: msg})
		case !seen[t]:
			seen[t] = true
			out = append(out, t)
		}
	}
	if len(fe) > 0 {
		return nil, newProblem(ptInvalidTargets, "%s", summarize(fe)).withErrors(fe)
	}
	if len(out) == 0 {
		fe = append(fe, gen.FieldError{Path: "targets", Message: "name at least one step, or leave targets out to run the whole pipeline"})
		return nil, newProblem(ptInvalidTargets, "%s", summarize(fe)).withErrors(fe)
	}
	return out, nil
}

// requestHash identifies a start request so a reused Idempotency-Key with a
// different body is caught. Re-encoding through any sorts object keys, so
// key order and whitespace do not matter.
func requestHash(req gen.CreateRunRequest) (string, error) {
	canon := struct {
		Pipeline string         `json:"pipeline,omitempty"`
		Version  int            `json:"version,omitempty"`
		Params   map[string]any `json:"params,omitempty"`
		Workflow string         `json:"workflow,omitempty"`
		Input    any            `json:"input,omitempty"`
		// Absent unless set, so keys of requests from before it keep
		// their hash.
		CacheBypass bool     `json:"cacheBypass,omitempty"`
		Targets     []string `json:"targets,omitempty"`
	}{Pipeline: deref(req.Pipeline), Version: deref(req.Version), Workflow: deref(req.Workflow)}
	if req.Cache != nil {
		canon.CacheBypass = deref(req.Cache.Bypass)
	}
	if req.Targets != nil {
		canon.Targets = *req.Targets
	}
	if req.Params != nil {
		canon.Params = *req.Params
	}
	if req.Input != nil {
		dec := json.NewDecoder(bytes.NewReader(*req.Input))
		dec.UseNumber()
		if err := dec.Decode(&canon.Input); err != nil {
			return "", err
		}
	}
	b, err := json.Marshal(canon)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ListRuns pages through a project's runs, newest first. Items omit their
// step status to keep pages small; GET the run for it.
func (s *server) ListRuns(ctx context.Context, req gen.ListRunsRequestObject) (gen.ListRunsResponseObject, error) {
	params := req.Params
	f := catalog.RunFilter{
		Project:       req.Project,
		Pipeline:      deref(params.Pipeline),
		State:         runstate.State(deref(params.State)),
		CreatedBy:     deref(params.CreatedBy),
		Schedule:      deref(params.Schedule),
		CreatedAfter:  params.CreatedAfter,
		CreatedBefore: params.CreatedBefore,
		Limit:         50,
		PageToken:     deref(params.PageToken),
	}
	if params.PageSize != nil {
		f.Limit = *params.PageSize
	}
	if err := byMetric(&f, params); err != nil {
		return nil, err
	}
	page, err := s.cat.ListRuns(ctx, f)
	if errors.Is(err, catalog.ErrInvalidArgument) {
		return nil, newProblem(ptInvalid, "pageToken is not valid for this listing; start again without it").
			withErrors([]gen.FieldError{{Path: "query.pageToken", Message: "invalid or expired page token"}})
	}
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.ListRuns200JSONResponse{Runs: make([]gen.Run, 0, len(page.Runs))}
	for _, r := range page.Runs {
		out.Runs = append(out.Runs, s.runView(r, nil))
	}
	if page.NextPageToken != "" {
		out.NextPageToken = &page.NextPageToken
	}
	return out, nil
}

// byMetric sets f.ByMetric from the metric params: every problem with
// the combination is a 400 naming its param.
func byMetric(f *catalog.RunFilter, p gen.ListRunsParams) error {
	var fields []gen.FieldError
	bad := func(path, format string, args ...any) {
		fields = append(fields, gen.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if p.Metric == nil {
		for name, set := range map[string]bool{"metricOrder": p.MetricOrder != nil, "metricMin": p.MetricMin != nil, "metricMax": p.MetricMax != nil} {
			if set {
				bad("query."+name, "applies to a listing by metric: give metric=<step>.<metric>")
			}
		}
	} else {
		step, name, ok := strings.Cut(*p.Metric, ".")
		m := &catalog.MetricOrder{Step: step, Name: name, Ascending: deref(p.MetricOrder) == gen.Asc, Min: p.MetricMin, Max: p.MetricMax}
		switch {
		case !ok || step == "" || name == "":
			bad("query.metric", "write <step>.<metric>, e.g. train.accuracy")
		case pipeline.MetricNameProblem(name) != "":
			bad("query.metric", "%s", pipeline.MetricNameProblem(name))
		}
		if f.Pipeline == "" {
			bad("query.pipeline", "a listing by metric is of one pipeline's runs: give pipeline")
		}
		for name, set := range map[string]bool{"createdBy": f.CreatedBy != "", "schedule": f.Schedule != "", "createdAfter": f.CreatedAfter != nil, "createdBefore": f.CreatedBefore != nil} {
			if set {
				bad("query."+name, "does not combine with metric (only pipeline and state do)")
			}
		}
		if m.Min != nil && m.Max != nil && *m.Min > *m.Max {
			bad("query.metricMin", "is above metricMax")
		}
		f.ByMetric = m
	}
	if len(fields) > 0 {
		slices.SortFunc(fields, func(a, b gen.FieldError) int { return strings.Compare(a.Path, b.Path) })
		return newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
	}
	return nil
}

// GetRun serves the run with the freshest status available.
func (s *server) GetRun(ctx context.Context, req gen.GetRunRequestObject) (gen.GetRunResponseObject, error) {
	run, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	st := s.liveStatus(ctx, run)
	s.withLiveCounts(ctx, run.ID, &st)
	return gen.GetRun200JSONResponse(s.runView(run, &st)), nil
}

// CancelRun signals the workflow; the run moves to CANCELLING, then
// CANCELLED, as the workflow stops its steps. The body is optional.
func (s *server) CancelRun(ctx context.Context, req gen.CancelRunRequestObject) (gen.CancelRunResponseObject, error) {
	run, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	if run.State.Terminal() {
		return nil, newProblem(ptRunFinished, "run %s already finished (%s)", run.ID, run.State)
	}
	reason := deref(deref(req.Body).Reason)
	if reason == "" {
		reason = defaultCancelReason
	}
	err = s.eng.SignalCancel(ctx, run.ID, runstate.CancelRequest{
		Reason: reason, Requester: requester(principal(ctx)), At: s.now().UTC(),
	})
	if errors.Is(err, runclient.ErrRunNotFound) {
		return nil, newProblem(ptRunFinished, "run %s is not running", run.ID)
	}
	if err != nil {
		return nil, newProblem(ptUnavailable, "the workflow engine could not be reached, retry later").withHeader("Retry-After", retryAfterSeconds).withCause(err)
	}
	return gen.CancelRun202JSONResponse(s.runView(run, nil)), nil
}

// getRun loads a run of the project; the store scopes by project, so a run
// of another tenant is simply not found.
func (s *server) getRun(ctx context.Context, project, runID string) (catalog.Run, error) {
	run, err := s.cat.GetRun(ctx, project, runID)
	if errors.Is(err, catalog.ErrNotFound) {
		return run, notFound("run %s not found in project %q", runID, project)
	}
	if err != nil {
		return run, internalError(err)
	}
	return run, nil
}
