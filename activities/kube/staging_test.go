package kube

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"gocloud.dev/blob"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/sparkapp"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/staging"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// A ray step with artifacts on a worker without a staging store fails
// before anything is created, naming what the worker lacks; one without
// artifacts stages nothing.
func TestRayArtifactsNeedAStagingStore(t *testing.T) {
	ctx := context.Background()
	req := rayRequest("train")
	req.Outputs = []pipeline.ArtifactOutput{{Name: "model"}}
	clients := fakeClients()
	_, err := fakeBackend(t, clients).RunKubeStep(ctx, req)
	invalidStep(t, err, "the step has artifacts but the worker of cluster fake has no staging store to hand them to a Ray or Spark job: it lacks ATELIER_ARTIFACTS_STAGING_URL and ATELIER_ARTIFACTS_STAGING_URI")
	if rjs, _ := clients.Ray.RayV1().RayJobs("atelier-vision").List(ctx, metav1.ListOptions{}); len(rjs.Items) != 0 {
		t.Errorf("RayJobs created: %d", len(rjs.Items))
	}
	if stages(rayRequest("train")) || stages(jobRequest("fit")) {
		t.Error("a step without artifacts, or a container, stages")
	}
}

// stagingFixture is an artifact store and a staging store on disk, and
// the staging bucket as the job's pods (the test) see it.
type stagingFixture struct {
	arts *artifactstore.Store
	st   *staging.Store
	pods *blob.Bucket
}

func newStagingFixture(t *testing.T) stagingFixture {
	ctx := context.Background()
	arts, err := artifactstore.Open(ctx, "file://"+t.TempDir())
	must(t, err)
	dir := t.TempDir()
	st, err := staging.Open(ctx, "file://"+dir, "s3://lake/staging")
	must(t, err)
	pods, err := blob.OpenBucket(ctx, "file://"+dir)
	must(t, err)
	t.Cleanup(func() { _ = arts.Close(); _ = st.Close(); _ = pods.Close() })
	return stagingFixture{arts, st, pods}
}

// keys lists what the staging store holds.
func (f stagingFixture) keys(t *testing.T) []string {
	var out []string
	it := f.pods.List(nil)
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			return out
		}
		must(t, err)
		out = append(out, o.Key)
	}
}

// A ray job's artifacts, through the fake clientsets: the activity
// stages the input, creates
// the RayJob naming the staging URIs, and once the job succeeded stores
// what it wrote and empties the attempt's prefix.
func TestRayJobStagesItsArtifactsWithFakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := fakeClients()
	f := newStagingFixture(t)
	b := fakeBackend(t, clients, WithStaging(f.st, f.arts))
	ns := "atelier-vision"

	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "train.csv"), []byte("x,y\n"), 0o644))
	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()
	data, err := f.arts.PutPath(ctx, "vision", root, "train.csv")
	must(t, err)
	req := rayRequest("train")
	req.Inputs = []runstate.Artifact{{Name: "data", Digest: data.Digest, Size: data.Size}}
	req.Outputs = []pipeline.ArtifactOutput{{Name: "report"}}
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)

	type outcome struct {
		res activities.KubeStepResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.RunKubeStep(ctx, req)
		done <- outcome{res, err}
	}()
	var rj *rayv1.RayJob
	for rj == nil {
		select {
		case o := <-done:
			t.Fatalf("the step ended before its RayJob was made: %+v", o)
		case <-time.After(50 * time.Millisecond):
		}
		if got, err := clients.Ray.RayV1().RayJobs(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			rj = got
		}
	}
	prefix := "vision/" + req.RunID + "/train/1"
	if want := "ATELIER_ARTIFACTS_URI: s3://lake/staging/" + prefix + "/outputs"; !strings.Contains(rj.Spec.RuntimeEnvYAML, want) {
		t.Errorf("runtime_env %q lacks %q", rj.Spec.RuntimeEnvYAML, want)
	}
	if got, err := f.pods.ReadAll(ctx, prefix+"/inputs/data"); err != nil || string(got) != "x,y\n" {
		t.Fatalf("staged input %q, %v", got, err)
	}
	must(t, f.pods.WriteAll(ctx, prefix+"/outputs/report", []byte("ok"), nil))
	_, err = clients.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: ns, Labels: map[string]string{"job-name": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-job-submitter"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "ray-job-submitter",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: `{"rows": 1}`}}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	rj.Status = rayv1.RayJobStatus{JobDeploymentStatus: rayv1.JobDeploymentStatusComplete, JobStatus: rayv1.JobStatusSucceeded}
	_, err = clients.Ray.RayV1().RayJobs(ns).UpdateStatus(ctx, rj, metav1.UpdateOptions{})
	must(t, err)

	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if len(o.res.Artifacts) != 1 || o.res.Artifacts[0].Name != "report" || o.res.Artifacts[0].Size != 2 || o.res.Outputs["rows"] != float64(1) {
		t.Fatalf("result %+v", o.res)
	}
	rd, err := f.arts.Reader(ctx, "vision", o.res.Artifacts[0].Digest)
	must(t, err)
	got, _ := io.ReadAll(rd)
	rd.Close()
	if string(got) != "ok" {
		t.Errorf("stored %q", got)
	}
	if left := f.keys(t); len(left) != 0 {
		t.Errorf("staging holds %v after the attempt", left)
	}
}

// A spark step stages the same way: its driver and executors get the
// URIs, and what the application wrote is stored once it completed.
func TestSparkAppStagesItsArtifactsWithFakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := fakeClients()
	f := newStagingFixture(t)
	b := fakeBackend(t, clients, WithStaging(f.st, f.arts))
	ns := "atelier-vision"
	req := sparkRequest("etl")
	req.Outputs = []pipeline.ArtifactOutput{{Name: "table", Type: pipeline.ArtifactDataset}}
	name := framework.ObjectName(req.RunID, req.Step, req.Item, req.Attempt, 63)

	type outcome struct {
		res activities.KubeStepResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.RunKubeStep(ctx, req)
		done <- outcome{res, err}
	}()
	apps := clients.Spark.SparkoperatorV1beta2().SparkApplications(ns)
	var app *sparkv1beta2.SparkApplication
	for app == nil {
		select {
		case o := <-done:
			t.Fatalf("the step ended before its SparkApplication was made: %+v", o)
		case <-time.After(50 * time.Millisecond):
		}
		if got, err := apps.Get(ctx, name, metav1.GetOptions{}); err == nil {
			app = got
		}
	}
	prefix := "vision/" + req.RunID + "/etl/4/2"
	want := "s3://lake/staging/" + prefix + "/outputs"
	if app.Spec.Driver.EnvVars[ArtifactsURIEnv] != want || app.Spec.Executor.EnvVars[ArtifactsURIEnv] != want {
		t.Errorf("driver env %v, executor env %v: want %s=%s", app.Spec.Driver.EnvVars, app.Spec.Executor.EnvVars, ArtifactsURIEnv, want)
	}
	for _, k := range []string{"part-0000.parquet", "part-0001.parquet", "_SUCCESS"} {
		must(t, f.pods.WriteAll(ctx, prefix+"/outputs/table/"+k, []byte(k), nil))
	}
	_, err := clients.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-driver", Namespace: ns, Labels: map[string]string{sparkapp.AppNameLabel: name, sparkapp.RoleLabel: "driver"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: sparkapp.DriverContainer}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: sparkapp.DriverContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: `{}`}}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	app.Status = sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{State: sparkv1beta2.ApplicationStateCompleted},
		DriverInfo: sparkv1beta2.DriverInfo{PodName: name + "-driver"}, TerminationTime: metav1.Now()}
	_, err = apps.UpdateStatus(ctx, app, metav1.UpdateOptions{})
	must(t, err)

	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if len(o.res.Artifacts) != 1 || o.res.Artifacts[0].Files != 3 || o.res.Artifacts[0].Type != "dataset" {
		t.Fatalf("artifacts %+v", o.res.Artifacts)
	}
	if left := f.keys(t); len(left) != 0 {
		t.Errorf("staging holds %v after the attempt", left)
	}
}

// The worker stages a ray job's inputs before creating it, names the
// staging URIs in its runtime_env, stores what the job wrote there by
// content once it succeeded, and removes the attempt's part of the
// staging store; a declared output the job did not write fails the step
// naming it, and is cleaned up too.
func TestRayJobStagesItsArtifacts(t *testing.T) {
	k := startCluster(t)
	f := newStagingFixture(t)
	b := k.backend(WithStaging(f.st, f.arts))
	ctx := context.Background()

	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "train.csv"), []byte("x,y\n1,2\n"), 0o644))
	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()
	data, err := f.arts.PutPath(ctx, "vision", root, "train.csv")
	must(t, err)

	req := rayRequest("train")
	req.Inputs = []runstate.Artifact{{Name: "data", Digest: data.Digest, Size: data.Size}}
	req.Outputs = []pipeline.ArtifactOutput{{Name: "model", Path: "ckpt", Type: pipeline.ArtifactModel}}
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)
	out := newRunner(t, b, nil).runStep(req)
	j := k.waitRayJob(name)
	prefix := "vision/" + req.RunID + "/train/1"
	for _, want := range []string{
		"ATELIER_INPUTS_URI: s3://lake/staging/" + prefix + "/inputs",
		"ATELIER_ARTIFACTS_URI: s3://lake/staging/" + prefix + "/outputs",
	} {
		if !strings.Contains(j.Spec.RuntimeEnvYAML, want) {
			t.Errorf("runtime_env %q lacks %q", j.Spec.RuntimeEnvYAML, want)
		}
	}
	// The job reads its input and writes a directory.
	got, err := f.pods.ReadAll(ctx, prefix+"/inputs/data")
	if err != nil || string(got) != "x,y\n1,2\n" {
		t.Fatalf("staged input %q, %v", got, err)
	}
	must(t, f.pods.WriteAll(ctx, prefix+"/outputs/ckpt/weights.bin", []byte("w"), nil))
	must(t, f.pods.WriteAll(ctx, prefix+"/outputs/ckpt/config.json", []byte("{}"), nil))

	k.outputPod(name+"-a", map[string]string{"job-name": name, framework.JobNameLabel: name}, "ray-job-submitter", 0, `{"loss": 0.1}`)
	end := metav1.NewTime(time.Now().Truncate(time.Second))
	k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
		s.JobDeploymentStatus, s.JobStatus, s.EndTime = rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded, &end
	})
	o := wait(t, out)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if len(o.res.Artifacts) != 1 {
		t.Fatalf("artifacts %+v", o.res.Artifacts)
	}
	a := o.res.Artifacts[0]
	if a.Name != "model" || a.Type != "model" || a.Files != 2 || a.Size != 3 || a.Producer.Step != "train" || a.Producer.Attempt != 1 {
		t.Errorf("artifact %+v", a)
	}
	m, err := f.arts.ReadManifest(ctx, "vision", a.Digest)
	if err != nil || len(m.Files) != 2 || m.Files[0].Path != "config.json" {
		t.Errorf("stored manifest %+v, %v", m, err)
	}
	if left := f.keys(t); len(left) != 0 {
		t.Errorf("staging holds %v after the attempt", left)
	}

	// The second attempt writes nothing.
	req.Attempt = 2
	name = framework.ObjectName(req.RunID, req.Step, nil, 2, 47)
	out = newRunner(t, b, nil).runStep(req)
	k.waitRayJob(name)
	k.outputPod(name+"-b", map[string]string{"job-name": name, framework.JobNameLabel: name}, "ray-job-submitter", 0, `{}`)
	k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
		s.JobDeploymentStatus, s.JobStatus, s.EndTime = rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded, &end
	})
	o = wait(t, out)
	app := appErr(t, o.err, activities.ErrTypeBadOutputs)
	if want := `the job wrote no output artifact "model": nothing at s3://lake/staging/vision/` + req.RunID + `/train/2/outputs/ckpt`; !strings.HasPrefix(app.Message(), want) {
		t.Errorf("message %q, want it to start with %q", app.Message(), want)
	}
	if left := f.keys(t); len(left) != 0 {
		t.Errorf("staging holds %v after the failed attempt", left)
	}
}
