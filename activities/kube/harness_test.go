package kube

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	sparkclient "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// cluster is a test's view of the shared kube-apiserver: clients and a
// namespace of its own.
type cluster struct {
	t       *testing.T
	c       *kubetest.Cluster
	ns      string
	clients Clients
	dyn     dynamic.Interface
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := kubetest.Start(t)
	cfg := c.RESTConfig()
	return &cluster{
		t: t, c: c, ns: c.Namespace(t),
		clients: Clients{
			Kube:  c.Clientset(),
			Ray:   rayclient.NewForConfigOrDie(cfg),
			Spark: sparkclient.NewForConfigOrDie(cfg),
		},
		dyn: dynamic.NewForConfigOrDie(cfg),
	}
}

// backend returns a Backend whose namespace template is the test's
// namespace, so it watches only that namespace.
func (k *cluster) backend(opts ...Option) *Backend {
	k.t.Helper()
	opts = append([]Option{
		WithNamespaceTemplate(k.ns),
		WithHeartbeatInterval(50 * time.Millisecond),
		WithLogger(zaptest.NewLogger(k.t)),
	}, opts...)
	b := New(k.clients, "kubetest", opts...)
	b.deleteWait = 5 * time.Second
	b.outputWait = 2 * time.Second
	k.t.Cleanup(b.Close)
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runner executes activities the way a worker does, in a Temporal test
// activity environment: heartbeats are recorded, the worker's background
// context can be cancelled (which cancels the activity) and its stop
// channel closed.
type runner struct {
	t   *testing.T
	env *testsuite.TestActivityEnvironment
	// cancel cancels the step the way Temporal does (cause: a
	// CanceledError); supersede ends the activity's context the way a
	// heartbeat answered NotFound does (the execution was retried).
	cancel    func()
	supersede func()
	stop      chan struct{}

	mu    sync.Mutex
	beats []Heartbeat
}

func newRunner(t *testing.T, b *Backend, prev *Heartbeat) *runner {
	var suite testsuite.WorkflowTestSuite
	// The SDK logs every heartbeat and every (expected) activity error;
	// the backend's own zaptest log says what matters.
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	r := &runner{t: t, env: suite.NewTestActivityEnvironment(), stop: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(context.Background())
	r.cancel = func() { cancel(temporal.NewCanceledError("cancelled by the test")) }
	r.supersede = func() { cancel(serviceerror.NewNotFound("activity not found (the test superseded it)")) }
	t.Cleanup(func() { cancel(nil) })
	r.env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})
	r.env.SetWorkerStopChannel(r.stop)
	r.env.SetTestTimeout(2 * time.Minute)
	if prev != nil {
		r.env.SetHeartbeatDetails(*prev)
	}
	r.env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
		var hb Heartbeat
		if err := d.Get(&hb); err == nil {
			r.mu.Lock()
			r.beats = append(r.beats, hb)
			r.mu.Unlock()
		}
	})
	b.Register(r.env)
	return r
}

func (r *runner) lastBeat() (Heartbeat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.beats) == 0 {
		return Heartbeat{}, false
	}
	return r.beats[len(r.beats)-1], true
}

type stepOutcome struct {
	res activities.KubeStepResult
	err error
	at  time.Time
}

// runStep starts RunKubeStep in the background; the outcome arrives on the
// channel.
func (r *runner) runStep(req activities.KubeStepRequest) <-chan stepOutcome {
	ch := make(chan stepOutcome, 1)
	go func() {
		v, err := r.env.ExecuteActivity(activities.RunKubeStepName, req)
		at := time.Now()
		var res activities.KubeStepResult
		if err == nil {
			err = v.Get(&res)
		} else {
			var app *temporal.ApplicationError
			if errors.As(err, &app) && app.HasDetails() {
				_ = app.Details(&res)
			}
		}
		ch <- stepOutcome{res, err, at}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan stepOutcome) stepOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(90 * time.Second):
		t.Fatal("activity did not return")
		return stepOutcome{}
	}
}

// notYet asserts the activity has not returned within d.
func notYet(t *testing.T, ch <-chan stepOutcome, d time.Duration, what string) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("activity returned during %s: %+v, %v", what, o.res, o.err)
	case <-time.After(d):
	}
}

func appErr(t *testing.T, err error, wantType string) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		t.Fatalf("want %s application error, got %v", wantType, err)
	}
	if app.Type() != wantType || !app.NonRetryable() {
		t.Fatalf("want non-retryable %s, got %s (nonRetryable=%v): %v", wantType, app.Type(), app.NonRetryable(), app)
	}
	return app
}

// eventually polls cond (test-side polling is fine: the test plays the
// operator, and operators react to what they see).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

var gvrs = []schema.GroupVersionResource{
	{Group: "ray.io", Version: "v1", Resource: "rayjobs"},
	{Group: "ray.io", Version: "v1", Resource: "rayclusters"},
	{Group: "sparkoperator.k8s.io", Version: "v1beta2", Resource: "sparkapplications"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
	{Version: "v1", Resource: "pods"},
}

// playGC stands in for the garbage collector, which the test apiserver
// lacks: objects under foreground deletion keep the foregroundDeletion
// finalizer until the GC has deleted their dependents and removes it. It
// runs until the test ends.
func (k *cluster) playGC(extraNamespaces ...string) {
	namespaces := append([]string{k.ns}, extraNamespaces...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	k.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, ns := range namespaces {
				for _, gvr := range gvrs {
					list, err := k.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
					if err != nil {
						continue
					}
					for _, o := range list.Items {
						if o.GetDeletionTimestamp() == nil || !slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
							continue
						}
						_, _ = k.dyn.Resource(gvr).Namespace(ns).Patch(ctx, o.GetName(), types.MergePatchType,
							[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// outputPod plays the controller that runs a step's output pod: it creates
// a pod with labels and a container, then reports it terminated with msg.
func (k *cluster) outputPod(name string, labels map[string]string, container string, exit int32, msg string) {
	k.t.Helper()
	ctx := ctxT(k.t)
	pods := k.clients.Kube.CoreV1().Pods(k.ns)
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: container, Image: "busybox"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	now := metav1.Now()
	phase := corev1.PodSucceeded
	if exit != 0 {
		phase = corev1.PodFailed
	}
	p.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: container, Image: "busybox", ImageID: "docker.io/library/busybox@sha256:0",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: "Completed", Message: msg, StartedAt: now, FinishedAt: now}},
	}}}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

func (k *cluster) gone(gvr schema.GroupVersionResource, name string) bool {
	_, err := k.dyn.Resource(gvr).Namespace(k.ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

func (k *cluster) countLabelled(gvr schema.GroupVersionResource, selector string) int {
	list, err := k.dyn.Resource(gvr).Namespace(k.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		k.t.Fatal(err)
	}
	return len(list.Items)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func intPtr(i int) *int { return &i }
