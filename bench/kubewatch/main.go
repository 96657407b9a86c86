// Command kubewatch measures how fast the Kubernetes backend notices that a
// step's object finished: the latency from the operator's terminal status
// write to the return of RunKubeStep, for one step at a time and for many
// concurrent RayJob steps on one Backend, against a real kube-apiserver
// (internal/stack/kubetest, with the KubeRay CRDs; no operator runs: the program
// plays KubeRay and writes the status itself).
//
//	go run ./bench/kubewatch [-n 1000] [-single 30] [-rounds 2] [-writers 16]
//	                         [-modes subject,poll,watch] [-cpuprofile f] [-quick]
//
// Modes, measured in the same run, interleaved:
//
//   - subject: activities/kube Backend.RunKubeStep called directly (not via
//     Temporal, to isolate the watch path): one shared, label-filtered
//     informer per kind; each waiting step subscribes to its object.
//   - poll: the naive baseline: each step GETs its RayJob every second.
//   - watch: each step opens its own watch (fieldSelector metadata.name).
//
// Every mode creates the same RayJobs (built by the backend's RayJob kind)
// and, on seeing success, lists the output pods as the backend does. The
// latency of a step is from the moment its status write (a merge patch of
// the status subresource) was sent to the moment its waiter returned, so it
// includes the write itself; the write's own round trip is reported
// separately. For one step the write comes at a random 0.3–1.3 s after
// creation, so a 1 s poll is caught at a random phase.
//
// The program's own status writes, lists and deletes (the operator's part)
// use a client with a connection of its own, as KubeRay would, so that they
// do not share an HTTP/2 connection with the waiters being measured.
//
// The report (markdown, on stdout) also gives the API server's own count of
// open RayJob watches while the steps wait (apiserver_longrunning_requests)
// and the RayJob GETs per second the waiters cost. Progress goes to stderr.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atelier-ml/atelier/pipeline"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

const project = "bench"

func main() {
	n := flag.Int("n", 1000, "concurrent steps in the concurrent scenario")
	single := flag.Int("single", 30, "sequential repetitions per mode in the one-step scenario")
	rounds := flag.Int("rounds", 2, "rounds per mode in the concurrent scenario, interleaved")
	writers := flag.Int("writers", 16, "concurrent status writers (the operator's parallelism)")
	quick := flag.Bool("quick", false, "smoke run: -n 100 -single 5 -rounds 1 unless given")
	only := flag.String("modes", "subject,poll,watch", "comma-separated modes to run (the first is the ratios' denominator)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process (not the API server) to `file`")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubewatch:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["n"] {
			*n = 100
		}
		if !set["single"] {
			*single = 5
		}
		if !set["rounds"] {
			*rounds = 1
		}
	}
	if *n < 1 || *single < 1 || *rounds < 1 || *writers < 1 {
		fmt.Fprintln(os.Stderr, "kubewatch: -n, -single, -rounds and -writers must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *single, *rounds, *writers, strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "kubewatch:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubewatch: "+format+"\n", args...)
}

// env is the cluster and clients shared by every mode.
type env struct {
	cluster *kubetest.Cluster
	cfg     *rest.Config
	kube    kubernetes.Interface
	ray     rayclient.Interface
	// The operator's clients (status writes, readiness lists, deletes,
	// metrics): a separate connection, as KubeRay is a separate process,
	// so its traffic does not share an HTTP/2 connection with the waiters.
	opKube  kubernetes.Interface
	opRay   rayclient.Interface
	ns      string
	backend *kube.Backend
	rayGETs atomic.Int64 // GET of a single RayJob, by any client
	writers int
}

func run(ctx context.Context, n, single, rounds, writers int, only []string) error {
	t0 := time.Now()
	c, err := kubetest.StartCluster(logf)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logf("stop: %v", err)
		}
	}()
	logf("cluster up in %s", time.Since(t0).Round(time.Millisecond))

	e := &env{cluster: c, writers: writers}
	e.cfg = c.RESTConfig()
	// Count single-object RayJob GETs (the poll baseline's cost), whoever
	// makes them.
	e.cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/rayjobs/") && r.URL.Query().Get("watch") == "" {
				e.rayGETs.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	if e.kube, err = kubernetes.NewForConfig(e.cfg); err != nil {
		return err
	}
	if e.ray, err = rayclient.NewForConfig(e.cfg); err != nil {
		return err
	}
	opCfg := c.RESTConfig()
	opCfg.UserAgent = "kubewatch-operator"
	opCfg.DisableCompression = true // also keys a transport of its own
	if e.opKube, err = kubernetes.NewForConfig(opCfg); err != nil {
		return err
	}
	if e.opRay, err = rayclient.NewForConfig(opCfg); err != nil {
		return err
	}
	e.ns = fmt.Sprintf("kubewatch-%d", rand.IntN(1e6))
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The namespace template names the one namespace: the backend then
	// watches just it, like a single-namespace installation.
	// Warnings only (a watch interrupted and re-established would show
	// here, and explain an outlier).
	zc := zap.NewDevelopmentConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	logger, err := zc.Build()
	if err != nil {
		return err
	}
	e.backend = kube.New(kube.Clients{Kube: e.kube, Ray: e.ray}, "bench", kube.WithNamespaceTemplate(e.ns), kube.WithLogger(logger))
	defer e.backend.Close()

	all := map[string]*mode{
		"subject": {name: "subject", what: "Backend.RunKubeStep: shared informer, per-object subscription", wait: e.subjectWait},
		"poll":    {name: "poll", what: "per-step GET every 1 s", wait: e.pollWait},
		"watch":   {name: "watch", what: "per-step watch (fieldSelector metadata.name)", wait: e.watchWait},
	}
	var modes []*mode
	for _, name := range only {
		m, ok := all[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("unknown mode %q (subject, poll, watch)", name)
		}
		modes = append(modes, m)
	}

	// Warm-up: informer started, CRD handlers built, connections open.
	for _, m := range modes {
		if _, err := e.round(ctx, m, "warm", 3, false); err != nil {
			return fmt.Errorf("warm-up %s: %w", m.name, err)
		}
	}
	// One step at a time.
	for i := range single {
		for _, m := range modes {
			r, err := e.round(ctx, m, fmt.Sprintf("s%d", i), 1, true)
			if err != nil {
				return fmt.Errorf("%s single %d: %w", m.name, i, err)
			}
			m.single = append(m.single, r.lat...)
			m.singleAck = append(m.singleAck, r.latAck...)
		}
		logf("single %d/%d done", i+1, single)
	}
	// N at once.
	for i := range rounds {
		order := slices.Clone(modes)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			logf("%s: %d concurrent steps, round %d/%d", m.name, n, i+1, rounds)
			r, err := e.round(ctx, m, fmt.Sprintf("c%d", i), n, false)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", m.name, i, err)
			}
			m.conc = append(m.conc, r)
		}
	}
	report(e, modes, n, single, rounds)
	return nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// waitFunc waits for the step with request req (whose RayJob, named name,
// the round creates for baselines; the subject creates its own) and
// returns when it has seen success and read the output pods.
type waitFunc func(ctx context.Context, req activities.KubeStepRequest, name string, ready chan<- struct{}) error

type mode struct {
	name, what string
	wait       waitFunc
	single     []time.Duration
	singleAck  []time.Duration
	conc       []roundResult
}

type roundResult struct {
	lat       []time.Duration // from the status write sent
	latAck    []time.Duration // from the status write acknowledged
	writes    []time.Duration // status write round trips
	watches   float64         // apiserver RayJob watches while waiting
	getsPerS  float64         // single RayJob GETs per second while waiting
	patchSpan time.Duration   // first write sent → last write sent
}

func stepRequest(run, step string) activities.KubeStepRequest {
	return activities.KubeStepRequest{
		Project: project, RunID: run, Step: step, Attempt: 1, Kind: activities.KubeRayJob,
		Ray: &pipeline.RayStep{
			Entrypoint: "python train.py",
			RayClusterTemplate: pipeline.RayClusterTemplate{
				Image: "rayproject/ray:2.46.0", RayVersion: "2.46.0",
				Head:    pipeline.Resources{CPU: "1", Memory: "2Gi"},
				Workers: []pipeline.RayWorkerGroup{{Name: "gpu", Replicas: 1, Resources: pipeline.Resources{GPU: 1}}},
			},
		},
	}
}

// round runs n steps of mode m at once: start the waiters (the subject's
// create their RayJobs; for baselines the round creates them), let them
// settle, write the terminal status of every RayJob from a pool of writers,
// and collect each step's latency.
func (e *env) round(ctx context.Context, m *mode, tag string, n int, randomDelay bool) (roundResult, error) {
	var res roundResult
	run := fmt.Sprintf("%s-%s-%d", m.name, tag, rand.IntN(1e9))
	reqs := make([]activities.KubeStepRequest, n)
	names := make([]string, n)
	for i := range n {
		reqs[i] = stepRequest(run, "s"+strconv.Itoa(i))
		names[i] = framework.ObjectName(run, reqs[i].Step, nil, 1, 47)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	if m.name != "subject" {
		if err := e.createRayJobs(ctx, reqs, names); err != nil {
			return res, err
		}
	}
	returned := make([]time.Time, n)
	errs := make([]error, n)
	ready := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = m.wait(ctx, reqs[i], names[i], ready)
			returned[i] = time.Now()
		})
	}
	// Every waiter is waiting (the subject: its RayJob exists, and the
	// backend subscribes right after creating it; baselines: their first
	// GET or watch is up).
	if m.name == "subject" {
		for {
			list, err := e.opRay.RayV1().RayJobs(e.ns).List(ctx, metav1.ListOptions{LabelSelector: framework.RunSelector(run)})
			if err != nil {
				return res, err
			}
			if len(list.Items) == n {
				break
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
	} else {
		for range n {
			select {
			case <-ready:
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
	}
	created := time.Now()
	settle := 1 * time.Second
	if randomDelay {
		settle = 300*time.Millisecond + rand.N(time.Second)
	}
	if n > 1 {
		settle = 2 * time.Second
	}
	gets0 := e.rayGETs.Load()
	time.Sleep(settle / 2)
	res.watches = e.rayJobWatches(ctx)
	time.Sleep(settle - settle/2)
	res.getsPerS = float64(e.rayGETs.Load()-gets0) / time.Since(created).Seconds()

	// Play KubeRay: terminal status for every RayJob.
	sent, acked := make([]time.Time, n), make([]time.Time, n)
	res.writes = make([]time.Duration, n)
	work := make(chan int)
	var wwg sync.WaitGroup
	var werr atomic.Pointer[error]
	patch := []byte(`{"status":{"jobDeploymentStatus":"Complete","jobStatus":"SUCCEEDED"}}`)
	for range min(e.writers, n) {
		wwg.Go(func() {
			for i := range work {
				sent[i] = time.Now()
				_, err := e.opRay.RayV1().RayJobs(e.ns).Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{}, "status")
				acked[i] = time.Now()
				res.writes[i] = acked[i].Sub(sent[i])
				if err != nil {
					werr.Store(&err)
				}
			}
		})
	}
	for _, i := range rand.Perm(n) {
		work <- i
	}
	close(work)
	wwg.Wait()
	if p := werr.Load(); p != nil {
		return res, fmt.Errorf("status write: %w", *p)
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			return res, fmt.Errorf("step %d: %w", i, errs[i])
		}
		res.lat = append(res.lat, returned[i].Sub(sent[i]))
		res.latAck = append(res.latAck, returned[i].Sub(acked[i]))
	}
	res.patchSpan = slices.MaxFunc(sent, time.Time.Compare).Sub(slices.MinFunc(sent, time.Time.Compare))

	// Background deletion: no garbage collector runs, and nothing here
	// has dependents.
	bg := metav1.DeletePropagationBackground
	err := e.opRay.RayV1().RayJobs(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg},
		metav1.ListOptions{LabelSelector: framework.RunSelector(run)})
	return res, err
}

func (e *env) createRayJobs(ctx context.Context, reqs []activities.KubeStepRequest, names []string) error {
	k := e.backend.Kind(activities.KubeRayJob)
	work := make(chan int)
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for range min(e.writers, len(reqs)) {
		wg.Go(func() {
			for i := range work {
				req := reqs[i]
				id := framework.Identity{Project: req.Project, Run: req.RunID, Step: req.Step, Attempt: 1}
				obj, err := k.Build(framework.Step{Request: req, Env: framework.StepEnv(req),
					Meta: metav1.ObjectMeta{Name: names[i], Namespace: e.ns, Labels: id.Labels()}})
				if err == nil {
					_, err = k.Create(ctx, obj)
				}
				if err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range reqs {
		work <- i
	}
	close(work)
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// subjectWait runs the activity, which creates its RayJob; the round
// sees the RayJobs appear.
func (e *env) subjectWait(ctx context.Context, req activities.KubeStepRequest, _ string, _ chan<- struct{}) error {
	_, err := e.backend.RunKubeStep(ctx, req)
	return err
}

func succeeded(j *rayv1.RayJob) bool {
	return j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete && j.Status.JobStatus == rayv1.JobStatusSucceeded
}

// outputs reads the output pods as the backend does on success: from the
// watch cache, at a resourceVersion no older than the terminal status.
func (e *env) outputs(ctx context.Context, j *rayv1.RayJob) error {
	_, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j.Name,
		ResourceVersion: j.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	return err
}

func (e *env) pollWait(ctx context.Context, _ activities.KubeStepRequest, name string, ready chan<- struct{}) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	first := true
	for {
		j, err := e.ray.RayV1().RayJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if first {
			ready <- struct{}{}
			first = false
		}
		if succeeded(j) {
			return e.outputs(ctx, j)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (e *env) watchWait(ctx context.Context, _ activities.KubeStepRequest, name string, ready chan<- struct{}) error {
	j, err := e.ray.RayV1().RayJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	w, err := e.ray.RayV1().RayJobs(e.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: j.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	ready <- struct{}{}
	if succeeded(j) {
		return e.outputs(ctx, j)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return fmt.Errorf("watch error: %v", ev.Object)
		}
		if j, ok := ev.Object.(*rayv1.RayJob); ok && succeeded(j) {
			return e.outputs(ctx, j)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch closed")
}

// rayJobWatches reads the API server's gauge of open RayJob watches.
func (e *env) rayJobWatches(ctx context.Context) float64 {
	b, err := e.opKube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return -1
	}
	var total float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `resource="rayjobs"`) ||
			!strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
			found = true
		}
	}
	if !found {
		return 0
	}
	return total
}

func report(e *env, modes []*mode, n, single, rounds int) {
	out := os.Stdout
	fmt.Fprintf(out, "## bench/kubewatch: RayJob terminal status → RunKubeStep return\n\n")
	fmt.Fprintf(out, "Command: `%s`\n\n", benchstack.CommandLine("kubewatch"))
	fmt.Fprintf(out, "Machine: %s/%s, %s, NumCPU=%d, GOMAXPROCS=%d, loadavg at end %s\n\n",
		runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadavg())
	fmt.Fprintf(out, "Versions: %s, kube-apiserver %s (internal/stack/kubetest, etcd, KubeRay CRDs, no operators), %s\n\n",
		runtime.Version(), kubetest.KubeVersion, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "Latency: from sending the terminal status write (merge patch of the RayJob's status subresource) to the waiter's return, after it listed the output pods; it includes the write itself (write round trip shown separately). \"From write ack\" measures from the write's response instead: a lower bound (the watch event can overtake the response, making single samples negative). All modes wait for the same RayJobs, in the same API server, interleaved. The backend's informers: %s.\n\n",
		strings.Join(e.backend.Watches(), ", "))

	fmt.Fprintf(out, "### One step at a time (%d per mode; status written 0.3–1.3 s after the waiter is ready)\n\n", single)
	fmt.Fprintf(out, "| mode | what | samples | p50 ms | p99 ms | max ms | from write ack p50 / p99 ms |\n|---|---|---|---|---|---|---|\n")
	for _, m := range modes {
		s, a := benchstack.Summarize(m.single), benchstack.Summarize(m.singleAck)
		fmt.Fprintf(out, "| %s | %s | %d | %s | %s | %s | %s / %s |\n", m.name, m.what, s.N, benchstack.Ms(s.P50), benchstack.Ms(s.P99),
			benchstack.Ms(s.Max), benchstack.Ms(a.P50), benchstack.Ms(a.P99))
	}

	fmt.Fprintf(out, "\n### %d concurrent steps on one backend (%d round(s) per mode; statuses written by %d writers in random order)\n\n", n, rounds, e.writers)
	fmt.Fprintf(out, "| mode | samples | p50 ms | p99 ms | max ms | per-round p50 ms | from write ack p50 / p99 ms | write p50 / p99 ms | writes spread over | RayJob watches on the apiserver | RayJob GETs/s while waiting |\n")
	fmt.Fprintf(out, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	sums := map[string]benchstack.Summary{}
	for _, m := range modes {
		var all, allAck, writes []time.Duration
		var perRound []string
		var watches, gets, spans []string
		for _, r := range m.conc {
			all = append(all, r.lat...)
			allAck = append(allAck, r.latAck...)
			writes = append(writes, r.writes...)
			perRound = append(perRound, benchstack.Ms(benchstack.Summarize(r.lat).P50))
			watches = append(watches, fmt.Sprintf("%.0f", r.watches))
			gets = append(gets, fmt.Sprintf("%.0f", r.getsPerS))
			spans = append(spans, r.patchSpan.Round(time.Millisecond).String())
		}
		s := benchstack.Summarize(all)
		sums[m.name] = s
		w, a := benchstack.Summarize(writes), benchstack.Summarize(allAck)
		fmt.Fprintf(out, "| %s | %d | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s | %s |\n", m.name, s.N, benchstack.Ms(s.P50), benchstack.Ms(s.P99),
			benchstack.Ms(s.Max), strings.Join(perRound, ", "), benchstack.Ms(a.P50), benchstack.Ms(a.P99), benchstack.Ms(w.P50), benchstack.Ms(w.P99),
			strings.Join(spans, ", "), strings.Join(watches, ", "), strings.Join(gets, ", "))
	}
	subj := benchstack.Summarize(modes[0].single)
	sums["subject"] = sums[modes[0].name]
	fmt.Fprintf(out, "\n| ratio | one step p50 | one step p99 | %d concurrent p50 | %d concurrent p99 |\n|---|---|---|---|---|\n", n, n)
	for _, m := range modes[1:] {
		b := benchstack.Summarize(m.single)
		fmt.Fprintf(out, "| %s / subject | %s | %s | %s | %s |\n", m.name,
			benchstack.Ratio(float64(b.P50), float64(subj.P50)), benchstack.Ratio(float64(b.P99), float64(subj.P99)),
			benchstack.Ratio(float64(sums[m.name].P50), float64(sums["subject"].P50)),
			benchstack.Ratio(float64(sums[m.name].P99), float64(sums["subject"].P99)))
	}
	fmt.Fprintf(out, "\nTarget (the backend's contract): a RayJob turning terminal completes its step within 1 s; subject p99 for %d concurrent steps: %s ms (%s).\n",
		n, benchstack.Ms(sums["subject"].P99), map[bool]string{true: "meets", false: "MISSES"}[sums["subject"].P99 <= time.Second])
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "n/a"
}
