package integration

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	sparkclient "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"

	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/wire"
	"github.com/atelier-ml/atelier/workflows"
)

// kubeEnv is a stack plus a Kubernetes control plane (kubetest's: API
// server, controllers, scheduler, kwok nodes, the KubeRay operator), the
// simulated Spark operator, the programs in the step pods (Workloads), and
// a registered cluster.
type kubeEnv struct {
	*stack
	kc        *kubetest.Cluster
	workloads *kubetest.Workloads
	cluster   string
	namespace string
	kube      kubernetes.Interface
	ray       rayclient.Interface
	spark     sparkclient.Interface
}

var (
	clusterSeq int
	fleetOnce  sync.Once
	fleetErr   error
)

// script says how a step's program ends, per kind ("job", "rayjob",
// "sparkapp"): the pods' programs for the first two (Workloads, on kwok),
// the simulated Spark operator's scenario for the last.
type script func(kind string) kubetest.Exit

func newKubeEnv(t *testing.T, sc script, inProcessClusterWorker bool, opts ...stackOptions) *kubeEnv {
	t.Helper()
	kc := kubetest.StartControlPlane(t)
	// A small GPU fleet, once per binary (nodes are cluster-scoped).
	fleetOnce.Do(func() {
		fleetErr = kubetest.CreateNodes(context.Background(), kc.Clientset(), kubetest.MixedGPUNodes("fleet", 10, kubetest.DefaultMix))
	})
	require.NoError(t, fleetErr)
	s := newStack(t, opts...)
	clusterSeq++
	e := &kubeEnv{stack: s, kc: kc, cluster: fmt.Sprintf("k8s-%d-%d", os.Getpid()%10000, clusterSeq), namespace: kc.Namespace(t)}
	s.cfg.Cluster = e.cluster
	s.cfg.Kubeconfig = kc.Kubeconfig()
	s.cfg.KubeNamespaceTemplate = e.namespace
	// Steps with artifacts: the launcher's image is on the real node, whose
	// pods reach the gateway at the node's address when it listens there
	// (stackOptions.listenAddr).
	s.cfg.LauncherImage = kubetest.LauncherImage
	s.cfg.LauncherGatewayURL = "http://" + kubetest.RealNodeIP + ":" + s.port
	if len(opts) > 0 {
		s.cfg.KueueQueue = opts[0].kueueQueue
		s.cfg.ArtifactsStagingURL, s.cfg.ArtifactsStagingURI = opts[0].stagingURL, opts[0].stagingURI
		if d := opts[0].podDefaults; d != "" {
			s.cfg.PodDefaults = filepath.Join(t.TempDir(), "pod-defaults.yaml")
			require.NoError(t, os.WriteFile(s.cfg.PodDefaults, []byte(d), 0o600))
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wl, err := kubetest.NewWorkloads(kc.RESTConfig())
	require.NoError(t, err)
	wl.Script = func(p kubetest.PodRef) kubetest.Exit { return sc(p.Kind) }
	if len(opts) > 0 && opts[0].podScript != nil {
		wl.Script = opts[0].podScript
	}
	wl.Run(ctx)
	e.workloads = wl
	spark, err := kubetest.NewSparkOperator(kc.RESTConfig())
	require.NoError(t, err)
	spark.Script = func(ref kubetest.ObjectRef) kubetest.Scenario {
		ex := sc(ref.Kind)
		switch {
		case ex.Never:
			return kubetest.Scenario{Outcome: kubetest.Hang}
		case ex.Code != 0:
			return kubetest.Scenario{Outcome: kubetest.Fail, Delay: ex.After, Message: ex.Message}
		}
		return kubetest.Scenario{Outcome: kubetest.Succeed, Delay: ex.After, Outputs: ex.Message}
	}
	if len(opts) > 0 && opts[0].sparkScript != nil {
		spark.Script = opts[0].sparkScript
	}
	spark.Run(ctx)
	e.kube = kc.Clientset()
	e.ray = rayclient.NewForConfigOrDie(kc.RESTConfig())
	e.spark = sparkclient.NewForConfigOrDie(kc.RESTConfig())

	if inProcessClusterWorker {
		cw, clean, err := wire.InitClusterWorker(ctx, s.cfg, telemetry.New(telemetry.Options{}))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { defer close(done); _ = cw.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; clean() })
		e.waitRegistered(t)
	}
	return e
}

// waitRegistered waits until the cluster's worker has registered it, so
// ray and spark steps validate.
func (e *kubeEnv) waitRegistered(t *testing.T) {
	require.Eventually(t, func() bool {
		res, err := e.client().GetClusterWithResponse(context.Background(), e.cluster)
		require.NoError(t, err)
		return res.StatusCode() == 200
	}, 30*time.Second, 100*time.Millisecond, "cluster %s never registered", e.cluster)
}

// runObjects lists what a run still has on the apiserver.
func (e *kubeEnv) runObjects(t *testing.T, runID string) []string {
	t.Helper()
	ctx := context.Background()
	lo := metav1.ListOptions{LabelSelector: "atelier.dev/run=" + runID}
	var out []string
	jobs, err := e.kube.BatchV1().Jobs(e.namespace).List(ctx, lo)
	require.NoError(t, err)
	for _, o := range jobs.Items {
		out = append(out, "job/"+o.Name)
	}
	rjs, err := e.ray.RayV1().RayJobs(e.namespace).List(ctx, lo)
	require.NoError(t, err)
	for _, o := range rjs.Items {
		out = append(out, "rayjob/"+o.Name)
	}
	rcs, err := e.ray.RayV1().RayClusters(e.namespace).List(ctx, lo)
	require.NoError(t, err)
	for _, o := range rcs.Items {
		out = append(out, "raycluster/"+o.Name)
	}
	sas, err := e.spark.SparkoperatorV1beta2().SparkApplications(e.namespace).List(ctx, lo)
	require.NoError(t, err)
	for _, o := range sas.Items {
		out = append(out, "sparkapp/"+o.Name)
	}
	sort.Strings(out)
	return out
}

func kubePipelineYAML(cluster string) string {
	return fmt.Sprintf(`
rayClusters:
  - name: shared
    image: rayproject/ray:2.9.0
    workers: [{name: cpu, replicas: 1}]
steps:
  - name: etl
    kind: spark
    spark:
      type: Python
      image: spark:3.5.0
      mainApplicationFile: local:///opt/etl.py
      driver: {cores: 1, memory: 1g}
      executor: {cores: 1, memory: 1g, instances: 2}
  - name: train
    kind: ray
    dependsOn: [etl]
    ray:
      entrypoint: python train.py --rows {{ steps.etl.outputs.rows }}
      image: rayproject/ray:2.9.0
      workers: [{name: gpu, replicas: 2, gpu: 1, gpuType: NVIDIA-A100-SXM4-80GB}]
  - name: eval-a
    kind: ray
    dependsOn: [train]
    ray: {entrypoint: python eval.py a, cluster: shared}
  - name: eval-b
    kind: ray
    dependsOn: [train]
    ray: {entrypoint: python eval.py b, cluster: shared}
  - name: report
    dependsOn: [eval-a, eval-b]
    placement: {cluster: %s}
    container: {image: busybox:1.36, command: ["sh", "-c", "echo report"]}
`, cluster)
}

// Outputs per kind, as the steps' programs report them.
func outputsScript(kind string) kubetest.Exit {
	return kubetest.Exit{After: 100 * time.Millisecond, Message: fmt.Sprintf(`{"rows": 150, "kind": %q}`, kind)}
}

func TestKubePipelineRaySparkContainerEndToEnd(t *testing.T) {
	e := newKubeEnv(t, outputsScript, true)
	e.createPipeline("ray-spark", kubePipelineYAML(e.cluster))
	id := e.start("ray-spark", nil)
	r := e.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)

	etl := stepByName(r, "etl")
	assert.Equal(t, map[string]any{"rows": 150.0, "kind": "sparkapp"}, etl.Outputs, "outputs come back from the driver pod's termination message")
	train := stepByName(r, "train")
	require.Len(t, val(train.Attempts), 1)
	attempt := (*train.Attempts)[0]
	assert.Equal(t, e.cluster, val(attempt.Cluster))
	assert.Contains(t, val(attempt.Object), "rayjob/")
	assert.NotEmpty(t, val(attempt.Links), "dashboard/log links on the attempt")
	assert.Equal(t, "job", stepByName(r, "report").Outputs.(map[string]any)["kind"])

	// Nothing of the run is left on the cluster, including the shared RayCluster.
	assert.Empty(t, e.runObjects(t, id))
	for k, n := range e.workloads.ObjectsPerAttempt() {
		assert.Equal(t, 1, n, "attempt %s has %d objects", k, n)
	}
}

func TestKubeCancelDeletesEveryObject(t *testing.T) {
	hang := func(string) kubetest.Exit { return kubetest.Exit{Never: true} }
	e := newKubeEnv(t, hang, true)
	for _, tc := range []struct{ kind, step string }{
		{"sparkapp", "kind: spark\n    spark: {type: Python, image: spark:3.5.0, mainApplicationFile: local:///x.py}"},
		{"rayjob", "kind: ray\n    ray: {entrypoint: python x.py, image: rayproject/ray:2.9.0}"},
		{"rayjob-shared", "kind: ray\n    ray: {entrypoint: python x.py, cluster: shared}"},
		{"job", fmt.Sprintf("placement: {cluster: %s}\n    container: {image: busybox, command: [sleep, '300']}", e.cluster)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			name := "cancel-" + tc.kind
			e.createPipeline(name, fmt.Sprintf(`
rayClusters:
  - name: shared
    image: rayproject/ray:2.9.0
steps:
  - name: work
    %s
  - name: after
    dependsOn: [work]
    container: {command: ["true"]}
`, tc.step))
			id := e.start(name, nil)
			require.Eventually(t, func() bool { return len(e.runObjects(t, id)) > 0 }, 30*time.Second, 50*time.Millisecond)
			e.waitRun(id, 30*time.Second, "the step running", func(r gen.Run) bool {
				return r.Status != nil && len(r.Status.Steps) > 0 && r.Status.Steps[0].State == gen.StepStateRUNNING
			})
			before := e.runObjects(t, id)
			start := time.Now()
			e.cancel(id, "test")
			require.Eventually(t, func() bool { return len(e.runObjects(t, id)) == 0 }, 30*time.Second, 20*time.Millisecond,
				"objects left: %v", e.runObjects(t, id))
			t.Logf("%s: %v deleted %s after the cancel request", tc.kind, before, time.Since(start).Round(time.Millisecond))
			r := e.waitTerminal(id, 30*time.Second)
			assert.Equal(t, gen.RunStateCANCELLED, r.State)
			assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "after").State)
		})
	}
}

// startClusterWorkerProcess runs `atelier worker --cluster` as a child
// process, to be killed with SIGKILL.
func (e *kubeEnv) startClusterWorkerProcess(t *testing.T, log *os.File) *exec.Cmd {
	cmd := exec.Command(atelierBinary(t), "worker", "--cluster", e.cluster, "--kubeconfig", e.kc.Kubeconfig(),
		"--kube-namespace-template", e.namespace)
	cmd.Env = append(os.Environ(), "ATELIER_DATABASE_URL="+e.cfg.DatabaseURL, "ATELIER_TEMPORAL="+e.cfg.TemporalHostPort,
		"ATELIER_NAMESPACE="+e.cfg.Namespace, "ATELIER_LOG_LEVEL=warn",
		// Secrets and artifacts as the in-process worker has them.
		"ATELIER_SECRETS_KEY_URL="+e.cfg.SecretsKeyURL, "ATELIER_ARTIFACTS_URL="+e.cfg.ArtifactsURL,
		"ATELIER_LAUNCHER_IMAGE="+e.cfg.LauncherImage, "ATELIER_LAUNCHER_GATEWAY_URL="+e.cfg.LauncherGatewayURL)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	return cmd
}

// Kill -9 the local worker and the cluster worker at random points while 20
// runs of a Ray + Spark + container pipeline are in flight; restart them
// each time. Every run completes, no step attempt ever had two objects, and
// nothing is left on the cluster.
func TestKubeWorkersKilledAtRandomPointsEveryRunCompletes(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	rng := rand.New(rand.NewSource(42))
	var rngMu sync.Mutex
	script := func(kind string) kubetest.Exit {
		rngMu.Lock()
		d := time.Duration(300+rng.Intn(900)) * time.Millisecond
		rngMu.Unlock()
		return kubetest.Exit{After: d, Message: fmt.Sprintf(`{"rows": 150, "kind": %q}`, kind)}
	}
	e := newKubeEnv(t, script, false, stackOptions{noWorker: true})
	logf, err := os.Create(filepath.Join(t.TempDir(), "workers.log"))
	require.NoError(t, err)
	defer logf.Close()

	var mu sync.Mutex
	local := e.startWorkerProcess(t, "local-0.log")
	cluster := e.startClusterWorkerProcess(t, logf)
	e.waitRegistered(t)

	e.createPipeline("ray-spark", kubePipelineYAML(e.cluster))
	const runs = 20
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = e.start("ray-spark", nil)
	}

	stop := make(chan struct{})
	killerDone := make(chan int)
	go func() {
		kills := 0
		for {
			rngMu.Lock()
			wait := time.Duration(1500+rng.Intn(2500)) * time.Millisecond
			which := rng.Intn(3)
			rngMu.Unlock()
			select {
			case <-stop:
				killerDone <- kills
				return
			case <-time.After(wait):
			}
			mu.Lock()
			if which != 1 {
				_ = cluster.Process.Signal(syscall.SIGKILL)
				_ = cluster.Wait()
				cluster = e.startClusterWorkerProcess(t, logf)
				kills++
			}
			if which != 0 {
				_ = local.Process.Signal(syscall.SIGKILL)
				_ = local.Wait()
				local = e.startWorkerProcess(t, fmt.Sprintf("local-%d.log", kills))
				kills++
			}
			mu.Unlock()
		}
	}()

	for _, id := range ids {
		r := e.waitTerminal(id, 6*time.Minute)
		assert.Equal(t, gen.RunStateSUCCEEDED, r.State, "run %s: %+v", id, r.Status)
	}
	close(stop)
	kills := <-killerDone
	mu.Lock()
	_ = cluster.Process.Kill()
	_ = cluster.Wait()
	mu.Unlock()
	t.Logf("%d runs completed across %d worker kills", runs, kills)
	assert.Greater(t, kills, 2, "the test must actually kill workers mid-run")

	var dup []string
	for k, n := range e.workloads.ObjectsPerAttempt() {
		if n != 1 {
			dup = append(dup, fmt.Sprintf("%s=%d", k, n))
		}
	}
	assert.Empty(t, dup, "step attempts with more than one object")
	for _, id := range ids {
		assert.Empty(t, e.runObjects(t, id), "run %s left objects", id)
	}
}

// invalidSpecsPipeline sends specs that cannot run: a head CPU that is not
// a quantity (caught by the backend before any request) and a Spark type the
// SparkApplication CRD schema rejects (caught by the apiserver). Go
// pipelines are not checked by the spec validator, so both get this far.
func invalidSpecsPipeline(ctx workflow.Context, _ struct{}) error {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
	if err != nil {
		return err
	}
	retries := workflows.WithRetries(pipeline.Retries{Limit: 3})
	ray := run.Ray(ctx, "bad-ray", pipeline.RayStep{
		Entrypoint:         "python x.py",
		RayClusterTemplate: pipeline.RayClusterTemplate{Image: "rayproject/ray:2.9.0", Head: pipeline.Resources{CPU: "lots"}},
	}, retries)
	spark := run.Spark(ctx, "bad-spark", pipeline.SparkStep{Type: "Rust", Image: "spark:3.5.0", MainApplicationFile: "local:///x.rs"}, retries)
	_, err1 := ray.Get(ctx)
	_, err2 := spark.Get(ctx)
	if err1 == nil {
		err1 = err2
	}
	return run.End(nil, err1)
}

func TestKubeInvalidSpecsFailOnceWithClearErrors(t *testing.T) {
	e := newKubeEnv(t, outputsScript, true, stackOptions{register: func(r worker.Registry) {
		r.RegisterWorkflowWithOptions(invalidSpecsPipeline, workflow.RegisterOptions{Name: "test.InvalidSpecs"})
	}})
	id := "invalid-specs-" + e.cluster
	_, err := e.temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: id, TaskQueue: e.cfg.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(runstate.SAProject).ValueSet(e.project)),
	}, "test.InvalidSpecs", struct{}{})
	require.NoError(t, err)
	r := e.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	for _, name := range []string{"bad-ray", "bad-spark"} {
		st := stepByName(r, name)
		require.Len(t, val(st.Attempts), 1, "%s: an invalid spec is not retried, even with retries configured", name)
		t.Logf("%s: %s", name, val(st.Error))
	}
	assert.Contains(t, val(stepByName(r, "bad-ray").Error), "ray.head.cpu")
	assert.Contains(t, val(stepByName(r, "bad-spark").Error), "spec.type", "the apiserver's message names the field")
	assert.Empty(t, e.runObjects(t, id))
}

// Seen by a user: a run that used a cluster whose worker has gone never
// ended, its cleanup waiting forever for a worker. It must end, and say
// which objects may be left behind.
func TestKubeRunEndsWhenItsClusterWorkerIsGone(t *testing.T) {
	old := workflows.CleanupTimeout
	workflows.CleanupTimeout = 3 * time.Second // the in-process worker runs the workflows
	t.Cleanup(func() { workflows.CleanupTimeout = old })
	hang := func(string) kubetest.Exit { return kubetest.Exit{Never: true} }
	e := newKubeEnv(t, hang, false)
	logf, err := os.Create(filepath.Join(t.TempDir(), "cluster-worker.log"))
	require.NoError(t, err)
	cw := e.startClusterWorkerProcess(t, logf)
	t.Cleanup(func() { _ = cw.Process.Kill(); _ = cw.Wait() })
	e.waitRegistered(t)
	e.createPipeline("orphan", "steps:\n  - name: work\n    kind: ray\n    ray: {entrypoint: python x.py, image: rayproject/ray:2.9.0}\n")
	id := e.start("orphan", nil)
	require.Eventually(t, func() bool { return len(e.runObjects(t, id)) > 0 }, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, cw.Process.Kill()) // the cluster's worker is gone for good
	_ = cw.Wait()
	e.cancel(id, "test")
	r := e.waitTerminal(id, 60*time.Second)
	assert.Equal(t, gen.RunStateCANCELLED, r.State)
	require.NotEmpty(t, val(r.Status.Warnings))
	assert.Contains(t, (*r.Status.Warnings)[0], "may be left")
	assert.NotEmpty(t, e.runObjects(t, id), "nothing could delete them: the warning is the truth")
}

// Seen by a user: after a worker stall longer than the heartbeat timeout,
// the old activity execution got a heartbeat NotFound and deleted the
// RayJob its retry had just adopted, failing a long job. Here the cluster
// worker is frozen (SIGSTOP) past the heartbeat timeout mid-step; the step
// must still succeed on its one and only object.
func TestKubeWorkerStallDoesNotDeleteTheAdoptedObject(t *testing.T) {
	slow := func(string) kubetest.Exit { return kubetest.Exit{After: 30 * time.Second, Message: `{"ok": true}`} }
	e := newKubeEnv(t, slow, false)
	logf, err := os.Create(filepath.Join(t.TempDir(), "cluster-worker.log"))
	require.NoError(t, err)
	cw := e.startClusterWorkerProcess(t, logf)
	t.Cleanup(func() { _ = cw.Process.Kill(); _ = cw.Wait() })
	e.waitRegistered(t)
	e.createPipeline("long", "steps:\n  - name: train\n    kind: ray\n    ray: {entrypoint: python train.py, image: rayproject/ray:2.9.0}\n")
	id := e.start("long", nil)
	var uid types.UID
	require.Eventually(t, func() bool {
		l, err := e.ray.RayV1().RayJobs(e.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		if err == nil && len(l.Items) == 1 {
			uid = l.Items[0].UID
		}
		return uid != ""
	}, 30*time.Second, 50*time.Millisecond)
	time.Sleep(2 * time.Second) // heartbeats are flowing

	require.NoError(t, cw.Process.Signal(syscall.SIGSTOP))
	time.Sleep(15 * time.Second) // > the 10 s heartbeat timeout: Temporal retries the activity
	require.NoError(t, cw.Process.Signal(syscall.SIGCONT))

	r := e.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", stepByName(r, "train"))
	l, err := e.ray.RayV1().RayJobs(e.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
	require.NoError(t, err)
	for _, o := range l.Items {
		assert.Equal(t, uid, o.UID, "the RayJob was recreated: the stalled execution deleted the one its retry adopted")
	}
}

// A container step asking for more GPUs than any node has: the scheduler
// leaves its pod Pending, and the run shows the scheduler's reason on the
// running attempt instead of silently waiting. Cancelling it still cleans up.
func TestKubeUnschedulableStepShowsTheSchedulersReason(t *testing.T) {
	e := newKubeEnv(t, outputsScript, true)
	e.createPipeline("too-many-gpus", fmt.Sprintf(`
steps:
  - name: train
    placement: {cluster: %s}
    container: {image: busybox, command: ["true"], resources: {gpu: 16}}
`, e.cluster))
	id := e.start("too-many-gpus", nil)
	var msg string
	e.waitRun(id, 60*time.Second, "the scheduler's reason on the attempt", func(r gen.Run) bool {
		if r.Status == nil || len(r.Status.Steps) == 0 || len(val(r.Status.Steps[0].Attempts)) == 0 {
			return false
		}
		st := r.Status.Steps[0]
		msg = val((*st.Attempts)[0].Message)
		return st.State == gen.StepStateRUNNING && msg != ""
	})
	t.Logf("attempt message: %s", msg)
	assert.Contains(t, msg, "Unschedulable")
	assert.Contains(t, msg, "Insufficient nvidia.com/gpu")
	assert.Regexp(t, `0/\d+ nodes are available`, msg)

	e.cancel(id, "no GPUs")
	r := e.waitTerminal(id, 30*time.Second)
	assert.Equal(t, gen.RunStateCANCELLED, r.State)
	require.Eventually(t, func() bool { return len(e.runObjects(t, id)) == 0 }, 30*time.Second, 50*time.Millisecond)
}
