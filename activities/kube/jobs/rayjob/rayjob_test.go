package rayjob_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/schema"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	rayfake "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned/fake"
	"go.temporal.io/sdk/temporal"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/raycluster"
	"github.com/atelier-ml/atelier/activities/kube/jobs/rayjob"
)

func step(r *pipeline.RayStep, clusterName string) framework.Step {
	req := activities.KubeStepRequest{Project: "p", RunID: "r", Step: "train", Attempt: 1, Kind: activities.KubeRayJob, Ray: r, RayClusterName: clusterName}
	id := framework.Identity{Project: "p", Run: "r", Step: "train", Attempt: 1}
	return framework.Step{
		Request: req,
		Meta:    metav1.ObjectMeta{Name: "train-a1-0123456789", Namespace: "atelier-p", Labels: id.Labels()},
		Env:     framework.StepEnv(req),
	}
}

func ownCluster() *pipeline.RayStep {
	return &pipeline.RayStep{
		Entrypoint: "python train.py --lr 0.1",
		RuntimeEnv: map[string]any{"pip": []any{"torch"}, "env_vars": map[string]any{"MODE": "fast"}},
		RayClusterTemplate: pipeline.RayClusterTemplate{
			Image:      "rayproject/ray:2.46.0",
			RayVersion: "2.46.0",
			Head:       pipeline.Resources{CPU: "2", Memory: "8Gi"},
			Workers: []pipeline.RayWorkerGroup{
				{Name: "gpu", Replicas: 2, MinReplicas: 1, MaxReplicas: 4, Resources: pipeline.Resources{CPU: "8", Memory: "32Gi", GPU: 1, GPUType: "NVIDIA-A100-SXM4-80GB"}},
				{Name: "cpu", Replicas: 3},
			},
		},
		TTLSecondsAfterFinished: 60,
		ActiveDeadlineSeconds:   3600,
	}
}

func TestBuildOwnCluster(t *testing.T) {
	k := rayjob.New(rayfake.NewClientset())
	obj, err := k.Build(step(ownCluster(), ""))
	if err != nil {
		t.Fatal(err)
	}
	j := obj.(*rayv1.RayJob)
	s := j.Spec
	if !strings.Contains(s.Entrypoint, "python train.py --lr 0.1") || s.SubmissionMode != rayv1.K8sJobMode || ptr.Deref(s.BackoffLimit, -1) != 0 {
		t.Errorf("spec %+v", s)
	}
	if !s.ShutdownAfterJobFinishes || s.TTLSecondsAfterFinished != 60 || ptr.Deref(s.ActiveDeadlineSeconds, 0) != 3600 {
		t.Errorf("lifecycle: shutdown=%v ttl=%d deadline=%v", s.ShutdownAfterJobFinishes, s.TTLSecondsAfterFinished, s.ActiveDeadlineSeconds)
	}
	if len(s.ClusterSelector) != 0 {
		t.Error("clusterSelector with an own cluster")
	}
	var re map[string]any
	if err := yaml.Unmarshal([]byte(s.RuntimeEnvYAML), &re); err != nil {
		t.Fatalf("runtimeEnvYAML %q: %v", s.RuntimeEnvYAML, err)
	}
	vars := re["env_vars"].(map[string]any)
	if vars["MODE"] != "fast" || vars["ATELIER_STEP"] != "train" || vars["ATELIER_OUTPUTS"] != "/tmp/atelier-outputs-"+j.Name+".json" {
		t.Errorf("env_vars %v", vars)
	}
	if re["pip"].([]any)[0] != "torch" {
		t.Errorf("pip lost: %v", re)
	}

	c := s.RayClusterSpec
	if c == nil {
		t.Fatal("no rayClusterSpec")
	}
	head := c.HeadGroupSpec
	if c.RayVersion != "2.46.0" || head.RayStartParams["dashboard-host"] != "0.0.0.0" {
		t.Errorf("head %+v", head)
	}
	hc := head.Template.Spec.Containers[0]
	if hc.Name != raycluster.HeadContainer || hc.Image != "rayproject/ray:2.46.0" || hc.Resources.Limits.Memory().String() != "8Gi" ||
		framework.EnvMap(hc.Env)["ATELIER_RUN_ID"] != "r" {
		t.Errorf("head container %+v", hc)
	}
	if head.Template.Labels[framework.LabelStep] != "train" {
		t.Errorf("head pod labels %v", head.Template.Labels)
	}
	if len(c.WorkerGroupSpecs) != 2 {
		t.Fatalf("worker groups %+v", c.WorkerGroupSpecs)
	}
	g := c.WorkerGroupSpecs[0]
	if g.GroupName != "gpu" || *g.Replicas != 2 || *g.MinReplicas != 1 || *g.MaxReplicas != 4 {
		t.Errorf("gpu group %+v", g)
	}
	wc := g.Template.Spec.Containers[0]
	if q := wc.Resources.Limits[framework.GPUResource]; q.String() != "1" || wc.Name != raycluster.WorkerContainer ||
		g.Template.Spec.NodeSelector[framework.GPUProductKey] != "NVIDIA-A100-SXM4-80GB" {
		t.Errorf("gpu worker %+v %v", wc.Resources, g.Template.Spec.NodeSelector)
	}
	if g := c.WorkerGroupSpecs[1]; *g.Replicas != 3 || *g.MinReplicas != 0 || *g.MaxReplicas != 3 {
		t.Errorf("cpu group: replicas=%d min=%d max=%d, want 3 0 3", *g.Replicas, *g.MinReplicas, *g.MaxReplicas)
	}
	sub := s.SubmitterPodTemplate
	if sub == nil || sub.Spec.Containers[0].Name != rayjob.SubmitterContainer || sub.Spec.Containers[0].Image != "rayproject/ray:2.46.0" ||
		framework.EnvMap(sub.Spec.Containers[0].Env)["ATELIER_ATTEMPT"] != "1" || sub.Labels[framework.LabelRun] != "r" {
		t.Errorf("submitter template %+v", sub)
	}

	// shutdownAfterJobFinishes false is honoured.
	r := ownCluster()
	r.ShutdownAfterJobFinishes = ptr.To(false)
	obj, _ = k.Build(step(r, ""))
	if obj.(*rayv1.RayJob).Spec.ShutdownAfterJobFinishes {
		t.Error("shutdownAfterJobFinishes false ignored")
	}
}

func TestBuildSharedCluster(t *testing.T) {
	k := rayjob.New(rayfake.NewClientset())
	obj, err := k.Build(step(&pipeline.RayStep{Entrypoint: "python eval.py", Cluster: "pool"}, "pool-0a1b2c3d4e"))
	if err != nil {
		t.Fatal(err)
	}
	s := obj.(*rayv1.RayJob).Spec
	if s.ClusterSelector["ray.io/cluster"] != "pool-0a1b2c3d4e" || s.RayClusterSpec != nil || s.ShutdownAfterJobFinishes {
		t.Errorf("spec %+v", s)
	}
	if !strings.Contains(s.RuntimeEnvYAML, "ATELIER_STEP: train") {
		t.Errorf("runtime env %q lacks the step's identity", s.RuntimeEnvYAML)
	}
}

func TestBuildInvalid(t *testing.T) {
	k := rayjob.New(rayfake.NewClientset())
	mod := func(f func(*pipeline.RayStep)) *pipeline.RayStep { r := ownCluster(); f(r); return r }
	for _, tc := range []struct {
		name    string
		r       *pipeline.RayStep
		cluster string
		want    string
	}{
		{"no entrypoint", mod(func(r *pipeline.RayStep) { r.Entrypoint = " " }), "", "ray.entrypoint"},
		{"no image", mod(func(r *pipeline.RayStep) { r.Image = "" }), "", "needs an image"},
		{"negative replicas", mod(func(r *pipeline.RayStep) { r.Workers[0].Replicas = -1 }), "", "must not be negative"},
		{"min above max", mod(func(r *pipeline.RayStep) { r.Workers[0].MinReplicas = 5 }), "", "minReplicas (5) <= replicas (2) <= maxReplicas (4)"},
		{"duplicate group", mod(func(r *pipeline.RayStep) { r.Workers[1].Name = "gpu" }), "", "appears twice"},
		{"bad group name", mod(func(r *pipeline.RayStep) { r.Workers[1].Name = "CPU_pool" }), "", "ray.workers[1].name"},
		{"bad quantity", mod(func(r *pipeline.RayStep) { r.Head.CPU = "two" }), "", "ray.head.cpu"},
		{"negative ttl", mod(func(r *pipeline.RayStep) { r.TTLSecondsAfterFinished = -1 }), "", "ttlSecondsAfterFinished"},
		{"env_vars not a map", mod(func(r *pipeline.RayStep) { r.RuntimeEnv = map[string]any{"env_vars": "x"} }), "", "env_vars"},
		{"shared cluster not ensured", &pipeline.RayStep{Entrypoint: "x", Cluster: "pool"}, "", "EnsureRayCluster"},
		{"shared cluster and own spec", mod(func(r *pipeline.RayStep) { r.Cluster = "pool" }), "pool-x", "cannot also describe a cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Build(step(tc.r, tc.cluster))
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !strings.Contains(app.Message(), tc.want) {
				t.Errorf("err = %v, want InvalidStep containing %q", err, tc.want)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	k := rayjob.New(rayfake.NewClientset())
	end := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, tc := range []struct {
		deploy rayv1.JobDeploymentStatus
		job    rayv1.JobStatus
		reason rayv1.JobFailedReason
		phase  framework.Phase
		want   string // reason reported
	}{
		// Transient: never failures.
		{"", "", "", framework.Pending, ""},
		{rayv1.JobDeploymentStatusInitializing, "", "", framework.Pending, ""},
		{rayv1.JobDeploymentStatusWaiting, "", "", framework.Pending, ""},
		{rayv1.JobDeploymentStatusSuspending, "", "", framework.Pending, ""},
		{rayv1.JobDeploymentStatusSuspended, "", "", framework.Pending, ""},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusPending, "", framework.Running, ""},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusRunning, "", framework.Running, ""},
		// jobStatus alone decides nothing while KubeRay is not done.
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusSucceeded, "", framework.Running, ""},
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusFailed, "", framework.Running, ""},
		{rayv1.JobDeploymentStatusRetrying, rayv1.JobStatusFailed, "", framework.Running, ""},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusRunning, "", framework.Running, ""},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusPending, "", framework.Running, ""},
		// Success needs both halves.
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded, "", framework.Succeeded, ""},
		// Failures.
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusFailed, "", framework.Failed, "JobFailed"},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusStopped, "", framework.Failed, "JobStopped"},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusFailed, rayv1.AppFailed, framework.Failed, "AppFailed"},
		{rayv1.JobDeploymentStatusFailed, "", rayv1.ValidationFailed, framework.Failed, "ValidationFailed"},
		{rayv1.JobDeploymentStatusFailed, rayv1.JobStatusRunning, rayv1.DeadlineExceeded, framework.Failed, "DeadlineExceeded"},
		{rayv1.JobDeploymentStatusFailed, "", rayv1.SubmissionFailed, framework.Failed, "SubmissionFailed"},
		{rayv1.JobDeploymentStatusFailed, "", "", framework.Failed, "Failed"},
		{rayv1.JobDeploymentStatusValidationFailed, "", "", framework.Failed, "ValidationFailed"},
	} {
		j := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns"}, Status: rayv1.RayJobStatus{
			JobDeploymentStatus: tc.deploy, JobStatus: tc.job, Reason: tc.reason, Message: "the message",
			DashboardURL: "train-raycluster-abcde-head-svc.ns.svc.cluster.local:8265", EndTime: &end,
		}}
		p := k.Progress(j, nil)
		if p.Phase != tc.phase || p.Reason != tc.want {
			t.Errorf("%q/%q/%q: got %v %q, want %v %q", tc.deploy, tc.job, tc.reason, p.Phase, p.Reason, tc.phase, tc.want)
		}
		if p.Phase == framework.Failed && p.Message != "the message" {
			t.Errorf("%q/%q: message %q", tc.deploy, tc.job, p.Message)
		}
		if p.Links["dashboard"] != "http://train-raycluster-abcde-head-svc.ns.svc.cluster.local:8265" ||
			p.Links["logs"] != "kubectl logs -n ns job/train" {
			t.Errorf("links %v", p.Links)
		}
		if !p.FinishedAt.Equal(end.Time) {
			t.Errorf("finishedAt %v", p.FinishedAt)
		}
	}
}

func TestOutputPods(t *testing.T) {
	op := rayjob.New(rayfake.NewClientset()).OutputPods(&rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "train-a1-x"}})
	if op.Selector != "job-name=train-a1-x" || op.Container != "ray-job-submitter" {
		t.Errorf("%+v", op)
	}
}

func TestSharedClusterBuildAndState(t *testing.T) {
	id := framework.Identity{Project: "p", Run: "r", RayCluster: "pool"}
	rc, err := raycluster.Build(metav1.ObjectMeta{Name: "pool-x", Namespace: "ns", Labels: id.Labels()},
		pipeline.SharedRayCluster{Name: "pool", RayClusterTemplate: ownCluster().RayClusterTemplate}, framework.RunEnv("p", "r"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Labels[framework.LabelRayCluster] != "pool" || len(rc.Spec.WorkerGroupSpecs) != 2 ||
		framework.EnvMap(rc.Spec.HeadGroupSpec.Template.Spec.Containers[0].Env)["ATELIER_RUN_ID"] != "r" {
		t.Errorf("cluster %+v", rc)
	}
	for _, tc := range []struct {
		state         rayv1.ClusterState
		ready, failed bool
	}{{"", false, false}, {rayv1.Suspended, false, false}, {rayv1.Ready, true, false}, {rayv1.Failed, false, true}} {
		rc.Status.State = tc.state
		if s := raycluster.ReadState(rc); s.Ready != tc.ready || s.Failed != tc.failed {
			t.Errorf("%q: %+v", tc.state, s)
		}
	}
	rc.Status.Head.ServiceName = "pool-x-head-svc"
	rc.Status.Endpoints = map[string]string{"dashboard": "8265"}
	if s := raycluster.ReadState(rc); s.Links["dashboard"] != "http://pool-x-head-svc.ns.svc:8265" {
		t.Errorf("links %v", s.Links)
	}
}

// After GPU admission, GPU pods are pinned to the admitted nodes; the head
// and CPU workers are not.
func TestBuildPinsGPUPodsToAdmittedNodes(t *testing.T) {
	st := step(ownCluster(), "")
	st.Request.Nodes = []string{"gpu-3", "gpu-7"}
	obj, err := rayjob.New(rayfake.NewClientset()).Build(st)
	if err != nil {
		t.Fatal(err)
	}
	c := obj.(*rayv1.RayJob).Spec.RayClusterSpec
	if diff := cmp.Diff(framework.NodeAffinity([]string{"gpu-3", "gpu-7"}), c.WorkerGroupSpecs[0].Template.Spec.Affinity); diff != "" {
		t.Errorf("GPU worker affinity (-want +got):\n%s", diff)
	}
	if c.HeadGroupSpec.Template.Spec.Affinity != nil || c.WorkerGroupSpecs[1].Template.Spec.Affinity != nil {
		t.Error("pods without GPUs were pinned")
	}
}

// Kueue admits RayJobs that bring their own cluster; one on a run's shared
// RayCluster is left alone (Kueue's webhook refuses it).
func TestQueueInKueue(t *testing.T) {
	k := rayjob.New(nil)
	own := &rayv1.RayJob{}
	if !framework.QueueInKueue(k, own, "q") || !own.Spec.Suspend || own.Labels[framework.LabelKueueQueueName] != "q" || !k.Suspended(own) {
		t.Fatalf("own-cluster RayJob not queued: %+v", own)
	}
	shared := &rayv1.RayJob{Spec: rayv1.RayJobSpec{ClusterSelector: map[string]string{"ray.io/cluster": "shared"}}}
	if framework.QueueInKueue(k, shared, "q") || shared.Spec.Suspend || shared.Labels[framework.LabelKueueQueueName] != "" {
		t.Fatalf("shared-cluster RayJob queued in Kueue: %+v", shared)
	}
	if framework.QueueInKueue(k, &rayv1.RayJob{}, "") {
		t.Fatal("queued without a queue name")
	}
}

// Pod settings reach every pod of the job: the cluster-wide ones the head,
// every group and the submitter; headPod only the head; a group's only its
// pods; the operator's defaults fill what none set. The policy is checked
// on every template (PodTemplates), a patch included.
func TestBuildPodSettings(t *testing.T) {
	r := ownCluster()
	r.Pod = &schema.Pod{ServiceAccountName: "ray", ImagePullSecrets: []string{"registry"}, Labels: map[string]string{"team": "vision"}}
	r.HeadPod = &schema.Pod{NodeSelector: map[string]string{"pool": "cpu"}}
	r.Workers[0].Pod = &schema.Pod{
		Tolerations: []schema.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		Volumes:     []schema.Volume{{Name: "data", MountPath: "/data", PersistentVolumeClaim: "datasets", ReadOnly: true}},
	}
	s := step(r, "")
	s.PodDefaults = &schema.Pod{PriorityClassName: "batch", ServiceAccountName: "ignored-when-set"}
	k := rayjob.New(rayfake.NewClientset())
	obj, err := k.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	j := obj.(*rayv1.RayJob)
	head := j.Spec.RayClusterSpec.HeadGroupSpec.Template
	gpu := j.Spec.RayClusterSpec.WorkerGroupSpecs[0].Template
	cpu := j.Spec.RayClusterSpec.WorkerGroupSpecs[1].Template
	sub := j.Spec.SubmitterPodTemplate
	for name, tm := range map[string]*corev1.PodTemplateSpec{"head": &head, "gpu": &gpu, "cpu": &cpu, "submitter": sub} {
		if tm.Spec.ServiceAccountName != "ray" || len(tm.Spec.ImagePullSecrets) != 1 || tm.Labels["team"] != "vision" || tm.Spec.PriorityClassName != "batch" {
			t.Errorf("%s pods miss the cluster-wide settings or the defaults: %+v", name, tm)
		}
		if tm.Labels[framework.LabelRun] != "r" {
			t.Errorf("%s pods lost Atelier's labels: %v", name, tm.Labels)
		}
	}
	if head.Spec.NodeSelector["pool"] != "cpu" || gpu.Spec.NodeSelector["pool"] != "" || sub.Spec.NodeSelector["pool"] != "" {
		t.Errorf("headPod applies to the head only: head %v, gpu %v, submitter %v", head.Spec.NodeSelector, gpu.Spec.NodeSelector, sub.Spec.NodeSelector)
	}
	if len(gpu.Spec.Tolerations) != 1 || len(cpu.Spec.Tolerations) != 0 || len(head.Spec.Tolerations) != 0 {
		t.Errorf("a group's settings apply to its pods only: gpu %v, cpu %v, head %v", gpu.Spec.Tolerations, cpu.Spec.Tolerations, head.Spec.Tolerations)
	}
	if len(gpu.Spec.Volumes) != 1 || gpu.Spec.Containers[0].VolumeMounts[0].MountPath != "/data" || !gpu.Spec.Containers[0].VolumeMounts[0].ReadOnly {
		t.Errorf("the group's volume is not mounted into its ray-worker container: %+v", gpu.Spec)
	}
	roles := []string{}
	for _, pt := range k.PodTemplates(j) {
		roles = append(roles, pt.Role)
	}
	if strings.Join(roles, ",") != "head,workers[gpu],workers[cpu],submitter" {
		t.Errorf("templates %v", roles)
	}

	// A host path slipped into one group by a patch is refused, naming the group.
	r.Workers[1].Pod = &schema.Pod{Patch: json.RawMessage(`{"spec":{"volumes":[{"name":"host","hostPath":{"path":"/"}}]}}`)}
	obj, err = k.Build(step(r, ""))
	if err != nil {
		t.Fatal(err)
	}
	err = framework.PodPolicy{ServiceAccounts: []string{"ray"}}.CheckPods(k, obj)
	if err == nil || !strings.Contains(err.Error(), "workers[cpu] pods") || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("policy: %v", err)
	}

	// On a shared cluster only the submitter is the job's.
	shared := &pipeline.RayStep{Entrypoint: "python x.py", Cluster: "pool",
		RayClusterTemplate: pipeline.RayClusterTemplate{Pod: &schema.Pod{ServiceAccountName: "ray"}}}
	ss := step(shared, "run-pool")
	ss.Request.RayClusterImage = "rayproject/ray:2.46.0"
	obj, err = k.Build(ss)
	if err != nil {
		t.Fatal(err)
	}
	if sa := obj.(*rayv1.RayJob).Spec.SubmitterPodTemplate.Spec.ServiceAccountName; sa != "ray" {
		t.Errorf("shared-cluster submitter service account %q", sa)
	}
}

// A ray step's secrets reach every pod of the job: the head, each worker
// group and the submitter read each variable from the attempt's Secret
// (secretKeyRef) and the files from its read-only volume (0400, one item
// per file) at pipeline.SecretsDir. runtime_env, which Ray keeps in the
// job's record and which is put over the pods' environment for the
// driver, carries none of them (an empty HF_TOKEN there would hide the
// head's). A step on a shared cluster cannot have them.
func TestBuildSecrets(t *testing.T) {
	r := ownCluster()
	r.Secrets = []pipeline.SecretEnv{{Name: "hf-token", Env: "HF_TOKEN"}, {Name: "gcp-sa", File: "creds.json"}}
	// Pod settings with a volume of their own: both stay.
	r.Pod = &schema.Pod{Volumes: []schema.Volume{{Name: "data", MountPath: "/data", EmptyDir: &schema.EmptyDir{}}}}
	s := step(r, "")
	s.SecretName = "train-a1-0123456789-secrets"
	k := rayjob.New(rayfake.NewClientset())
	obj, err := k.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	j := obj.(*rayv1.RayJob)
	containers := map[string]string{"head": raycluster.HeadContainer, "workers[gpu]": raycluster.WorkerContainer,
		"workers[cpu]": raycluster.WorkerContainer, "submitter": rayjob.SubmitterContainer}
	templates := k.PodTemplates(j)
	if len(templates) != len(containers) {
		t.Fatalf("templates %d", len(templates))
	}
	for _, pt := range templates {
		ps := pt.Template.Spec
		var c *corev1.Container
		for i := range ps.Containers {
			if ps.Containers[i].Name == containers[pt.Role] {
				c = &ps.Containers[i]
			}
		}
		if c == nil {
			t.Fatalf("%s: no container %s", pt.Role, containers[pt.Role])
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		want := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s.SecretName}, Key: "hf-token"}}
		if got := env["HF_TOKEN"]; got.Value != "" || !cmp.Equal(got.ValueFrom, want) {
			t.Errorf("%s: HF_TOKEN = %+v", pt.Role, got)
		}
		if env["ATELIER_SECRETS"].Value != pipeline.SecretsDir || env["ATELIER_STEP"].Value != "train" {
			t.Errorf("%s: ATELIER_SECRETS %q, ATELIER_STEP %q", pt.Role, env["ATELIER_SECRETS"].Value, env["ATELIER_STEP"].Value)
		}
		var vol *corev1.Volume
		for i := range ps.Volumes {
			if ps.Volumes[i].Secret != nil {
				vol = &ps.Volumes[i]
			}
		}
		if vol == nil || vol.Secret.SecretName != s.SecretName || ptr.Deref(vol.Secret.DefaultMode, 0) != 0o400 ||
			!cmp.Equal(vol.Secret.Items, []corev1.KeyToPath{{Key: "gcp-sa", Path: "creds.json"}}) {
			t.Errorf("%s: secret volume %+v", pt.Role, vol)
			continue
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == vol.Name && m.MountPath == pipeline.SecretsDir && m.ReadOnly)
		}
		if !mounted || len(ps.Volumes) != 2 {
			t.Errorf("%s: mounts %+v, volumes %+v", pt.Role, c.VolumeMounts, ps.Volumes)
		}
	}
	var re map[string]any
	if err := yaml.Unmarshal([]byte(j.Spec.RuntimeEnvYAML), &re); err != nil {
		t.Fatal(err)
	}
	vars := re["env_vars"].(map[string]any)
	if _, ok := vars["HF_TOKEN"]; ok || vars["MODE"] != "fast" {
		t.Errorf("runtime_env env_vars %v: a secret variable must not be there", vars)
	}
	if strings.Contains(j.Spec.SubmitterPodTemplate.Spec.Containers[0].Command[2], "HF_TOKEN") {
		t.Error("the submitter's script names the secret variable")
	}

	// Without references: no volume, no ATELIER_SECRETS.
	obj, err = k.Build(step(ownCluster(), ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range k.PodTemplates(obj) {
		for _, e := range pt.Template.Spec.Containers[0].Env {
			if e.Name == "ATELIER_SECRETS" || e.ValueFrom != nil {
				t.Errorf("%s: %+v without secrets", pt.Role, e)
			}
		}
		if len(pt.Template.Spec.Volumes) != 0 {
			t.Errorf("%s: volumes %+v without secrets", pt.Role, pt.Template.Spec.Volumes)
		}
	}

	// A shared cluster's pods are not the step's.
	shared := step(&pipeline.RayStep{Entrypoint: "python x.py", Cluster: "pool", Secrets: r.Secrets}, "run-pool")
	shared.SecretName = s.SecretName
	_, err = k.Build(shared)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !strings.Contains(app.Message(), "ray.secrets") {
		t.Errorf("shared cluster with secrets: %v", err)
	}
}
