package rayjob

import (
	"fmt"
	"maps"
	"strings"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	rayclientset "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/raycluster"
)

// MaxNameLength is KubeRay's limit on RayJob names: it names the job's
// RayCluster "<rayjob>-<5 random>", which must fit in 53 characters.
const MaxNameLength = 47

// SubmitterContainer is the container of KubeRay's submitter pod.
const SubmitterContainer = "ray-job-submitter"

// Kind is the KubeRay RayJob integration.
type Kind struct {
	framework.Typed[*rayv1.RayJob, *rayv1.RayJobList]
}

var (
	_ framework.Kind        = (*Kind)(nil)
	_ framework.Suspendable = (*Kind)(nil)
	_ framework.Templated   = (*Kind)(nil)
	_ framework.Versioned   = (*Kind)(nil)
)

// Integration registers ray steps (activities.KubeRayJob) on clusters
// running KubeRay, with the RayClusters that runs share as a companion.
var Integration = framework.Integration{
	StepKind: activities.KubeRayJob,
	Requires: "KubeRay",
	New: func(c framework.Clients) (framework.Kind, []framework.Resource, bool) {
		if c.Ray == nil {
			return nil, nil, false
		}
		return New(c.Ray), []framework.Resource{raycluster.New(c.Ray)}, true
	},
}

// New returns the RayJob integration over a KubeRay clientset.
func New(ray rayclientset.Interface) *Kind {
	return &Kind{framework.NewTyped("RayJob", "rayjob", func(ns string) framework.Client[*rayv1.RayJob, *rayv1.RayJobList] {
		return ray.RayV1().RayJobs(ns)
	})}
}

// MaxNameLength implements framework.Kind.
func (*Kind) MaxNameLength() int { return MaxNameLength }

// APIVersion implements framework.Versioned: the attempt's Secret is
// owned by its RayJob.
func (*Kind) APIVersion() string { return rayv1.GroupVersion.String() }

// WatchPods implements framework.Kind: KubeRay reports pod trouble in the
// RayJob's own status (and fails it), so pods are not watched.
func (*Kind) WatchPods() bool { return false }

// Build implements framework.Kind.
func (k *Kind) Build(step framework.Step) (framework.Object, error) {
	r := step.Request.Ray
	if r == nil {
		return nil, framework.Invalid("a %s step needs a ray section", activities.KubeRayJob)
	}
	if strings.TrimSpace(r.Entrypoint) == "" {
		return nil, framework.Invalid("ray.entrypoint: a ray step needs an entrypoint (e.g. \"python train.py\")")
	}
	if r.TTLSecondsAfterFinished < 0 {
		return nil, framework.Invalid("ray.ttlSecondsAfterFinished: must not be negative, got %d", r.TTLSecondsAfterFinished)
	}
	if r.ActiveDeadlineSeconds < 0 {
		return nil, framework.Invalid("ray.activeDeadlineSeconds: must not be negative, got %d", r.ActiveDeadlineSeconds)
	}
	meta := step.ObjectMeta()
	// The driver writes outputs on the head pod; see outputs.go.
	driverEnv := withEnv(withEnv(step.Env, "ATELIER_OUTPUTS", headOutputsPath(meta.Name)), runstate.MetricsEnv, headMetricsPath(meta.Name))
	runtimeEnvMap, err := runtimeEnvWithVars(r.RuntimeEnv, driverEnv)
	if err != nil {
		return nil, framework.Invalid("ray.runtimeEnv: %v", err)
	}
	runtimeEnv, err := yaml.Marshal(runtimeEnvMap)
	if err != nil {
		return nil, framework.Invalid("ray.runtimeEnv: %v", err)
	}
	entrypoint := wrapEntrypoint(r.Entrypoint)
	script, err := submitterScript(entrypoint, runtimeEnvMap)
	if err != nil {
		return nil, framework.Invalid("ray.%v", err)
	}
	job := &rayv1.RayJob{
		ObjectMeta: meta,
		Spec: rayv1.RayJobSpec{
			Entrypoint:     entrypoint,
			RuntimeEnvYAML: string(runtimeEnv),
			// Outputs come from the submitter pod, which only K8sJobMode
			// has; spelled out in case KubeRay's default ever changes.
			SubmissionMode: rayv1.K8sJobMode,
			// Retries belong to the pipeline, which shows every attempt.
			BackoffLimit: ptr.To[int32](0),
		},
	}
	if r.ActiveDeadlineSeconds > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr.To(r.ActiveDeadlineSeconds)
	}
	if r.Cluster != "" || step.Request.RayClusterName != "" {
		if len(r.Secrets) > 0 {
			return nil, framework.Invalid("ray.secrets: a step on shared cluster %q cannot reference secrets: the cluster's pods are the run's, not the step's", r.Cluster)
		}
		if step.Request.RayClusterName == "" {
			return nil, framework.Invalid("ray.cluster: the step uses shared cluster %q but the request names no RayCluster (EnsureRayCluster must run first)", r.Cluster)
		}
		if r.Image != "" || len(r.Workers) > 0 || r.Head != (pipeline.Resources{}) {
			return nil, framework.Invalid("ray: a step that uses shared cluster %q cannot also describe a cluster (image, head, workers)", r.Cluster)
		}
		// The cluster is the run's, not the job's: KubeRay must leave it
		// running (it does with clusterSelector; false says so).
		job.Spec.ClusterSelector = map[string]string{raycluster.ClusterLabel: step.Request.RayClusterName}
		if step.Request.RayClusterImage != "" {
			job.Spec.SubmitterPodTemplate = submitterTemplate(step.Request.RayClusterImage, script, step)
			if err := step.SettlePod(job.Spec.SubmitterPodTemplate, SubmitterContainer, r.Pod); err != nil {
				return nil, framework.Invalid("ray.pod (the job submitter): %v", err)
			}
		}
		return job, nil
	}
	// The job's own cluster and its submitter read the step's secrets
	// from the attempt's Secret: the driver, started on the cluster by the
	// Ray job supervisor, inherits them with its node's environment.
	// (runtime_env could not carry them: Ray keeps it, values and all, in
	// the job's record its dashboard shows.)
	secrets := framework.Secrets{Refs: r.Secrets, Name: step.SecretName}
	cluster, err := raycluster.Spec(r.RayClusterTemplate, step.Env, step.PodLabels(), step.PodDefaults, "ray", secrets)
	if err != nil {
		return nil, framework.Invalid("%v", err)
	}
	framework.PinGPUPods(&cluster.HeadGroupSpec.Template.Spec, step.Request.Nodes)
	for i := range cluster.WorkerGroupSpecs {
		framework.PinGPUPods(&cluster.WorkerGroupSpecs[i].Template.Spec, step.Request.Nodes)
	}
	job.Spec.RayClusterSpec = cluster
	job.Spec.ShutdownAfterJobFinishes = ptr.Deref(r.ShutdownAfterJobFinishes, true)
	job.Spec.TTLSecondsAfterFinished = r.TTLSecondsAfterFinished
	job.Spec.SubmitterPodTemplate = submitterTemplate(r.Image, script, step)
	framework.AddSecrets(&job.Spec.SubmitterPodTemplate.Spec, SubmitterContainer, secrets.Refs, secrets.Name)
	// The submitter gets the cluster-wide settings (a service account, an
	// image pull secret for the Ray image), not the head's or a group's.
	if err := step.SettlePod(job.Spec.SubmitterPodTemplate, SubmitterContainer, r.Pod); err != nil {
		return nil, framework.Invalid("ray.pod (the job submitter): %v", err)
	}
	return job, nil
}

// PodTemplates implements framework.Templated: the RayCluster's head and
// worker groups (when the job has its own) and the submitter.
func (*Kind) PodTemplates(obj framework.Object) []framework.PodTemplate {
	j := obj.(*rayv1.RayJob)
	var out []framework.PodTemplate
	if j.Spec.RayClusterSpec != nil {
		out = raycluster.PodTemplates(j.Spec.RayClusterSpec)
	}
	if j.Spec.SubmitterPodTemplate != nil {
		out = append(out, framework.PodTemplate{Role: "submitter", Template: j.Spec.SubmitterPodTemplate})
	}
	return out
}

// submitterTemplate is KubeRay's default submitter pod (same container
// name, image and resources) running submitterScript, which does what
// KubeRay's default command does and also carries the outputs; plus the
// step's labels and ATELIER_* variables. The image is the job's cluster's
// (the shared cluster's one for jobs on a shared cluster), which has the
// ray CLI.
func submitterTemplate(image, script string, step framework.Step) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: step.PodLabels()},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    SubmitterContainer,
				Image:   image,
				Command: []string{"/bin/bash", "-c", script},
				Env:     append([]corev1.EnvVar(nil), step.Env...),
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("1"),
						corev1.ResourceMemory: resource.MustParse("1Gi"),
					},
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("500m"),
						corev1.ResourceMemory: resource.MustParse("200Mi"),
					},
				},
			}},
		},
	}
}

// withEnv returns env with name set to value (replaced if present).
func withEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env)+1)
	for _, e := range env {
		if e.Name != name {
			out = append(out, e)
		}
	}
	return append(out, corev1.EnvVar{Name: name, Value: value})
}

// runtimeEnvWithVars returns Ray's runtime_env with the ATELIER_* variables
// added to env_vars: the entrypoint runs as a Ray driver, which on a shared
// cluster gets no per-step container environment, so runtime_env is the
// only place its identity and ATELIER_OUTPUTS can travel.
func runtimeEnvWithVars(re map[string]any, env []corev1.EnvVar) (map[string]any, error) {
	out := maps.Clone(re)
	if out == nil {
		out = map[string]any{}
	}
	vars := map[string]any{}
	if v, ok := out["env_vars"]; ok && v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("env_vars must be a mapping of names to strings, got %T", v)
		}
		maps.Copy(vars, m)
	}
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	out["env_vars"] = vars
	return out, nil
}

// Progress implements framework.Kind.
//
// Success needs both halves: jobDeploymentStatus Complete (KubeRay is done)
// and jobStatus SUCCEEDED (Ray says the entrypoint succeeded). Failure is
// jobDeploymentStatus Failed (or the older ValidationFailed), with
// status.reason (ValidationFailed, SubmissionFailed, DeadlineExceeded,
// AppFailed, ...) and status.message; or Complete with jobStatus FAILED or
// STOPPED. Everything else is transient, never a failure: "", New,
// Initializing, Waiting, Suspending, Suspended (Pending); Running, Retrying
// (Running) — including Complete with a non-terminal jobStatus, which
// KubeRay fixes in its next status write.
func (k *Kind) Progress(obj framework.Object, _ []*corev1.Pod) framework.Progress {
	j := obj.(*rayv1.RayJob)
	st := j.Status
	p := framework.Progress{Links: map[string]string{"logs": "kubectl logs -n " + j.Namespace + " job/" + j.Name}}
	if u := st.DashboardURL; u != "" {
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		p.Links["dashboard"] = u
	}
	if st.EndTime != nil {
		p.FinishedAt = st.EndTime.Time
	}
	switch st.JobDeploymentStatus {
	case rayv1.JobDeploymentStatusComplete:
		switch st.JobStatus {
		case rayv1.JobStatusSucceeded:
			p.Phase = framework.Succeeded
		case rayv1.JobStatusFailed, rayv1.JobStatusStopped:
			p.Phase = framework.Failed
			p.Reason = string(st.Reason)
			if p.Reason == "" {
				p.Reason = "Job" + titleCase(string(st.JobStatus))
			}
			p.Message = st.Message
		default:
			p.Phase = framework.Running
		}
	case rayv1.JobDeploymentStatusFailed, rayv1.JobDeploymentStatusValidationFailed:
		p.Phase = framework.Failed
		p.Reason = string(st.Reason)
		if p.Reason == "" {
			p.Reason = string(st.JobDeploymentStatus)
		}
		p.Message = st.Message
	case rayv1.JobDeploymentStatusRunning, rayv1.JobDeploymentStatusRetrying:
		p.Phase = framework.Running
	default:
		p.Phase = framework.Pending
	}
	return p
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return s[:1] + strings.ToLower(s[1:])
}

// OutputPods implements framework.Kind: the submitter Job's pods, which
// the Job controller labels job-name=<RayJob name> (KubeRay names the
// submitter Job like the RayJob).
func (k *Kind) OutputPods(obj framework.Object) framework.OutputPods {
	return framework.OutputPods{Selector: "job-name=" + obj.GetName(), Container: SubmitterContainer}
}

// SetSuspend implements framework.Suspendable. Kueue admits RayJobs that
// bring their own cluster (KubeRay creates it once resumed); one on a
// run's shared RayCluster (clusterSelector) is refused by Kueue's webhook,
// so it is not suspended.
func (*Kind) SetSuspend(obj framework.Object, suspend bool) bool {
	rj := obj.(*rayv1.RayJob)
	if len(rj.Spec.ClusterSelector) > 0 {
		return false
	}
	rj.Spec.Suspend = suspend
	return true
}

// Suspended implements framework.Suspendable.
func (*Kind) Suspended(obj framework.Object) bool { return obj.(*rayv1.RayJob).Spec.Suspend }
