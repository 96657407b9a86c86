package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/pipeline"

	sparkv1beta2 "github.com/kubeflow/spark-operator/v2/api/v1beta2"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"go.temporal.io/sdk/temporal"

	batchv1 "k8s.io/api/batch/v1"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// These tests run the activities against a real kube-apiserver with the
// KubeRay and spark-operator CRDs (internal/stack/kubetest). No operator runs:
// each test plays the operator, writing .status through the status
// subresource and creating the pods an operator would, and plays the
// garbage collector where objects are deleted.

func rayRequest(step string) activities.KubeStepRequest {
	return activities.KubeStepRequest{
		Project: "vision", RunID: "0197a3b2-7c1d-7e4f-8a9b-0c1d2e3f4a5b", Step: step, Attempt: 1, Kind: activities.KubeRayJob,
		Ray: &pipeline.RayStep{
			Entrypoint: "python train.py",
			RayClusterTemplate: pipeline.RayClusterTemplate{
				Image: "rayproject/ray:2.46.0", RayVersion: "2.46.0",
				Head:    pipeline.Resources{CPU: "1", Memory: "2Gi"},
				Workers: []pipeline.RayWorkerGroup{{Name: "gpu", Replicas: 1, Resources: pipeline.Resources{GPU: 1, GPUType: "NVIDIA-L4"}}},
			},
		},
	}
}

func (k *cluster) rayJob(name string) *rayv1.RayJob {
	k.t.Helper()
	j, err := k.clients.Ray.RayV1().RayJobs(k.ns).Get(ctxT(k.t), name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	return j
}

// waitRayJob waits until the activity has created its RayJob.
func (k *cluster) waitRayJob(name string) *rayv1.RayJob {
	k.t.Helper()
	var j *rayv1.RayJob
	eventually(k.t, "RayJob "+name, func() bool {
		var err error
		j, err = k.clients.Ray.RayV1().RayJobs(k.ns).Get(ctxT(k.t), name, metav1.GetOptions{})
		return err == nil
	})
	return j
}

// setRayStatus plays KubeRay writing a RayJob's status. It returns when
// the write was sent: the watch event may reach the backend before the
// response reaches the test.
func (k *cluster) setRayStatus(name string, f func(*rayv1.RayJobStatus)) time.Time {
	k.t.Helper()
	j := k.rayJob(name)
	f(&j.Status)
	sent := time.Now()
	if _, err := k.clients.Ray.RayV1().RayJobs(k.ns).UpdateStatus(ctxT(k.t), j, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	return sent
}

func TestRayJobSuccessWithOutputs(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	r := newRunner(t, b, nil)
	req := rayRequest("train")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)

	out := r.runStep(req)
	j := k.waitRayJob(name)
	for key, want := range map[string]string{
		framework.LabelManagedBy: "atelier", framework.LabelProject: "vision", framework.LabelRun: req.RunID,
		framework.LabelStep: "train", framework.LabelAttempt: "1",
	} {
		if j.Labels[key] != want {
			t.Errorf("label %s = %q, want %q", key, j.Labels[key], want)
		}
	}
	if _, ok := j.Labels[framework.LabelItem]; ok {
		t.Error("item label on a step without items")
	}
	if j.Spec.RayClusterSpec == nil || j.Spec.RayClusterSpec.WorkerGroupSpecs[0].Template.Spec.NodeSelector[framework.GPUProductKey] != "NVIDIA-L4" {
		t.Errorf("stored spec %+v", j.Spec.RayClusterSpec)
	}

	// Transient states, in the order KubeRay goes through them (with a
	// failed first try), must never end the step.
	start := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, st := range []struct {
		deploy rayv1.JobDeploymentStatus
		job    rayv1.JobStatus
	}{
		{rayv1.JobDeploymentStatusInitializing, ""},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusPending},
		{rayv1.JobDeploymentStatusRetrying, rayv1.JobStatusFailed},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusRunning},
	} {
		k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
			s.JobDeploymentStatus, s.JobStatus, s.StartTime = st.deploy, st.job, &start
			s.DashboardURL = name + "-raycluster-abcde-head-svc." + k.ns + ".svc.cluster.local:8265"
		})
		notYet(t, out, 300*time.Millisecond, fmt.Sprintf("%s/%s", st.deploy, st.job))
	}
	if hb, ok := r.lastBeat(); !ok || hb.Name != name || hb.Namespace != k.ns || hb.UID != string(j.UID) {
		t.Errorf("heartbeat %+v (ok=%v), want %s/%s uid %s", hb, ok, k.ns, name, j.UID)
	}

	// The submitter pod exits, then KubeRay reports the end.
	k.outputPod(name+"-x7k2p", map[string]string{"job-name": name, framework.JobNameLabel: name}, "ray-job-submitter", 0,
		`{"accuracy": 0.93, "checkpoint": "s3://bucket/ckpt"}`)
	end := metav1.NewTime(time.Now().Truncate(time.Second))
	patched := k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
		s.JobDeploymentStatus, s.JobStatus, s.EndTime = rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded, &end
	})
	o := wait(t, out)
	t.Logf("RayJob terminal status write sent → activity returned: %s", o.at.Sub(patched))
	if o.err != nil {
		t.Fatal(o.err)
	}
	res := o.res
	if res.Outputs["accuracy"] != 0.93 || res.Outputs["checkpoint"] != "s3://bucket/ckpt" || res.ExitCode != 0 {
		t.Errorf("result %+v", res)
	}
	if res.Namespace != k.ns || res.Object != "rayjob/"+name {
		t.Errorf("object %s %s", res.Namespace, res.Object)
	}
	if !res.StartedAt.Equal(j.CreationTimestamp.Time) || !res.FinishedAt.Equal(end.Time) {
		t.Errorf("times %v–%v, want %v–%v", res.StartedAt, res.FinishedAt, j.CreationTimestamp, end)
	}
	if !strings.HasPrefix(res.Links["dashboard"], "http://"+name+"-raycluster") || res.Links["logs"] != "kubectl logs -n "+k.ns+" job/"+name {
		t.Errorf("links %v", res.Links)
	}
	if got := b.Watches(); len(got) != 1 || got[0] != "RayJob" {
		t.Errorf("watches %v, want just RayJob", got)
	}
}

func TestRayJobFailureReason(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	req := rayRequest("train")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)
	out := newRunner(t, b, nil).runStep(req)
	k.waitRayJob(name)
	k.outputPod(name+"-a", map[string]string{"job-name": name}, "ray-job-submitter", 1, "")
	k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
		s.JobDeploymentStatus, s.JobStatus = rayv1.JobDeploymentStatusFailed, rayv1.JobStatusFailed
		s.Reason, s.Message = rayv1.AppFailed, "Job entrypoint command failed with exit code 1"
	})
	o := wait(t, out)
	app := appErr(t, o.err, activities.ErrTypeStepFailed)
	want := "RayJob " + name + " failed: AppFailed: Job entrypoint command failed with exit code 1; container ray-job-submitter exited with code 1"
	if app.Message() != want {
		t.Errorf("message %q, want %q", app.Message(), want)
	}
	if o.res.Object != "rayjob/"+name || o.res.ExitCode != 1 {
		t.Errorf("details %+v", o.res)
	}
}

// TestRayJobRejectedByCRD: the v1.6.0 RayJob CRD enforces a CEL rule on
// spec.managedBy (its value must be KubeRay's or MultiKueue's). Nothing in a
// ray step reaches that field, so the test sets it with a mutator, the way
// a site policy could.
func TestRayJobRejectedByCRD(t *testing.T) {
	k := startCluster(t)
	b := k.backend(WithMutator(func(obj framework.Object) {
		if j, ok := obj.(*rayv1.RayJob); ok {
			j.Spec.ManagedBy = ptr.To("example.com/other-controller")
		}
	}))
	o := wait(t, newRunner(t, b, nil).runStep(rayRequest("train")))
	app := appErr(t, o.err, activities.ErrTypeInvalidStep)
	for _, want := range []string{"spec.managedBy", "must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"} {
		if !strings.Contains(app.Message(), want) {
			t.Errorf("message %q lacks %q", app.Message(), want)
		}
	}
	t.Logf("apiserver message: %s", app.Message())
}

func sparkRequest(step string) activities.KubeStepRequest {
	return activities.KubeStepRequest{
		Project: "vision", RunID: "run-spark-1", Step: step, Item: intPtr(4), Attempt: 2, Kind: activities.KubeSparkApp,
		Spark: &pipeline.SparkStep{
			Type: "Python", Image: "spark:3.5.5", SparkVersion: "3.5.5",
			MainApplicationFile: "local:///opt/app/etl.py", Arguments: []string{"--day", "1"},
			Driver:   pipeline.SparkRole{Cores: 1, Memory: "1g"},
			Executor: pipeline.SparkRole{Cores: 2, Memory: "4g", Instances: 2},
		},
	}
}

func (k *cluster) setSparkStatus(name string, st sparkv1beta2.SparkApplicationStatus) time.Time {
	k.t.Helper()
	apps := k.clients.Spark.SparkoperatorV1beta2().SparkApplications(k.ns)
	a, err := apps.Get(ctxT(k.t), name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	a.Status = st
	sent := time.Now()
	if _, err := apps.UpdateStatus(ctxT(k.t), a, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	return sent
}

func TestSparkSuccessWithOutputs(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	req := sparkRequest("etl")
	name := framework.ObjectName(req.RunID, req.Step, req.Item, 2, 63)
	out := newRunner(t, b, nil).runStep(req)
	apps := k.clients.Spark.SparkoperatorV1beta2().SparkApplications(k.ns)
	var app *sparkv1beta2.SparkApplication
	eventually(t, "SparkApplication", func() bool {
		var err error
		app, err = apps.Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil
	})
	if app.Labels[framework.LabelItem] != "4" || app.Spec.Driver.EnvVars["ATELIER_ITEM"] != "4" {
		t.Errorf("item label/env: %v %v", app.Labels, app.Spec.Driver.EnvVars)
	}
	for _, s := range []sparkv1beta2.ApplicationStateType{sparkv1beta2.ApplicationStateSubmitted, sparkv1beta2.ApplicationStateRunning, sparkv1beta2.ApplicationStateSucceeding} {
		k.setSparkStatus(name, sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{State: s},
			DriverInfo: sparkv1beta2.DriverInfo{PodName: name + "-driver", WebUIAddress: "10.1.2.3:4040"}})
		notYet(t, out, 200*time.Millisecond, string(s))
	}
	k.outputPod(name+"-driver", map[string]string{"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"},
		"spark-kubernetes-driver", 0, `{"rows": 1200}`)
	patched := k.setSparkStatus(name, sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{State: sparkv1beta2.ApplicationStateCompleted},
		DriverInfo: sparkv1beta2.DriverInfo{PodName: name + "-driver", WebUIAddress: "10.1.2.3:4040"}, TerminationTime: metav1.Now()})
	o := wait(t, out)
	t.Logf("SparkApplication terminal status write sent → activity returned: %s", o.at.Sub(patched))
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Outputs["rows"] != float64(1200) || o.res.Object != "sparkapplication/"+name || o.res.Links["sparkUI"] != "http://10.1.2.3:4040" {
		t.Errorf("result %+v", o.res)
	}
}

func TestSparkFailureReason(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	req := sparkRequest("etl")
	name := framework.ObjectName(req.RunID, req.Step, req.Item, 2, 63)
	out := newRunner(t, b, nil).runStep(req)
	eventually(t, "SparkApplication", func() bool {
		_, err := k.clients.Spark.SparkoperatorV1beta2().SparkApplications(k.ns).Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil
	})
	k.setSparkStatus(name, sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{
		State: sparkv1beta2.ApplicationStateFailedSubmission, ErrorMessage: "failed to run spark-submit: exit status 1"}})
	app := appErr(t, wait(t, out).err, activities.ErrTypeStepFailed)
	if want := "SparkApplication " + name + " failed: SUBMISSION_FAILED: failed to run spark-submit: exit status 1"; app.Message() != want {
		t.Errorf("message %q, want %q", app.Message(), want)
	}
}

func TestSparkRejectedByCRD(t *testing.T) {
	k := startCluster(t)
	req := sparkRequest("etl")
	req.Spark.Type = "Rust" // the CRD's enum: Java, Python, Scala, R
	app := appErr(t, wait(t, newRunner(t, k.backend(), nil).runStep(req)).err, activities.ErrTypeInvalidStep)
	if !strings.Contains(app.Message(), "spec.type") || !strings.Contains(app.Message(), "Rust") {
		t.Errorf("message %q", app.Message())
	}
	req = sparkRequest("etl")
	req.Spark.Executor.Cores = -2 // the CRD's minimum is 1
	app = appErr(t, wait(t, newRunner(t, k.backend(), nil).runStep(req)).err, activities.ErrTypeInvalidStep)
	if !strings.Contains(app.Message(), "spec.executor.cores") {
		t.Errorf("message %q", app.Message())
	}
}

func jobRequest(step string) activities.KubeStepRequest {
	return activities.KubeStepRequest{
		Project: "vision", RunID: "run-job-1", Step: step, Attempt: 1, Kind: activities.KubeJob,
		Container: &pipeline.Container{Image: "python:3.12", Command: []string{"python", "fit.py"},
			Resources: &pipeline.Resources{CPU: "1", Memory: "1Gi"}},
	}
}

func (k *cluster) waitJob(name string) *batchv1.Job {
	k.t.Helper()
	var j *batchv1.Job
	eventually(k.t, "Job "+name, func() bool {
		var err error
		j, err = k.clients.Kube.BatchV1().Jobs(k.ns).Get(ctxT(k.t), name, metav1.GetOptions{})
		return err == nil
	})
	return j
}

// jobPod plays the Job controller creating the Job's pod: template labels
// plus the controller's, owned by the Job.
func (k *cluster) jobPod(j *batchv1.Job) *corev1.Pod {
	k.t.Helper()
	labels := framework.MergeLabels(j.Spec.Template.Labels, map[string]string{framework.JobNameLabel: j.Name, "job-name": j.Name})
	p, err := k.clients.Kube.CoreV1().Pods(k.ns).Create(ctxT(k.t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-pod", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}}},
		Spec: j.Spec.Template.Spec,
	}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	return p
}

func (k *cluster) setPodStatus(p *corev1.Pod, st corev1.PodStatus) {
	k.t.Helper()
	cur, err := k.clients.Kube.CoreV1().Pods(k.ns).Get(ctxT(k.t), p.Name, metav1.GetOptions{})
	must(k.t, err)
	cur.Status = st
	_, err = k.clients.Kube.CoreV1().Pods(k.ns).UpdateStatus(ctxT(k.t), cur, metav1.UpdateOptions{})
	must(k.t, err)
}

func (k *cluster) setJobStatus(name string, f func(*batchv1.JobStatus)) time.Time {
	k.t.Helper()
	jobs := k.clients.Kube.BatchV1().Jobs(k.ns)
	j, err := jobs.Get(ctxT(k.t), name, metav1.GetOptions{})
	must(k.t, err)
	f(&j.Status)
	sent := time.Now()
	_, err = jobs.UpdateStatus(ctxT(k.t), j, metav1.UpdateOptions{})
	must(k.t, err)
	return sent
}

func terminated(exit int32, msg string) corev1.PodStatus {
	now := metav1.Now()
	phase := corev1.PodSucceeded
	if exit != 0 {
		phase = corev1.PodFailed
	}
	return corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "step", Image: "python:3.12", ImageID: "docker.io/library/python@sha256:0",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg, StartedAt: now, FinishedAt: now}},
	}}}
}

func TestJobSuccessWithOutputs(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	req := jobRequest("fit")
	req.Timeout = time.Hour
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out := newRunner(t, b, nil).runStep(req)
	j := k.waitJob(name)
	if ptr.Deref(j.Spec.ActiveDeadlineSeconds, 0) != 3600 || ptr.Deref(j.Spec.BackoffLimit, -1) != 0 {
		t.Errorf("job spec %+v", j.Spec)
	}
	pod := k.jobPod(j)
	start := metav1.NewTime(time.Now().Truncate(time.Second))
	k.setJobStatus(name, func(s *batchv1.JobStatus) { s.StartTime, s.Active = &start, 1 })
	notYet(t, out, 200*time.Millisecond, "job active")
	k.setPodStatus(pod, terminated(0, `{"loss": 0.12}`))
	end := metav1.NewTime(time.Now().Truncate(time.Second))
	patched := k.setJobStatus(name, func(s *batchv1.JobStatus) {
		s.Active, s.Succeeded, s.CompletionTime = 0, 1, &end
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: end},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: end},
		}
	})
	o := wait(t, out)
	t.Logf("Job terminal status write sent → activity returned: %s", o.at.Sub(patched))
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Outputs["loss"] != 0.12 || o.res.Object != "job/"+name || !o.res.FinishedAt.Equal(end.Time) {
		t.Errorf("result %+v", o.res)
	}
	if got := b.Watches(); strings.Join(got, ",") != "Job,Pod" {
		t.Errorf("watches %v", got)
	}
}

func TestJobFailureAndBadOutputs(t *testing.T) {
	k := startCluster(t)
	b := k.backend()

	req := jobRequest("fit")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out := newRunner(t, b, nil).runStep(req)
	j := k.waitJob(name)
	k.setPodStatus(k.jobPod(j), terminated(3, ""))
	now := metav1.Now()
	k.setJobStatus(name, func(s *batchv1.JobStatus) {
		s.StartTime, s.Failed = &now, 1
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	})
	o := wait(t, out)
	app := appErr(t, o.err, activities.ErrTypeStepFailed)
	if want := "Job " + name + " failed: BackoffLimitExceeded: Job has reached the specified backoff limit; container step exited with code 3"; app.Message() != want {
		t.Errorf("message %q, want %q", app.Message(), want)
	}
	if o.res.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", o.res.ExitCode)
	}

	// Outputs that are not a JSON object.
	req = jobRequest("report")
	name = framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out = newRunner(t, b, nil).runStep(req)
	j = k.waitJob(name)
	k.setPodStatus(k.jobPod(j), terminated(0, `["not", "an", "object"]`))
	k.setJobStatus(name, func(s *batchv1.JobStatus) {
		s.StartTime, s.CompletionTime, s.Succeeded = &now, &now, 1
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	})
	app = appErr(t, wait(t, out).err, activities.ErrTypeBadOutputs)
	if !strings.Contains(app.Message(), "must be a JSON object, not an array") {
		t.Errorf("message %q", app.Message())
	}
}

func TestJobImagePullFailsAfterGrace(t *testing.T) {
	k := startCluster(t)
	k.playGC()
	b := k.backend(WithImagePullGrace(700 * time.Millisecond))
	req := jobRequest("fit")
	req.Container.Image = "pyhton:3.12"
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	out := newRunner(t, b, nil).runStep(req)
	pod := k.jobPod(k.waitJob(name))
	k.setPodStatus(pod, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "step", Image: "pyhton:3.12",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: `Back-off pulling image "pyhton:3.12": not found`}},
	}}})
	t0 := time.Now()
	o := wait(t, out)
	t.Logf("ImagePullBackOff seen → step failed: %s (grace 700ms)", o.at.Sub(t0))
	app := appErr(t, o.err, activities.ErrTypeStepFailed)
	if !strings.Contains(app.Message(), "Job "+name+" failed: ImagePullBackOff") || !strings.Contains(app.Message(), "pyhton:3.12") {
		t.Errorf("message %q", app.Message())
	}
	if !k.gone(gvrs[3], name) {
		t.Error("Job not deleted after the image-pull failure")
	}
}

func TestJobTimeoutDeletes(t *testing.T) {
	k := startCluster(t)
	k.playGC()
	req := jobRequest("fit")
	req.Timeout = 800 * time.Millisecond
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	o := wait(t, newRunner(t, k.backend(), nil).runStep(req))
	app := appErr(t, o.err, activities.ErrTypeStepTimeout)
	if !strings.Contains(app.Message(), "timed out after 800ms") {
		t.Errorf("message %q", app.Message())
	}
	if !k.gone(gvrs[3], name) {
		t.Error("Job not deleted after the timeout")
	}
}

func TestNamespaceCreatedWhenMissing(t *testing.T) {
	k := startCluster(t)
	project := fmt.Sprintf("p%d", time.Now().UnixNano()%1e9)
	b := k.backend(WithNamespaceTemplate("kt-{project}"))
	ns := "kt-" + project
	k.playGC(ns)
	t.Cleanup(func() { _ = k.clients.Kube.CoreV1().Namespaces().Delete(ctxT(t), ns, metav1.DeleteOptions{}) })
	req := jobRequest("fit")
	req.Project = project
	req.Container.Image = ""
	// An invalid step is rejected before anything is created...
	appErr(t, wait(t, newRunner(t, b, nil).runStep(req)).err, activities.ErrTypeInvalidStep)
	if _, err := k.clients.Kube.CoreV1().Namespaces().Get(ctxT(t), ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace exists after an invalid step: %v", err)
	}
	// ...a valid one creates the namespace, then its Job there.
	req.Container.Image = "busybox"
	r := newRunner(t, b, nil)
	out := r.runStep(req)
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	eventually(t, "Job in the new namespace", func() bool {
		_, err := k.clients.Kube.BatchV1().Jobs(ns).Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil
	})
	got, err := k.clients.Kube.CoreV1().Namespaces().Get(ctxT(t), ns, metav1.GetOptions{})
	must(t, err)
	if got.Labels[framework.LabelManagedBy] != "atelier" || got.Labels[framework.LabelProject] != project {
		t.Errorf("namespace labels %v", got.Labels)
	}
	r.cancel()
	wait(t, out)
}

func TestEnsureRayClusterWaitsForReady(t *testing.T) {
	k := startCluster(t)
	b := k.backend()
	r := newRunner(t, b, nil)
	req := activities.EnsureRayClusterRequest{Project: "vision", RunID: "run-rc-1", Cluster: pipeline.SharedRayCluster{
		Name: "pool", RayClusterTemplate: pipeline.RayClusterTemplate{Image: "rayproject/ray:2.46.0",
			Workers: []pipeline.RayWorkerGroup{{Name: "cpu", Replicas: 2}}}}}
	type outcome struct {
		res activities.EnsureRayClusterResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		v, err := r.env.ExecuteActivity(activities.EnsureRayClusterName, req)
		var res activities.EnsureRayClusterResult
		if err == nil {
			err = v.Get(&res)
		}
		done <- outcome{res, err}
	}()
	name := framework.ClusterName(req.RunID, "pool", 53)
	clusters := k.clients.Ray.RayV1().RayClusters(k.ns)
	var rc *rayv1.RayCluster
	eventually(t, "RayCluster", func() bool {
		var err error
		rc, err = clusters.Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil
	})
	if rc.Labels[framework.LabelRayCluster] != "pool" || rc.Labels[framework.LabelRun] != "run-rc-1" {
		t.Errorf("labels %v", rc.Labels)
	}
	rc.Status.Reason = "HeadPodNotFound"
	rc, err := clusters.UpdateStatus(ctxT(t), rc, metav1.UpdateOptions{})
	must(t, err)
	select {
	case o := <-done:
		t.Fatalf("returned before ready: %+v %v", o.res, o.err)
	case <-time.After(300 * time.Millisecond):
	}
	rc.Status.State = rayv1.Ready
	rc.Status.Head = rayv1.HeadInfo{ServiceName: name + "-head-svc", PodName: name + "-head-0"}
	rc.Status.Endpoints = map[string]string{"dashboard": "8265", "client": "10001"}
	_, err = clusters.UpdateStatus(ctxT(t), rc, metav1.UpdateOptions{})
	must(t, err)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Name != name || o.res.Namespace != k.ns || o.res.Links["dashboard"] != "http://"+name+"-head-svc."+k.ns+".svc:8265" {
		t.Errorf("result %+v", o.res)
	}
	// Ensuring again adopts the ready cluster and returns at once.
	v, err := newRunner(t, b, nil).env.ExecuteActivity(activities.EnsureRayClusterName, req)
	must(t, err)
	var again activities.EnsureRayClusterResult
	must(t, v.Get(&again))
	if again.Name != name {
		t.Errorf("second ensure: %+v", again)
	}
}

func TestCleanupRunObjectsRemovesAllKinds(t *testing.T) {
	k := startCluster(t)
	k.playGC()
	b := k.backend()
	ctx := ctxT(t)
	run := "run-cleanup-1"
	labels := func(run, step string) map[string]string {
		return framework.Identity{Project: "vision", Run: run, Step: step, Attempt: 1}.Labels()
	}
	rj := rayRequest("train")
	rj.RunID = run
	rjObj, err := b.Kind(activities.KubeRayJob).Build(framework.Step{Request: rj, Meta: metav1.ObjectMeta{Name: "train", Namespace: k.ns, Labels: labels(run, "train")}})
	must(t, err)
	_, err = k.clients.Ray.RayV1().RayJobs(k.ns).Create(ctx, rjObj.(*rayv1.RayJob), metav1.CreateOptions{})
	must(t, err)
	rc, err := b.Kind(activities.KubeRayJob).Build(framework.Step{Request: rj, Meta: metav1.ObjectMeta{Name: "x"}})
	must(t, err)
	_, err = k.clients.Ray.RayV1().RayClusters(k.ns).Create(ctx, &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Labels: framework.Identity{Project: "vision", Run: run, RayCluster: "pool"}.Labels()},
		Spec:       *rc.(*rayv1.RayJob).Spec.RayClusterSpec,
	}, metav1.CreateOptions{})
	must(t, err)
	sp := sparkRequest("etl")
	spObj, err := b.Kind(activities.KubeSparkApp).Build(framework.Step{Request: sp, Meta: metav1.ObjectMeta{Name: "etl", Namespace: k.ns, Labels: labels(run, "etl")}})
	must(t, err)
	_, err = k.clients.Spark.SparkoperatorV1beta2().SparkApplications(k.ns).Create(ctx, spObj.(*sparkv1beta2.SparkApplication), metav1.CreateOptions{})
	must(t, err)
	for _, jr := range []struct{ name, run string }{{"fit", run}, {"other-run", "run-other"}} {
		jq := jobRequest(jr.name)
		jObj, err := b.Kind(activities.KubeJob).Build(framework.Step{Request: jq, Meta: metav1.ObjectMeta{Name: jr.name, Namespace: k.ns, Labels: labels(jr.run, jr.name)}})
		must(t, err)
		_, err = k.clients.Kube.BatchV1().Jobs(k.ns).Create(ctx, jObj.(*batchv1.Job), metav1.CreateOptions{})
		must(t, err)
	}

	v, err := newRunner(t, b, nil).env.ExecuteActivity(activities.CleanupRunObjectsName,
		activities.CleanupRunObjectsRequest{Project: "vision", RunID: run})
	must(t, err)
	var res activities.CleanupRunObjectsResult
	must(t, v.Get(&res))
	want := "job/fit,raycluster/pool,rayjob/train,sparkapplication/etl"
	if got := strings.Join(res.Deleted, ","); got != want {
		t.Errorf("deleted %s, want %s", got, want)
	}
	for i, name := range []string{"train", "pool", "etl", "fit"} {
		if !k.gone(gvrs[i], name) {
			t.Errorf("%s %s still exists", gvrs[i].Resource, name)
		}
	}
	if k.gone(gvrs[3], "other-run") {
		t.Error("another run's Job was deleted")
	}
	// Idempotent: nothing left to delete.
	v, err = newRunner(t, b, nil).env.ExecuteActivity(activities.CleanupRunObjectsName,
		activities.CleanupRunObjectsRequest{Project: "vision", RunID: run})
	must(t, err)
	var again activities.CleanupRunObjectsResult
	must(t, v.Get(&again))
	if len(again.Deleted) != 0 {
		t.Errorf("second cleanup deleted %v", again.Deleted)
	}
}

// kindCase is one step kind, for the tests every kind must pass.
type kindCase struct {
	name   string
	req    activities.KubeStepRequest
	gvr    schema.GroupVersionResource
	object string
	// succeed plays the operator reporting success.
	succeed func(k *cluster, name string)
}

func kindCases() []kindCase {
	rj, sp, jb := rayRequest("train"), sparkRequest("etl"), jobRequest("fit")
	return []kindCase{
		{"RayJob", rj, gvrs[0], framework.ObjectName(rj.RunID, rj.Step, rj.Item, rj.Attempt, 47), func(k *cluster, name string) {
			k.setRayStatus(name, func(s *rayv1.RayJobStatus) {
				s.JobDeploymentStatus, s.JobStatus = rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded
			})
		}},
		{"SparkApplication", sp, gvrs[2], framework.ObjectName(sp.RunID, sp.Step, sp.Item, sp.Attempt, 63), func(k *cluster, name string) {
			k.setSparkStatus(name, sparkv1beta2.SparkApplicationStatus{AppState: sparkv1beta2.ApplicationState{State: sparkv1beta2.ApplicationStateCompleted}})
		}},
		{"Job", jb, gvrs[3], framework.ObjectName(jb.RunID, jb.Step, jb.Item, jb.Attempt, 63), func(k *cluster, name string) {
			now := metav1.Now()
			k.setJobStatus(name, func(s *batchv1.JobStatus) {
				s.StartTime, s.CompletionTime, s.Succeeded = &now, &now, 1
				s.Conditions = []batchv1.JobCondition{
					{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
					{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
				}
			})
		}},
	}
}

func (k *cluster) waitObject(gvr schema.GroupVersionResource, name string) types.UID {
	k.t.Helper()
	var uid types.UID
	eventually(k.t, gvr.Resource+" "+name, func() bool {
		o, err := k.dyn.Resource(gvr).Namespace(k.ns).Get(ctxT(k.t), name, metav1.GetOptions{})
		if err == nil {
			uid = o.GetUID()
		}
		return err == nil
	})
	return uid
}

// TestRetryAdoptsEachKind: the worker stops mid-step; the retried activity
// (same attempt) resumes from the heartbeat details, and a re-execution
// without details adopts by name: never a second object.
func TestRetryAdoptsEachKind(t *testing.T) {
	for _, kc := range kindCases() {
		t.Run(kc.name, func(t *testing.T) {
			k := startCluster(t)
			first := newRunner(t, k.backend(), nil)
			out := first.runStep(kc.req)
			uid := k.waitObject(kc.gvr, kc.object)
			eventually(t, "a heartbeat", func() bool { _, ok := first.lastBeat(); return ok })
			close(first.stop) // the worker shuts down
			o := wait(t, out)
			var app *temporal.ApplicationError
			if o.err == nil || errors.As(o.err, &app) && app.NonRetryable() {
				t.Fatalf("worker stop: want a retryable error, got %v", o.err)
			}
			if k.gone(kc.gvr, kc.object) {
				t.Fatal("worker stop deleted the object")
			}
			hb, _ := first.lastBeat()
			if hb.Name != kc.object || hb.UID != string(uid) {
				t.Fatalf("heartbeat %+v", hb)
			}

			// The retry, with the heartbeat details of the stopped execution.
			out = newRunner(t, k.backend(), &hb).runStep(kc.req)
			notYet(t, out, 300*time.Millisecond, "the resumed wait")
			kc.succeed(k, kc.object)
			if o := wait(t, out); o.err != nil {
				t.Fatal(o.err)
			}
			// A re-execution without details (heartbeats lost) adopts by
			// name and finds the step finished.
			if o := wait(t, newRunner(t, k.backend(), nil).runStep(kc.req)); o.err != nil {
				t.Fatal(o.err)
			}
			id := framework.Identity{Project: kc.req.Project, Run: kc.req.RunID, Step: kc.req.Step, Item: kc.req.Item, Attempt: kc.req.Attempt}
			var sel []string
			for key, v := range id.Labels() {
				sel = append(sel, key+"="+v)
			}
			if n := k.countLabelled(kc.gvr, strings.Join(sel, ",")); n != 1 {
				t.Errorf("%d objects with this attempt's labels, want exactly 1", n)
			}
			if again := k.waitObject(kc.gvr, kc.object); again != uid {
				t.Errorf("object re-created: uid %s → %s", uid, again)
			}
		})
	}
}

// TestCancelDeletesEachKind: cancelling the activity deletes the object
// (foreground; the test plays the garbage collector) before returning.
func TestCancelDeletesEachKind(t *testing.T) {
	for _, kc := range kindCases() {
		t.Run(kc.name, func(t *testing.T) {
			k := startCluster(t)
			k.playGC()
			r := newRunner(t, k.backend(), nil)
			out := r.runStep(kc.req)
			k.waitObject(kc.gvr, kc.object)
			eventually(t, "a heartbeat", func() bool { _, ok := r.lastBeat(); return ok })
			t0 := time.Now()
			r.cancel()
			o := wait(t, out)
			t.Logf("cancel → activity returned, object gone: %s", o.at.Sub(t0))
			if !errors.Is(o.err, context.Canceled) && (o.err == nil || !strings.Contains(o.err.Error(), "canceled")) {
				t.Fatalf("want cancellation, got %v", o.err)
			}
			if !k.gone(kc.gvr, kc.object) {
				t.Error("object still exists after cancellation")
			}
		})
	}
}

// Seen by a user: after a stall longer than the heartbeat timeout, the old
// execution's heartbeat got NotFound and it deleted the object the retry
// had just adopted, failing a long RayJob. Only a cancel deletes.
func TestSupersededExecutionLeavesTheObject(t *testing.T) {
	for _, kc := range kindCases() {
		t.Run(kc.name, func(t *testing.T) {
			k := startCluster(t)
			k.playGC()
			r := newRunner(t, k.backend(), nil)
			out := r.runStep(kc.req)
			k.waitObject(kc.gvr, kc.object)
			eventually(t, "a heartbeat", func() bool { _, ok := r.lastBeat(); return ok })
			r.supersede()
			o := wait(t, out)
			if o.err == nil || !strings.Contains(o.err.Error(), "superseded") {
				t.Fatalf("want a superseded error, got %v", o.err)
			}
			time.Sleep(200 * time.Millisecond)
			if k.gone(kc.gvr, kc.object) {
				t.Fatal("the superseded execution deleted the object its retry owns")
			}
		})
	}
}

// A run's wide step may leave thousands of objects: the result names the
// first MaxListedDeleted and counts the rest, so it stays small in the
// run's history; every one is deleted.
func TestCleanupRunObjectsBoundsItsResult(t *testing.T) {
	k := startCluster(t)
	k.playGC()
	b := k.backend()
	ctx := ctxT(t)
	run := "run-cleanup-wide"
	n := activities.MaxListedDeleted + 30
	for i := range n {
		item := i
		jq := jobRequest("fan")
		id := framework.Identity{Project: "vision", Run: run, Step: "fan", Item: &item, Attempt: 1}
		name := framework.ObjectName(run, "fan", &item, 1, 63)
		jObj, err := b.Kind(activities.KubeJob).Build(framework.Step{Request: jq, Meta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: id.Labels()}})
		must(t, err)
		_, err = k.clients.Kube.BatchV1().Jobs(k.ns).Create(ctx, jObj.(*batchv1.Job), metav1.CreateOptions{})
		must(t, err)
	}
	v, err := newRunner(t, b, nil).env.ExecuteActivity(activities.CleanupRunObjectsName,
		activities.CleanupRunObjectsRequest{Project: "vision", RunID: run})
	must(t, err)
	var res activities.CleanupRunObjectsResult
	must(t, v.Get(&res))
	if len(res.Deleted) != activities.MaxListedDeleted || res.More != 30 {
		t.Errorf("listed %d, more %d; want %d and 30", len(res.Deleted), res.More, activities.MaxListedDeleted)
	}
	left, err := k.clients.Kube.BatchV1().Jobs(k.ns).List(ctx, metav1.ListOptions{LabelSelector: framework.RunSelector(run)})
	must(t, err)
	if len(left.Items) != 0 {
		t.Errorf("%d Jobs left", len(left.Items))
	}
}

// Seen in CI: a wide step's item Job deleted itself (ttlSecondsAfterFinished,
// set at creation) after finishing while its execution had been superseded
// during a stall and the retry had not started yet; the retry found it gone
// and failed the item. The TTL is now set only once a worker has read the
// outcome, so a Job that finished while none watched waits for the retry.
func TestWideItemJobExpiresOnlyAfterItsOutcomeIsRead(t *testing.T) {
	k := startCluster(t)
	k.playGC()
	req := jobRequest("fan")
	req.Item, req.DeleteAfter = intPtr(3), 30*time.Second
	name := framework.ObjectName(req.RunID, req.Step, req.Item, 1, 63)
	first := newRunner(t, k.backend(), nil)
	out := first.runStep(req)
	j := k.waitJob(name)
	if j.Spec.TTLSecondsAfterFinished != nil {
		t.Fatalf("created with ttlSecondsAfterFinished %d: it could go before anyone reads it", *j.Spec.TTLSecondsAfterFinished)
	}
	eventually(t, "a heartbeat", func() bool { _, ok := first.lastBeat(); return ok })
	first.supersede()
	if o := wait(t, out); o.err == nil || !strings.Contains(o.err.Error(), "superseded") {
		t.Fatalf("want a superseded error, got %v", o.err)
	}

	// The item finishes while no execution watches it.
	k.setPodStatus(k.jobPod(j), terminated(0, `{"v": 3}`))
	end := metav1.NewTime(time.Now().Truncate(time.Second))
	k.setJobStatus(name, func(s *batchv1.JobStatus) {
		s.StartTime, s.Succeeded, s.CompletionTime = &end, 1, &end
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: end},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: end},
		}
	})
	if j := k.waitJob(name); j.Spec.TTLSecondsAfterFinished != nil {
		t.Fatal("the finished Job was set to expire before any worker read it")
	}

	hb, _ := first.lastBeat()
	o := wait(t, newRunner(t, k.backend(), &hb).runStep(req))
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Outputs["v"] != float64(3) {
		t.Errorf("outputs %v", o.res.Outputs)
	}
	if ttl := k.waitJob(name).Spec.TTLSecondsAfterFinished; ptr.Deref(ttl, -1) != 30 {
		t.Errorf("after the outcome was read: ttlSecondsAfterFinished %v, want 30", ttl)
	}
}
