package framework

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/schema"
)

// Object is a typed Kubernetes object: its metadata and its runtime type.
type Object interface {
	metav1.Object
	runtime.Object
}

// Resource is one Kubernetes kind the backend creates, watches and deletes,
// implemented over that kind's typed clientset. It is all the generic code
// needs to create-or-adopt, to run a shared informer and to clean up.
type Resource interface {
	// Kind is the Kubernetes kind, for messages: "RayJob".
	Kind() string
	// Short is the kubectl resource name, used in "<short>/<name>" object
	// references so that `kubectl get <short>/<name>` works: "rayjob".
	Short() string
	// NewObject returns an empty object of the kind, for informers.
	NewObject() Object

	Create(ctx context.Context, obj Object) (Object, error)
	Get(ctx context.Context, namespace, name string) (Object, error)
	Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	// List returns the typed list (e.g. *rayv1.RayJobList); namespace ""
	// means all namespaces.
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// Updater is a Resource whose objects live on and change after creation:
// the long-lived kinds (an inference endpoint's Deployments, Service and
// HTTPRoute) are applied with Apply, where the run-to-completion kinds of
// steps are created once with CreateOrAdopt. Typed implements it.
type Updater interface {
	Resource
	Update(ctx context.Context, obj Object) (Object, error)
}

// Kind is an integration: a Resource that a step becomes. Each integration
// package implements it for one kind and asserts so with
// `var _ framework.Kind = (*Kind)(nil)`.
type Kind interface {
	Resource
	// MaxNameLength bounds object names: 63 for most kinds, less where the
	// operator derives longer names from it (KubeRay: 47 for a RayJob).
	MaxNameLength() int
	// Build returns the desired object for one attempt, carrying step.Meta
	// as its metadata. An error means the step cannot run as written; it
	// becomes a non-retryable InvalidStep, so its message must say what to
	// change.
	Build(step Step) (Object, error)
	// Progress maps the observed object (and, when WatchPods, its pods) to
	// the generic state machine. It must be a pure function of its inputs:
	// it is table-tested.
	Progress(obj Object, pods []*corev1.Pod) Progress
	// OutputPods says where outputs come from: pods matching Selector in the
	// object's namespace, and the container whose termination message holds
	// them ("" = the first container).
	OutputPods(obj Object) OutputPods
	// WatchPods reports whether the step's pods are watched while it runs
	// (pods labelled batch.kubernetes.io/job-name=<object name>), to
	// surface image-pull and configuration errors the object's own status
	// never shows.
	WatchPods() bool
}

// Versioned is a Kind that names its API version ("ray.io/v1"), for owner
// references to its objects: typed clients return objects without their
// TypeMeta. A Kind that does not implement it is a batch/v1 one (Job).
type Versioned interface {
	APIVersion() string
}

// Expiring is a Kind whose finished objects can delete themselves a while
// later (a Job's ttlSecondsAfterFinished). The items of a wide step use it
// so their objects do not pile up until the run's end; it is set only
// once a worker has read the outcome, never at creation: an object that
// finished while no worker watched must wait for the retry that adopts
// it, or the attempt's outcome would be lost with it.
type Expiring interface {
	ExpireAfter(ctx context.Context, obj Object, after time.Duration) error
}

// Step is what a Kind builds an object from: the request, and what the
// framework decided about it (name, namespace, labels, environment).
type Step struct {
	Request activities.KubeStepRequest
	// Meta is the object's metadata: name, namespace, labels, annotations.
	Meta metav1.ObjectMeta
	// Env holds the ATELIER_* variables (ATELIER_OUTPUTS included) that
	// every container of the step must get, sorted by name.
	Env []corev1.EnvVar
	// SecretName is the attempt's Secret holding the project secrets its
	// container references ("" when none): kinds read them from it with
	// SecretEnv.
	SecretName string
	// Launch, when set, runs the step's container under the launcher
	// (Wrap): the step reads or writes artifacts.
	Launch *Launch
	// PodDefaults are the cluster operator's pod settings for every pod
	// (PodPolicy.Defaults): kinds apply them with SettlePod after the
	// step's own, since only the kind knows its pod templates.
	PodDefaults *schema.Pod
}

// SettlePod gives a pod template of the step its settings: the user's p
// (ApplyPod), then the cluster's defaults where p left fields unset
// (ApplyPodDefaults). container is the template's main container, which
// gets the volumes' mounts. The policy is checked on the built object
// afterwards (Templated, PodPolicy.CheckPod).
func (s Step) SettlePod(t *corev1.PodTemplateSpec, container string, p *schema.Pod) error {
	return SettlePod(t, container, p, s.PodDefaults)
}

// Templated is a Kind whose objects hold pod templates (all of them do):
// PodTemplates lists them, so that the cluster's policy is checked on
// every pod a step makes, after the settings and patches are applied.
type Templated interface {
	PodTemplates(obj Object) []PodTemplate
}

// PodTemplate is one pod template of an object, named for messages.
type PodTemplate struct {
	// Role names the pods in a policy refusal: "head", "workers[gpu]",
	// "driver"; "" when the object has one template.
	Role     string
	Template *corev1.PodTemplateSpec
}

// ObjectMeta returns a copy of the metadata for a new object.
func (s Step) ObjectMeta() metav1.ObjectMeta { return *s.Meta.DeepCopy() }

// PodLabels returns a copy of the identity labels, for pod templates: pods
// then carry the same run/step/attempt labels as their object, so
// `kubectl get pods -l atelier.dev/run=<run>` finds them.
func (s Step) PodLabels() map[string]string {
	out := make(map[string]string, len(s.Meta.Labels))
	for k, v := range s.Meta.Labels {
		out[k] = v
	}
	return out
}

// Phase is the generic state of a step's object.
type Phase int

// Phases. Pending and Running are both "not finished"; the difference is
// only informative (logs).
const (
	Pending Phase = iota
	Running
	Succeeded
	Failed
)

func (p Phase) String() string {
	switch p {
	case Pending:
		return "Pending"
	case Running:
		return "Running"
	case Succeeded:
		return "Succeeded"
	case Failed:
		return "Failed"
	}
	return "Unknown"
}

// Terminal reports whether the phase is final.
func (p Phase) Terminal() bool { return p == Succeeded || p == Failed }

// Progress is a Kind's reading of its object.
type Progress struct {
	Phase Phase
	// Reason is a CamelCase cause, e.g. "DeadlineExceeded", "AppFailed".
	Reason  string
	Message string
	// Links are shown on the step: "dashboard", "sparkUI", "logs".
	Links map[string]string
	// FinishedAt is the object's own terminal transition time, when its
	// status records one.
	FinishedAt time.Time
	// TimedOut marks a failure caused by the attempt's timeout enforced by
	// Kubernetes itself (a Job's activeDeadlineSeconds), reported as
	// StepTimeout like the backend's own timer.
	TimedOut bool
	// Stuck is set while a pod cannot start for a reason that rarely fixes
	// itself (image pull, missing config); the step fails if it stays
	// stuck longer than the backend's image-pull grace, or at once if the
	// reason cannot fix itself (Trouble.Permanent).
	Stuck *Trouble
	// Waiting is set while a pod waits for something that may come by
	// itself — the scheduler finds no node that fits (reason
	// Unschedulable, with the scheduler's message) — so the step keeps
	// waiting, but says why.
	Waiting *Trouble
}

// Trouble is why a pod cannot start.
type Trouble struct {
	Reason  string // ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...
	Message string
	Pod     string // the pod's name
	// Permanent: the reason is one of PermanentReasons, which nothing but
	// a new pod resolves.
	Permanent bool
}

// OutputPods locates the pod whose termination message holds a step's
// outputs.
type OutputPods struct {
	Selector  string // label selector
	Container string // "" = first container
}
