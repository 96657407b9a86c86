package job_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/schema"

	batchv1 "k8s.io/api/batch/v1"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/job"
	"github.com/atelier-ml/atelier/internal/platform/launch"
)

func step(c *pipeline.Container, timeout time.Duration) framework.Step {
	req := activities.KubeStepRequest{Project: "p", RunID: "r", Step: "fit", Attempt: 1, Kind: activities.KubeJob, Container: c, Timeout: timeout}
	id := framework.Identity{Project: "p", Run: "r", Step: "fit", Attempt: 1}
	return framework.Step{
		Request: req,
		Meta:    metav1.ObjectMeta{Name: "fit-a1-0123456789", Namespace: "atelier-p", Labels: id.Labels()},
		Env:     framework.StepEnv(req),
	}
}

func TestBuild(t *testing.T) {
	k := job.New(fake.NewClientset())
	obj, err := k.Build(step(&pipeline.Container{
		Image:      "python:3.12",
		Command:    []string{"python", "fit.py"},
		Args:       []string{"--lr", "0.1"},
		Env:        map[string]string{"LR": "0.1"},
		WorkingDir: "/work",
		Resources:  &pipeline.Resources{CPU: "500m", Memory: "1Gi", GPU: 2, GPUType: "NVIDIA-H100"},
	}, 90*time.Second+time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	j := obj.(*batchv1.Job)
	if j.Name != "fit-a1-0123456789" || j.Namespace != "atelier-p" || j.Labels[framework.LabelStep] != "fit" {
		t.Errorf("meta %+v", j.ObjectMeta)
	}
	if ptr.Deref(j.Spec.BackoffLimit, -1) != 0 {
		t.Errorf("backoffLimit %v, want 0: retries belong to the pipeline", j.Spec.BackoffLimit)
	}
	if ptr.Deref(j.Spec.ActiveDeadlineSeconds, 0) != 91 {
		t.Errorf("activeDeadlineSeconds %v, want 91 (timeout rounded up)", j.Spec.ActiveDeadlineSeconds)
	}
	if j.Spec.TTLSecondsAfterFinished != nil {
		t.Error("ttlSecondsAfterFinished set; the pipeline cleans up")
	}
	pod := j.Spec.Template
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Labels[framework.LabelRun] != "r" {
		t.Errorf("pod template %+v", pod)
	}
	if pod.Spec.NodeSelector[framework.GPUProductKey] != "NVIDIA-H100" {
		t.Errorf("node selector %v", pod.Spec.NodeSelector)
	}
	c := pod.Spec.Containers[0]
	if c.Name != job.ContainerName || c.Image != "python:3.12" || c.Command[1] != "fit.py" || c.Args[1] != "0.1" || c.WorkingDir != "/work" {
		t.Errorf("container %+v", c)
	}
	if c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("termination message %q %q", c.TerminationMessagePath, c.TerminationMessagePolicy)
	}
	if q := c.Resources.Limits[framework.GPUResource]; q.String() != "2" || c.Resources.Requests.Cpu().String() != "500m" ||
		c.Resources.Limits.Cpu().String() != "500m" {
		t.Errorf("resources %+v", c.Resources)
	}
	env := framework.EnvMap(c.Env)
	for k, v := range map[string]string{"LR": "0.1", "ATELIER_OUTPUTS": "/dev/termination-log", "ATELIER_RUN_ID": "r",
		"ATELIER_PROJECT": "p", "ATELIER_STEP": "fit", "ATELIER_ATTEMPT": "1"} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	// No timeout: no deadline.
	obj, _ = k.Build(step(&pipeline.Container{Image: "busybox"}, 0))
	if obj.(*batchv1.Job).Spec.ActiveDeadlineSeconds != nil {
		t.Error("deadline without a timeout")
	}
}

func TestBuildInvalid(t *testing.T) {
	k := job.New(fake.NewClientset())
	for _, tc := range []struct {
		c    *pipeline.Container
		want string
	}{
		{&pipeline.Container{Command: []string{"true"}}, "a container step on Kubernetes needs an image"},
		{&pipeline.Container{Image: "x", Resources: &pipeline.Resources{Memory: "lots"}}, "container.resources.memory"},
	} {
		_, err := k.Build(step(tc.c, 0))
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() || !strings.Contains(app.Message(), tc.want) {
			t.Errorf("%+v: err = %v, want InvalidStep %q", tc.c, err, tc.want)
		}
	}
}

func TestProgress(t *testing.T) {
	k := job.New(fake.NewClientset())
	at := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	cond := func(typ batchv1.JobConditionType, status corev1.ConditionStatus, reason, msg string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: at}
	}
	imagePull := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fit-x"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "step", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "pyhton:3.12"`}}}}}}
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	unschedulable := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fit-y"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}}}}
	for _, tc := range []struct {
		name     string
		status   batchv1.JobStatus
		pods     []*corev1.Pod
		phase    framework.Phase
		reason   string
		timedOut bool
		stuck    string
		waiting  string
	}{
		{"new", batchv1.JobStatus{}, nil, framework.Pending, "", false, "", ""},
		{"pod running", batchv1.JobStatus{Active: 1, Ready: ptr.To[int32](1)}, []*corev1.Pod{running}, framework.Running, "", false, "", ""},
		{"complete", batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, "CompletionsReached", ""),
			cond(batchv1.JobComplete, corev1.ConditionTrue, "CompletionsReached", "")}}, nil, framework.Succeeded, "", false, "", ""},
		{"success criteria met, not complete yet", batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, "CompletionsReached", "")}}, nil, framework.Pending, "", false, "", ""},
		{"failure target, not failed yet", batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailureTarget, corev1.ConditionTrue, "BackoffLimitExceeded", "")}}, nil, framework.Pending, "", false, "", ""},
		{"backoff limit", batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailed, corev1.ConditionTrue, "BackoffLimitExceeded", "Job has reached the specified backoff limit")}},
			nil, framework.Failed, "BackoffLimitExceeded", false, "", ""},
		{"deadline", batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailed, corev1.ConditionTrue, "DeadlineExceeded", "Job was active longer than specified deadline")}},
			nil, framework.Failed, "DeadlineExceeded", true, "", ""},
		{"failed=false is not failure", batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailed, corev1.ConditionFalse, "", "")}}, nil, framework.Pending, "", false, "", ""},
		{"image pull", batchv1.JobStatus{Active: 1}, []*corev1.Pod{imagePull}, framework.Pending, "", false, "ImagePullBackOff", ""},
		{"unschedulable", batchv1.JobStatus{Active: 1}, []*corev1.Pod{unschedulable}, framework.Pending, "", false, "",
			"pod fit-y: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "fit", Namespace: "ns"}, Status: tc.status}
			p := k.Progress(j, tc.pods)
			if p.Phase != tc.phase || p.Reason != tc.reason || p.TimedOut != tc.timedOut {
				t.Errorf("got %v %q timedOut=%v, want %v %q %v", p.Phase, p.Reason, p.TimedOut, tc.phase, tc.reason, tc.timedOut)
			}
			if tc.phase.Terminal() && !p.FinishedAt.Equal(at.Time) {
				t.Errorf("finishedAt %v", p.FinishedAt)
			}
			if (p.Stuck == nil) != (tc.stuck == "") || p.Stuck != nil && p.Stuck.Reason != tc.stuck {
				t.Errorf("stuck %+v, want %q", p.Stuck, tc.stuck)
			}
			if got := ""; p.Waiting != nil || tc.waiting != "" {
				if p.Waiting != nil {
					got = p.Waiting.Message
				}
				if got != tc.waiting || p.Waiting.Reason != corev1.PodReasonUnschedulable {
					t.Errorf("waiting %+v, want %q", p.Waiting, tc.waiting)
				}
			}
			if p.Links["logs"] != "kubectl logs -n ns job/fit" {
				t.Errorf("links %v", p.Links)
			}
		})
	}
}

func TestOutputPods(t *testing.T) {
	op := job.New(fake.NewClientset()).OutputPods(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "fit-a1-x"}})
	if op.Selector != "batch.kubernetes.io/job-name=fit-a1-x" || op.Container != "step" {
		t.Errorf("%+v", op)
	}
}

func TestBuildPinsToAdmittedNodes(t *testing.T) {
	k := job.New(fake.NewClientset())
	gpuStep := step(&pipeline.Container{Image: "x", Resources: &pipeline.Resources{GPU: 2}}, 0)
	gpuStep.Request.Nodes = []string{"n1"}
	obj, err := k.Build(gpuStep)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}},
	}}}
	if diff := cmp.Diff(want, obj.(*batchv1.Job).Spec.Template.Spec.Affinity); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
	// Without admission (no nodes), nothing is pinned.
	obj, _ = k.Build(step(&pipeline.Container{Image: "x", Resources: &pipeline.Resources{GPU: 2}}, 0))
	if a := obj.(*batchv1.Job).Spec.Template.Spec.Affinity; a != nil {
		t.Errorf("affinity without admission: %+v", a)
	}
}

// The Job of a wide step's item is built without a TTL (it could go
// before anyone read its outcome); once read, ExpireAfter has it delete
// itself DeleteAfter after it finished, rounded up to a second.
func TestExpireAfterTheOutcomeWasRead(t *testing.T) {
	kube := fake.NewClientset()
	k := job.New(kube)
	s := step(&pipeline.Container{Image: "x"}, 0)
	s.Request.DeleteAfter = 90*time.Second + time.Millisecond
	obj, err := k.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := obj.(*batchv1.Job).Spec.TTLSecondsAfterFinished; ttl != nil {
		t.Fatalf("built with ttlSecondsAfterFinished %d", *ttl)
	}
	ctx := context.Background()
	created, err := kube.BatchV1().Jobs(obj.GetNamespace()).Create(ctx, obj.(*batchv1.Job), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.ExpireAfter(ctx, created, s.Request.DeleteAfter); err != nil {
		t.Fatal(err)
	}
	got, err := kube.BatchV1().Jobs(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ttl := ptr.Deref(got.Spec.TTLSecondsAfterFinished, -1); ttl != 91 {
		t.Errorf("ttlSecondsAfterFinished %d, want 91", ttl)
	}
}

// Secrets given as files are a read-only volume of the attempt's Secret
// (one item per file, 0400) at pipeline.SecretsDir, and ATELIER_SECRETS
// says where; secrets given as variables stay secretKeyRefs.
func TestBuildSecretFiles(t *testing.T) {
	k := job.New(fake.NewClientset())
	s := step(&pipeline.Container{Image: "x", Secrets: []pipeline.SecretEnv{
		{Name: "db", Env: "DB_PASSWORD"}, {Name: "gcp", File: "credentials.json"},
	}}, 0)
	s.SecretName = "fit-a1-0123456789-secrets"
	obj, err := k.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	ps := obj.(*batchv1.Job).Spec.Template.Spec
	if len(ps.Volumes) != 1 || ps.Volumes[0].Secret == nil {
		t.Fatalf("volumes %+v", ps.Volumes)
	}
	src := ps.Volumes[0].Secret
	if src.SecretName != s.SecretName || ptr.Deref(src.DefaultMode, 0) != 0o400 ||
		!cmp.Equal(src.Items, []corev1.KeyToPath{{Key: "gcp", Path: "credentials.json"}}) {
		t.Errorf("secret volume %+v", src)
	}
	c := ps.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != pipeline.SecretsDir || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["ATELIER_SECRETS"].Value != pipeline.SecretsDir {
		t.Errorf("ATELIER_SECRETS = %q", env["ATELIER_SECRETS"].Value)
	}
	if ref := env["DB_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "db" {
		t.Errorf("DB_PASSWORD %+v", env["DB_PASSWORD"])
	}
	if _, ok := env[""]; ok {
		t.Error("a file reference made an env var without a name")
	}
}

// A step with artifacts runs under the launcher: an init container copies
// it from its image into a shared volume, the step's command becomes the
// launcher's, its outputs file moves into that volume (the termination
// message is the launcher's Result), and the grant comes from the
// attempt's Secret, never from the spec.
func TestBuildUnderTheLauncher(t *testing.T) {
	k := job.New(fake.NewClientset())
	s := step(&pipeline.Container{Image: "python:3.12", Command: []string{"python", "fit.py"}, Args: []string{"--lr", "0.1"},
		Pod: &schema.Pod{Patch: []byte(`{"spec": {"containers": [{"name": "step", "imagePullPolicy": "Never"}]}}`)}}, 0)
	s.SecretName = "fit-a1-0123456789-secrets"
	s.Launch = &framework.Launch{Image: "atelier:dev", Spec: launch.Spec{Gateway: "http://gw:8080", ResultPath: framework.OutputsPath,
		Outputs: []launch.Output{{Name: "model", Path: "model.bin"}}}}
	obj, err := k.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	ps := obj.(*batchv1.Job).Spec.Template.Spec
	if len(ps.InitContainers) != 1 {
		t.Fatalf("init containers %+v", ps.InitContainers)
	}
	ic := ps.InitContainers[0]
	if ic.Image != "atelier:dev" || !cmp.Equal(ic.Command, []string{"/atelier-launcher", "install", "/atelier/bin"}) || ic.ImagePullPolicy != corev1.PullNever {
		t.Errorf("init container %+v: copies the launcher, pulled as the step's image is", ic)
	}
	c := ps.Containers[0]
	if want := []string{launch.Binary, "run", "--", "python", "fit.py", "--lr", "0.1"}; !cmp.Equal(c.Command, want) || len(c.Args) != 0 {
		t.Errorf("command %q args %q, want %q", c.Command, c.Args, want)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s twice", e.Name)
		}
		env[e.Name] = e
	}
	if env["ATELIER_OUTPUTS"].Value != launch.OutputsFile {
		t.Errorf("ATELIER_OUTPUTS %q", env["ATELIER_OUTPUTS"].Value)
	}
	if !strings.Contains(env[launch.SpecEnv].Value, `"gateway":"http://gw:8080"`) {
		t.Errorf("spec %q", env[launch.SpecEnv].Value)
	}
	g := env[launch.GrantEnv]
	if g.Value != "" || g.ValueFrom == nil || g.ValueFrom.SecretKeyRef.Name != s.SecretName || g.ValueFrom.SecretKeyRef.Key != launch.GrantKey {
		t.Errorf("grant %+v: from the attempt's Secret", g)
	}
	if len(ps.Volumes) != 1 || ps.Volumes[0].EmptyDir == nil || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != launch.Dir {
		t.Errorf("volumes %+v mounts %+v", ps.Volumes, c.VolumeMounts)
	}

	s = step(&pipeline.Container{Image: "python:3.12"}, 0)
	s.SecretName, s.Launch = "x", &framework.Launch{Image: "atelier:dev"}
	if _, err := k.Build(s); err == nil || !strings.Contains(err.Error(), "needs a command") {
		t.Errorf("no command: %v", err)
	}
}
