package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/pipeline"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"

	sparkfake "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned/fake"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	rayfake "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned/fake"
	"go.temporal.io/sdk/temporal"

	batchv1 "k8s.io/api/batch/v1"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// Unit tests with fake clientsets: what needs no watch events. Everything
// that waits for a status change runs against a real API server
// (apiserver_test.go).

func fakeBackend(t *testing.T, clients Clients, opts ...Option) *Backend {
	b := New(clients, "fake", append([]Option{WithNamespaceTemplate("atelier-{project}")}, opts...)...)
	t.Cleanup(b.Close)
	return b
}

func fakeClients() Clients {
	return Clients{Kube: fake.NewClientset(), Ray: rayfake.NewSimpleClientset(), Spark: sparkfake.NewSimpleClientset()}
}

func invalidStep(t *testing.T, err error, want string) {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() || !strings.Contains(app.Message(), want) {
		t.Errorf("err = %v, want InvalidStep containing %q", err, want)
	}
}

func TestInvalidRequests(t *testing.T) {
	ctx := context.Background()
	b := fakeBackend(t, fakeClients())
	ok := jobRequest("fit")
	for _, tc := range []struct {
		name string
		mod  func(*activities.KubeStepRequest)
		want string
	}{
		{"unknown kind", func(r *activities.KubeStepRequest) { r.Kind = "flink" }, `unknown Kubernetes step kind "flink"`},
		{"attempt 0", func(r *activities.KubeStepRequest) { r.Attempt = 0 }, "attempt must be 1 or more"},
		{"two sections", func(r *activities.KubeStepRequest) { r.Ray = &pipeline.RayStep{} }, "exactly one of container, ray, spark"},
		{"negative item", func(r *activities.KubeStepRequest) { r.Item = intPtr(-1) }, "item index"},
		{"negative deleteAfter", func(r *activities.KubeStepRequest) { r.DeleteAfter = -time.Second }, "deleteAfter must not be negative"},
		{"no image", func(r *activities.KubeStepRequest) { r.Container.Image = "" }, "a container step on Kubernetes needs an image"},
		{"bad namespace", func(r *activities.KubeStepRequest) { r.Project = "Bad_Project" }, "not a valid namespace name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok
			c := *ok.Container
			req.Container = &c
			tc.mod(&req)
			_, err := b.RunKubeStep(ctx, req)
			invalidStep(t, err, tc.want)
		})
	}
	// A cluster without KubeRay says so.
	noRay := fakeBackend(t, Clients{Kube: fake.NewClientset()})
	_, err := noRay.RunKubeStep(ctx, rayRequest("train"))
	invalidStep(t, err, "cannot run rayjob steps")
	_, err = noRay.EnsureRayCluster(ctx, activities.EnsureRayClusterRequest{Project: "p", RunID: "r", Cluster: pipeline.SharedRayCluster{Name: "c"}})
	invalidStep(t, err, "no KubeRay client")
	// Nothing was created for the invalid requests, not even a namespace.
	if nss, _ := b.clients.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); len(nss.Items) != 0 {
		t.Errorf("namespaces created: %v", nss.Items)
	}
}

// TestForeignObjectIsNotAdopted: an object with the attempt's name but
// another identity (here: another attempt's labels, then none) makes the
// step fail as InvalidStep, and the object is left untouched.
func TestForeignObjectIsNotAdopted(t *testing.T) {
	ctx := context.Background()
	clients := fakeClients()
	b := fakeBackend(t, clients)
	req := jobRequest("fit")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	other := framework.Identity{Project: req.Project, Run: req.RunID, Step: req.Step, Attempt: 2}.Labels()
	_, err := clients.Kube.BatchV1().Jobs("atelier-vision").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "atelier-vision", Labels: other},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.RunKubeStep(ctx, req)
	invalidStep(t, err, "already exists and is not this attempt's")
	j, err := clients.Kube.BatchV1().Jobs("atelier-vision").Get(ctx, name, metav1.GetOptions{})
	if err != nil || j.Labels[framework.LabelAttempt] != "2" || j.DeletionTimestamp != nil {
		t.Errorf("foreign Job touched: %+v, %v", j, err)
	}
	// The namespace was created on the way.
	if _, err := clients.Kube.CoreV1().Namespaces().Get(ctx, "atelier-vision", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace: %v", err)
	}
}

// TestAdoptsFinishedObject: a re-executed attempt whose object already
// finished (with its output pod) adopts it and reports its result, without
// creating anything: here through the fake clientsets' informers.
func TestAdoptsFinishedObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := fakeClients()
	now := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	b := fakeBackend(t, clients, WithClock(clocktesting.NewFakeClock(now)))
	ns := "atelier-vision"

	req := rayRequest("train")
	name := finishedRayJob(ctx, t, clients, ns, req, `{"ok": true}`)
	res, err := b.RunKubeStep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outputs["ok"] != true || res.Object != "rayjob/"+name || !res.FinishedAt.Equal(now) {
		t.Errorf("result %+v", res)
	}
	if list, _ := clients.Ray.RayV1().RayJobs(ns).List(ctx, metav1.ListOptions{}); len(list.Items) != 1 {
		t.Errorf("%d RayJobs, want 1", len(list.Items))
	}

	// The same through the spark fake, whose clientset predates
	// client-go's WatchList opt-out.
	sreq := sparkRequest("etl")
	sname := framework.ObjectName(sreq.RunID, sreq.Step, sreq.Item, sreq.Attempt, 63)
	sid := framework.Identity{Project: sreq.Project, Run: sreq.RunID, Step: sreq.Step, Item: sreq.Item, Attempt: sreq.Attempt}
	_, err = clients.Spark.SparkoperatorV1beta2().SparkApplications(ns).Create(ctx, &sparkv1beta2.SparkApplication{
		ObjectMeta: metav1.ObjectMeta{Name: sname, Namespace: ns, Labels: sid.Labels()},
		Status: sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{
			State: sparkv1beta2.ApplicationStateFailed, ErrorMessage: "driver pod failed"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.RunKubeStep(ctx, sreq)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeStepFailed || !strings.Contains(app.Message(), "FAILED: driver pod failed") {
		t.Errorf("spark: err = %v", err)
	}
}

// TestCloseReleasesWaiters: closing the backend ends waiting activities
// with a retryable error and leaves their objects alone.
func TestCloseReleasesWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := fakeClients()
	b := New(clients, "fake")
	req := rayRequest("train")
	done := make(chan error, 1)
	go func() {
		_, err := b.RunKubeStep(ctx, req)
		done <- err
	}()
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)
	for {
		if _, err := clients.Ray.RayV1().RayJobs("atelier-vision").Get(ctx, name, metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let it subscribe and wait
	b.Close()
	err := <-done
	var app *temporal.ApplicationError
	if !errors.Is(err, errBackendClosed) || errors.As(err, &app) {
		t.Fatalf("err = %v, want the retryable errBackendClosed", err)
	}
	if _, err := clients.Ray.RayV1().RayJobs("atelier-vision").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("RayJob gone after Close: %v", err)
	}
}

// TestRayStepMetrics: a Ray step's metrics ride its submitter's
// termination message as a line before its outputs (jobs/rayjob); they
// reach the result beside the outputs, and a bad metrics file fails the
// step as bad outputs, naming ATELIER_METRICS.
func TestRayStepMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, msg string
		wantErr   string
	}{
		{"good", framework.MetricsMarker + `{"accuracy": 0.93, "loss": [0.9, 0.5]}` + "\n" + `{"ok": true}`, ""},
		{"bad", framework.MetricsMarker + `{"accuracy": "high"}` + "\n" + `{"ok": true}`, "ATELIER_METRICS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clients := fakeClients()
			b := fakeBackend(t, clients)
			ns := "atelier-vision"
			req := rayRequest("train")
			finishedRayJob(ctx, t, clients, ns, req, tc.msg)
			res, err := b.RunKubeStep(ctx, req)
			if tc.wantErr != "" {
				var app *temporal.ApplicationError
				if !errors.As(err, &app) || app.Type() != activities.ErrTypeBadOutputs || !strings.Contains(app.Message(), tc.wantErr) {
					t.Fatalf("err = %v, want bad outputs naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Outputs["ok"] != true {
				t.Errorf("outputs %v", res.Outputs)
			}
			if res.Metrics == nil || res.Metrics.Scalars["accuracy"] != 0.93 || !slices.Equal(res.Metrics.Series["loss"], []float64{0.9, 0.5}) {
				t.Errorf("metrics %+v", res.Metrics)
			}
		})
	}
}

// finishedRayJob makes the succeeded RayJob of req's first attempt and its
// submitter pod, whose termination message is msg, as KubeRay leaves them;
// it returns the RayJob's name.
func finishedRayJob(ctx context.Context, t *testing.T, clients Clients, ns string, req activities.KubeStepRequest, msg string) string {
	t.Helper()
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)
	id := framework.Identity{Project: req.Project, Run: req.RunID, Step: req.Step, Attempt: 1}
	_, err := clients.Ray.RayV1().RayJobs(ns).Create(ctx, &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: id.Labels()},
		Status:     rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusComplete, JobStatus: rayv1.JobStatusSucceeded},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = clients.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: ns, Labels: map[string]string{"job-name": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-job-submitter"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-job-submitter",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}
