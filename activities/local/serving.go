package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/enginemetrics"
	"github.com/atelier-ml/atelier/activities/engineprobe"
	"github.com/atelier-ml/atelier/inference"
)

// Defaults of the serving options, and the crash-loop rule.
const (
	// DefaultRestartBackoff is the wait before a replica's engine is
	// started again after it exited; it doubles with each exit in the
	// crash-loop window, up to DefaultMaxRestartBackoff.
	DefaultRestartBackoff    = 2 * time.Second
	DefaultMaxRestartBackoff = time.Minute
	// A replica whose engine exited CrashLoopExits times within
	// CrashLoopWindow is crash-looping (inference.RevisionStatus).
	CrashLoopExits  = 3
	CrashLoopWindow = 5 * time.Minute
	// TrafficModeProxy is ApplyEndpointLayoutResult.TrafficMode here:
	// the gateway's endpoint proxy splits traffic between the replicas'
	// URLs.
	TrafficModeProxy = "proxy"

	probeTimeout  = 2 * time.Second
	scrapeTimeout = 2 * time.Second
)

// Serving runs inference endpoints' replicas as processes of the local
// runtime: the endpoint workflow's activities (activities.ObserveEndpointName
// and the others) for endpoints created without a cluster. Its state (which
// processes serve which revision) lives in the worker's memory; see the
// package doc for what a worker restart does to it. It shares the Runner's
// settings (data dir, step user, GPUs, grace period, clock, logger) and is
// safe for concurrent use.
type Serving struct {
	r       *Runner
	engines map[inference.Backend]string // --local-engine overrides
	http    *http.Client
	logger  *zap.Logger

	restartBackoff, maxRestartBackoff time.Duration
	crashLoopWindow                   time.Duration
	probeTimeout, scrapeTimeout       time.Duration

	mu        sync.Mutex
	closed    bool
	endpoints map[activities.EndpointRef]*servedEndpoint

	// fetches makes replicas that need the same registered model bytes
	// share one download.
	fetches singleflight.Group
}

// servedEndpoint is one endpoint's revisions, and the traffic weights last
// applied (recorded only: the gateway's proxy splits traffic).
type servedEndpoint struct {
	revisions map[int]*servedRevision
	traffic   []inference.RevisionWeight
}

// servedRevision is one revision's replicas, oldest first.
type servedRevision struct {
	spec     inference.EndpointSpec
	digest   string // of spec
	replicas []*replica
	next     int // number of the next replica's name
	// problem says why the revision has no replicas when a restarted
	// worker could not start the wanted ones again (restore.go).
	problem string
	wanted  int
}

// ServingOption configures a Serving.
type ServingOption func(*Serving)

// WithEngines sets the executables of backends' engines (the worker's
// --local-engine, see ParseEngines) instead of vllm and tritonserver on
// PATH. examples/modelserver stands in for either.
func WithEngines(e map[inference.Backend]string) ServingOption {
	return func(s *Serving) { s.engines = maps.Clone(e) }
}

// WithRestartBackoff sets the wait before an exited engine is started
// again, and its upper bound.
func WithRestartBackoff(first, most time.Duration) ServingOption {
	return func(s *Serving) { s.restartBackoff, s.maxRestartBackoff = first, most }
}

// NewServing returns the endpoint activities of the local runtime r.
func NewServing(r *Runner, opts ...ServingOption) *Serving {
	s := &Serving{
		r: r, http: &http.Client{}, logger: r.logger.Named("serving"),
		restartBackoff: DefaultRestartBackoff, maxRestartBackoff: DefaultMaxRestartBackoff,
		crashLoopWindow: CrashLoopWindow, probeTimeout: probeTimeout, scrapeTimeout: scrapeTimeout,
		endpoints: map[activities.EndpointRef]*servedEndpoint{},
	}
	for _, o := range opts {
		o(s)
	}
	s.restartBackoff = max(s.restartBackoff, time.Millisecond)
	s.maxRestartBackoff = max(s.maxRestartBackoff, s.restartBackoff)
	return s
}

// Register registers the endpoint workflow's activities under their
// contract names.
func (s *Serving) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(s.ObserveEndpoint, activity.RegisterOptions{Name: activities.ObserveEndpointName})
	reg.RegisterActivityWithOptions(s.ApplyEndpointLayout, activity.RegisterOptions{Name: activities.ApplyEndpointLayoutName})
	reg.RegisterActivityWithOptions(s.DeleteEndpointRevisions, activity.RegisterOptions{Name: activities.DeleteEndpointRevisionsName})
	reg.RegisterActivityWithOptions(s.DeleteEndpoint, activity.RegisterOptions{Name: activities.DeleteEndpointName})
	reg.RegisterActivityWithOptions(s.Headroom, activity.RegisterOptions{Name: activities.EndpointHeadroomName})
}

// Headroom answers "not limited": project GPU quotas govern clusters, not
// a worker's own devices (which replicas share as steps do, see GPUs).
func (s *Serving) Headroom(context.Context, activities.EndpointRef) (activities.EndpointHeadroom, error) {
	return activities.EndpointHeadroom{}, nil
}

// Close stops every replica (SIGTERM, SIGKILL after the grace period) and
// refuses later activities. The worker calls it when it stops polling.
// The endpoints' layouts stay recorded: the next worker process starts
// their replicas again (restore.go).
func (s *Serving) Close() {
	s.mu.Lock()
	s.closed = true
	var all []*replica
	for _, ep := range s.endpoints {
		all = append(all, ep.allReplicas()...)
	}
	s.endpoints = map[activities.EndpointRef]*servedEndpoint{}
	s.mu.Unlock()
	_ = stopAll(context.Background(), all)
}

// ApplyEndpointLayout makes each listed revision run exactly its replica
// count of engine processes: missing ones are started, extra ones stopped
// (unready ones first, then the newest), the rest left alone, so a
// repeated layout changes nothing. The layout is recorded on disk for a
// restarted worker (restore.go). With ScaleDownFirst the extra replicas
// are gone (their GPUs free) before new ones start. Traffic weights are
// only recorded: the gateway's proxy splits traffic ("proxy" mode).
//
// A revision that cannot run here is a non-retryable InvalidStep error
// saying why: an invalid layout, an engine that is not installed, more
// GPUs than the machine has.
func (s *Serving) ApplyEndpointLayout(ctx context.Context, req activities.ApplyEndpointLayoutRequest) (activities.ApplyEndpointLayoutResult, error) {
	if err := checkLayout(req); err != nil {
		return activities.ApplyEndpointLayoutResult{}, invalid("%s", err)
	}
	launches := map[int]launch{}
	for _, l := range req.Revisions {
		if l.Replicas == 0 {
			continue
		}
		ln, err := s.prepare(req.EndpointRef, l)
		if err != nil {
			return activities.ApplyEndpointLayoutResult{}, err
		}
		launches[l.Revision] = ln
	}

	ep, err := s.lockEndpoint(req.EndpointRef)
	if err != nil {
		return activities.ApplyEndpointLayoutResult{}, err
	}
	stopping := ep.dropChanged(req.Revisions)
	if req.ScaleDownFirst {
		stopping = append(stopping, ep.shrink(req.Revisions)...)
		s.mu.Unlock()
		if err := stopAll(ctx, stopping); err != nil {
			return activities.ApplyEndpointLayoutResult{}, err
		}
		stopping = nil
		if ep, err = s.lockEndpoint(req.EndpointRef); err != nil {
			return activities.ApplyEndpointLayoutResult{}, err
		}
	}
	s.grow(req.EndpointRef, ep, req.Revisions, launches)
	stopping = append(stopping, ep.shrink(req.Revisions)...)
	ep.traffic = slices.Clone(req.Traffic)
	recErr := s.saveRecordLocked(req.EndpointRef, ep)
	s.mu.Unlock()
	if err := errors.Join(stopAll(ctx, stopping), recErr); err != nil {
		return activities.ApplyEndpointLayoutResult{}, err
	}
	return activities.ApplyEndpointLayoutResult{TrafficMode: TrafficModeProxy}, nil
}

// lockEndpoint locks s and returns the endpoint's entry (endpointLocked).
// It fails, unlocked, once the worker is closing.
func (s *Serving) lockEndpoint(ref activities.EndpointRef) (*servedEndpoint, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the worker is shutting down")
	}
	return s.endpointLocked(ref), nil
}

// prepare checks that a revision can run here and returns what its
// processes run: the engine (installed?), the GPUs (could the machine ever
// give them?), the directories, the environment.
func (s *Serving) prepare(ref activities.EndpointRef, l activities.RevisionLayout) (launch, error) {
	spec := l.Spec
	info, _ := inference.Info(spec.Backend) // checkLayout validated the spec
	endpointDir := s.endpointDir(ref)
	workDir := filepath.Join(endpointDir, "work")
	env := s.replicaEnv(ref, l.Revision, spec, workDir)
	program, err := enginePath(spec.Backend, s.engines, envValue(env, "PATH"))
	if err != nil {
		return launch{}, invalid("revision %d: %s", l.Revision, err)
	}
	gpus := GPURequest{Count: spec.Resources.GPUs, Product: string(spec.Resources.GPUType)}
	if gpus.Count > 0 {
		if err := s.r.gpus.Check(gpus); err != nil {
			var unsat *UnsatisfiableGPUError
			if errors.As(err, &unsat) {
				unsat.Subject = fmt.Sprintf("each replica of revision %d needs", l.Revision)
				unsat.Remedy = "install the NVIDIA driver on the worker's machine, ask for fewer GPUs or another gpuType, or create the endpoint on a Kubernetes cluster"
			}
			return launch{}, invalid("%s", err)
		}
	}
	// As for steps (see the package doc): directories above a replica's
	// own are traversable, not listable; the logs are the worker's; the
	// working directory (HOME when replicas run as the step user, where
	// engines cache downloaded weights) is shared by the endpoint's
	// revisions.
	revDir := "r" + strconv.Itoa(l.Revision)
	if err := mkdirChain(s.r.dataDir, "endpoints", ref.Project, ref.Endpoint, revDir); err != nil {
		return launch{}, err
	}
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return launch{}, fmt.Errorf("create the endpoint's work dir: %w", err)
	}
	if err := s.r.giveTo(workDir); err != nil {
		return launch{}, err
	}
	return launch{program: program, engine: engines[spec.Backend], project: ref.Project, spec: spec, info: info,
		env: env, dir: workDir, logDir: filepath.Join(endpointDir, revDir), gpu: gpus}, nil
}

// replicaEnv is a replica's environment, layered as a step's is: the
// worker's PATH, HOME, LANG and TMPDIR only (never its secrets), then the
// spec's env in order, then the runtime's ATELIER_* variables.
func (s *Serving) replicaEnv(ref activities.EndpointRef, rev int, spec inference.EndpointSpec, workDir string) []string {
	m := map[string]string{}
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			m[k] = v
		}
	}
	if s.r.stepUser != nil {
		m["HOME"] = workDir // the worker's HOME is the worker's user's
	}
	for _, e := range spec.Env {
		m[e.Name] = e.Value
	}
	m["ATELIER_PROJECT"] = ref.Project
	m["ATELIER_ENDPOINT"] = ref.Endpoint
	m["ATELIER_REVISION"] = strconv.Itoa(rev)
	env := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
}

// grow starts the replicas each revision lacks; s.mu is held.
func (s *Serving) grow(ref activities.EndpointRef, ep *servedEndpoint, layouts []activities.RevisionLayout, launches map[int]launch) {
	for _, l := range layouts {
		rev := ep.revisions[l.Revision]
		if rev == nil {
			if l.Replicas == 0 {
				continue
			}
			rev = &servedRevision{spec: l.Spec, digest: specDigest(l.Spec)}
			ep.revisions[l.Revision] = rev
		}
		for len(rev.replicas) < l.Replicas {
			rev.replicas = append(rev.replicas, s.start(ref, l.Revision, rev.next, launches[l.Revision]))
			rev.next++
		}
		rev.problem = ""
	}
}

// start makes replica number n of a revision and its supervisor.
func (s *Serving) start(ref activities.EndpointRef, rev, n int, l launch) *replica {
	name := fmt.Sprintf("%s-r%d-%d", ref.Endpoint, rev, n)
	l.env = setEnv(slices.Clone(l.env), "ATELIER_REPLICA", name)
	l.gpu.Holder = "endpoint " + ref.Project + "/" + name
	ctx, cancel := context.WithCancel(context.Background())
	rp := &replica{name: name, index: n, created: s.r.now(), logPath: filepath.Join(l.logDir, name+".log"),
		launch: l, stop: cancel, done: make(chan struct{})}
	go s.supervise(ctx, rp)
	return rp
}

// shrink takes out the replicas each revision has beyond its count and
// returns them, to be stopped; s.mu is held. Like a ReplicaSet it keeps
// ready replicas, then the oldest.
func (ep *servedEndpoint) shrink(layouts []activities.RevisionLayout) []*replica {
	var out []*replica
	for _, l := range layouts {
		rev := ep.revisions[l.Revision]
		if rev == nil || len(rev.replicas) <= l.Replicas {
			continue
		}
		keep := slices.Clone(rev.replicas)
		slices.SortStableFunc(keep, func(a, b *replica) int {
			switch ra, rb := a.ready(), b.ready(); {
			case ra && !rb:
				return -1
			case rb && !ra:
				return 1
			}
			return a.index - b.index
		})
		out = append(out, keep[l.Replicas:]...)
		keep = keep[:l.Replicas]
		slices.SortFunc(keep, func(a, b *replica) int { return a.index - b.index })
		rev.replicas = keep
	}
	return out
}

// dropChanged takes out listed revisions whose replicas run another spec
// than the layout's (an endpoint deleted by terminating its workflow, then
// made again under the same name) and returns their replicas, to be
// stopped; s.mu is held. Revisions are immutable, so this is rare.
func (ep *servedEndpoint) dropChanged(layouts []activities.RevisionLayout) []*replica {
	var out []*replica
	for _, l := range layouts {
		if rev := ep.revisions[l.Revision]; rev != nil && rev.digest != specDigest(l.Spec) {
			out = append(out, rev.replicas...)
			delete(ep.revisions, l.Revision)
		}
	}
	return out
}

func (ep *servedEndpoint) allReplicas() []*replica {
	var out []*replica
	for _, rev := range ep.revisions {
		out = append(out, rev.replicas...)
	}
	return out
}

// specDigest identifies what a revision's replicas run. A spec that cannot
// be digested (it did not pass validation) never matches.
func specDigest(spec inference.EndpointSpec) string {
	d, err := inference.Digest(spec)
	if err != nil {
		return "invalid: " + err.Error()
	}
	return d
}

// stopAll stops replicas at once and waits until their processes are
// gone (or ctx ends; they still die).
func stopAll(ctx context.Context, reps []*replica) error {
	for _, rp := range reps {
		rp.stop()
	}
	for _, rp := range reps {
		select {
		case <-rp.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ObserveEndpoint reports each revision's replicas: how many exist, how
// many pass the backend's readiness check now (checked here, so an
// observation is current), their startup milestones, which crash-loop,
// the queue signal scraped from each ready one, and their URLs. Traffic
// figures for the gates are not read: MetricsKnown stays false and
// traffic gates answer "insufficient samples", as on Kubernetes. Held is
// 0: no proxy holds requests here.
func (s *Serving) ObserveEndpoint(ctx context.Context, req activities.ObserveEndpointRequest) (activities.ObserveEndpointResult, error) {
	if err := checkRef(req.EndpointRef); err != nil {
		return activities.ObserveEndpointResult{}, invalid("%s", err)
	}
	for _, rev := range req.Revisions {
		if rev < 1 {
			return activities.ObserveEndpointResult{}, invalid("revision must be 1 or more, got %d", rev)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return activities.ObserveEndpointResult{}, errors.New("the worker is shutting down")
	}
	ep := s.endpointLocked(req.EndpointRef) // a restarted worker starts the recorded replicas
	revs := map[int]servedRevision{}
	for _, n := range req.Revisions {
		if r := ep.revisions[n]; r != nil && r.problem != "" {
			s.restoreRevision(req.EndpointRef, ep, activities.RevisionLayout{Revision: n, Spec: r.spec, Replicas: r.wanted})
		}
		if r := ep.revisions[n]; r != nil {
			revs[n] = servedRevision{replicas: slices.Clone(r.replicas), problem: r.problem}
		}
	}
	s.mu.Unlock()
	out := activities.ObserveEndpointResult{At: s.r.now()}
	for _, n := range req.Revisions {
		ro := s.observeRevision(ctx, n, revs[n])
		if n == req.Measured && req.Probes > 0 && len(ro.URLs) > 0 {
			p := engineprobe.Send(ctx, s.http, req.Backend, req.ProbeModel, ro.URLs, req.Probes)
			ro.Probed = &p
		}
		out.Revisions = append(out.Revisions, ro)
	}
	return out, nil
}

// replicaReport is one replica's part of an observation.
type replicaReport struct {
	st    replicaState
	ready bool
	queue *inference.Observation
}

// observeRevision observes a copy of a revision's entry (zero: unknown).
func (s *Serving) observeRevision(ctx context.Context, rev int, served servedRevision) activities.RevisionObservation {
	reps := served.replicas
	reports := make([]replicaReport, len(reps))
	var wg sync.WaitGroup
	for i, rp := range reps {
		wg.Go(func() { reports[i] = s.observeReplica(ctx, rp) })
	}
	wg.Wait()

	ro := activities.RevisionObservation{Revision: rev, Replicas: len(reps)}
	var crashing, waiting string
	for _, r := range reports {
		ro.Status.Startup = append(ro.Status.Startup, r.st.startup)
		if r.ready {
			ro.Status.Ready++
			ro.URLs = append(ro.URLs, baseURL(r.st.ports.http))
		}
		if r.queue != nil {
			ro.Queue = append(ro.Queue, *r.queue)
		}
		if r.st.recentExits >= CrashLoopExits {
			ro.Status.CrashLooping++
			if crashing == "" {
				crashing = fmt.Sprintf("CrashLoopBackOff: replica %s exited %d times in %s; %s",
					r.st.name, r.st.recentExits, s.crashLoopWindow, r.st.lastExit)
			}
		}
		if waiting == "" {
			waiting = r.st.waiting
		}
	}
	ro.Waiting = cmp.Or(crashing, waiting, served.problem)
	return ro
}

// observeReplica checks one replica's readiness and, when it is ready,
// scrapes its queue. A failed scrape leaves the replica out of Queue: its
// load is unknown to the autoscaler, never zero.
func (s *Serving) observeReplica(ctx context.Context, rp *replica) replicaReport {
	st := rp.state(s.r.now(), s.crashLoopWindow)
	if st.pid == 0 {
		return replicaReport{st: st}
	}
	rp.setReady(st.gen, s.probe(ctx, st, rp.launch), s.r.now())
	st = rp.state(s.r.now(), s.crashLoopWindow)
	rep := replicaReport{st: st, ready: st.pid != 0 && !st.startup.EngineReady.IsZero()}
	if !rep.ready {
		return rep
	}
	info := rp.launch.info
	url := baseURL(st.ports.metricsPort()) + info.MetricsPath
	samples, err := enginemetrics.Fetch(ctx, s.http, url, s.scrapeTimeout, enginemetrics.QueueFamilies(nil, info))
	if err != nil {
		s.logger.Debug("cannot scrape a replica", zap.String("replica", st.name), zap.Error(err))
		return rep
	}
	rep.queue = &inference.Observation{At: s.r.now(), Replica: st.name, Signal: inference.Signal(info.Backend, samples)}
	return rep
}

// DeleteEndpointRevisions stops the revisions' replicas and forgets them.
// Their logs stay in the data dir.
func (s *Serving) DeleteEndpointRevisions(ctx context.Context, req activities.DeleteEndpointRevisionsRequest) error {
	if err := checkRef(req.EndpointRef); err != nil {
		return invalid("%s", err)
	}
	ep, err := s.lockEndpoint(req.EndpointRef)
	if err != nil {
		return err
	}
	var stopping []*replica
	for _, rev := range req.Revisions {
		if r := ep.revisions[rev]; r != nil {
			stopping = append(stopping, r.replicas...)
			delete(ep.revisions, rev)
		}
	}
	recErr := s.saveRecordLocked(req.EndpointRef, ep)
	s.mu.Unlock()
	return errors.Join(stopAll(ctx, stopping), recErr)
}

// DeleteEndpoint stops every replica of the endpoint and forgets it (its
// recorded layout too). Its logs and work directory (engines' caches)
// stay in the data dir.
func (s *Serving) DeleteEndpoint(ctx context.Context, ref activities.EndpointRef) error {
	if err := checkRef(ref); err != nil {
		return invalid("%s", err)
	}
	var stopping []*replica
	s.mu.Lock()
	if ep := s.endpoints[ref]; ep != nil {
		stopping = ep.allReplicas()
		delete(s.endpoints, ref)
	} else {
		s.killLeftovers(ref) // a worker restarted since the endpoint ran
	}
	recErr := s.removeRecord(ref)
	s.mu.Unlock()
	return errors.Join(stopAll(ctx, stopping), recErr)
}

// checkRef rejects names that cannot name a directory.
func checkRef(ref activities.EndpointRef) error {
	if !platformSupported {
		return errUnsupportedPlatform
	}
	for _, c := range []struct{ what, v string }{{"project", ref.Project}, {"endpoint", ref.Endpoint}} {
		if c.v == "" || c.v == "." || c.v == ".." || strings.ContainsAny(c.v, "/\\\x00") {
			return fmt.Errorf("%s name %q cannot name a directory", c.what, c.v)
		}
	}
	return nil
}

// checkLayout rejects a layout that cannot run, before anything starts.
func checkLayout(req activities.ApplyEndpointLayoutRequest) error {
	if err := checkRef(req.EndpointRef); err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, l := range req.Revisions {
		switch {
		case l.Revision < 1:
			return fmt.Errorf("revision must be 1 or more, got %d", l.Revision)
		case seen[l.Revision]:
			return fmt.Errorf("revision %d is listed twice", l.Revision)
		case l.Replicas < 0:
			return fmt.Errorf("revision %d: replicas must not be negative, got %d", l.Revision, l.Replicas)
		case l.Replicas > inference.MaxReplicas:
			return fmt.Errorf("revision %d: at most %d replicas, got %d", l.Revision, inference.MaxReplicas, l.Replicas)
		}
		seen[l.Revision] = true
		if err := inference.Validate(l.Spec); err != nil {
			return fmt.Errorf("revision %d: %w", l.Revision, err)
		}
		for _, a := range l.Spec.Args {
			if strings.ContainsRune(a, 0) {
				return fmt.Errorf("revision %d: an argument contains a NUL byte", l.Revision)
			}
		}
		for _, e := range l.Spec.Env {
			if strings.ContainsRune(e.Value, 0) {
				return fmt.Errorf("revision %d: env variable %s contains a NUL byte", l.Revision, e.Name)
			}
		}
	}
	for _, w := range req.Traffic {
		if w.Revision < 1 || w.Weight < 0 || w.Weight > 100 {
			return fmt.Errorf("traffic weight %+v: want a revision of 1 or more and a weight in 0..100", w)
		}
	}
	return nil
}
