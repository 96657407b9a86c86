package job

import (
	"context"
	"fmt"
	"math"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// ContainerName is the name of the step's container in the Job's pod.
const ContainerName = "step"

// Kind is the batch/v1 Job integration.
type Kind struct {
	framework.Typed[*batchv1.Job, *batchv1.JobList]
	kube kubernetes.Interface
}

var (
	_ framework.Kind        = (*Kind)(nil)
	_ framework.Suspendable = (*Kind)(nil)
	_ framework.Expiring    = (*Kind)(nil)
	_ framework.Templated   = (*Kind)(nil)
)

// Integration registers container steps (activities.KubeJob); every
// cluster can run them.
var Integration = framework.Integration{
	StepKind: activities.KubeJob,
	Requires: "Kubernetes",
	New: func(c framework.Clients) (framework.Kind, []framework.Resource, bool) {
		return New(c.Kube), nil, c.Kube != nil
	},
}

// New returns the Job integration over a core clientset.
func New(kube kubernetes.Interface) *Kind {
	return &Kind{framework.NewTyped("Job", "job", func(ns string) framework.Client[*batchv1.Job, *batchv1.JobList] {
		return kube.BatchV1().Jobs(ns)
	}), kube}
}

// ExpireAfter implements framework.Expiring: it sets the finished Job's
// ttlSecondsAfterFinished (mutable after creation), so the TTL controller
// deletes it, and its pod, that long after it finished.
func (k *Kind) ExpireAfter(ctx context.Context, obj framework.Object, after time.Duration) error {
	ttl := int32(min(math.Ceil(after.Seconds()), math.MaxInt32))
	patch := fmt.Sprintf(`{"spec":{"ttlSecondsAfterFinished":%d}}`, ttl)
	_, err := k.kube.BatchV1().Jobs(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// MaxNameLength implements framework.Kind. The Job controller puts the
// Job's name in its pods' batch.kubernetes.io/job-name label, and label
// values are limited to 63 characters.
func (*Kind) MaxNameLength() int { return 63 }

// WatchPods implements framework.Kind: a Job's status does not show a pod
// that cannot pull its image.
func (*Kind) WatchPods() bool { return true }

// Build implements framework.Kind.
func (k *Kind) Build(step framework.Step) (framework.Object, error) {
	c := step.Request.Container
	if c == nil {
		return nil, framework.Invalid("a %s step needs a container", activities.KubeJob)
	}
	if c.Image == "" {
		return nil, framework.Invalid("a container step on Kubernetes needs an image")
	}
	res, nodeSelector, err := framework.Requirements(c.Resources, "container.resources")
	if err != nil {
		return nil, framework.Invalid("%v", err)
	}
	job := &batchv1.Job{
		ObjectMeta: step.ObjectMeta(),
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: step.PodLabels()},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector:  nodeSelector,
					Containers: []corev1.Container{{
						Name:       ContainerName,
						Image:      c.Image,
						Command:    c.Command,
						Args:       c.Args,
						WorkingDir: c.WorkingDir,
						Env:        append(framework.ContainerEnv(c.Env, step.Env), framework.SecretEnv(c.Secrets, step.SecretName)...),
						Resources:  res,
						// The default, spelled out: outputs are read from
						// this file, and FallbackToLogsOnError would put log
						// lines where outputs are expected.
						TerminationMessagePath:   framework.OutputsPath,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
				},
			},
		},
	}
	if t := step.Request.Timeout; t > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr.To(int64(math.Ceil(t.Seconds())))
	}
	if vol, mount, ok := framework.SecretFilesVolume(c.Secrets, step.SecretName); ok {
		ps := &job.Spec.Template.Spec
		ps.Volumes = append(ps.Volumes, vol)
		ps.Containers[0].VolumeMounts = append(ps.Containers[0].VolumeMounts, mount)
	}
	if err := step.SettlePod(&job.Spec.Template, ContainerName, c.Pod); err != nil {
		return nil, err
	}
	if step.Launch != nil {
		// After the pod settings: the launcher's image follows the step's
		// pull policy, and a patch cannot unwrap the command.
		if err := framework.Wrap(&job.Spec.Template.Spec, ContainerName, *step.Launch, step.SecretName); err != nil {
			return nil, err
		}
	}
	framework.PinGPUPods(&job.Spec.Template.Spec, step.Request.Nodes)
	return job, nil
}

// PodTemplates implements framework.Templated.
func (*Kind) PodTemplates(obj framework.Object) []framework.PodTemplate {
	return []framework.PodTemplate{{Template: &obj.(*batchv1.Job).Spec.Template}}
}

// Progress implements framework.Kind: condition Complete=True is success,
// Failed=True is failure with the condition's reason and message
// (BackoffLimitExceeded, DeadlineExceeded, ...). The interim conditions
// SuccessCriteriaMet and FailureTarget are not final: the Job controller
// adds Complete or Failed once the pods are gone.
func (k *Kind) Progress(obj framework.Object, pods []*corev1.Pod) framework.Progress {
	j := obj.(*batchv1.Job)
	p := framework.Progress{Links: map[string]string{"logs": "kubectl logs -n " + j.Namespace + " job/" + j.Name}}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			p.Phase = framework.Succeeded
			p.FinishedAt = c.LastTransitionTime.Time
			if j.Status.CompletionTime != nil {
				p.FinishedAt = j.Status.CompletionTime.Time
			}
			return p
		case batchv1.JobFailed:
			p.Phase = framework.Failed
			p.Reason, p.Message = c.Reason, c.Message
			p.FinishedAt = c.LastTransitionTime.Time
			p.TimedOut = c.Reason == batchv1.JobReasonDeadlineExceeded
			return p
		}
	}
	p.Phase = framework.Pending
	if ptr.Deref(j.Status.Ready, 0) > 0 || anyRunning(pods) {
		p.Phase = framework.Running
	}
	p.Stuck = framework.PodTrouble(pods)
	p.Waiting = framework.PodWaiting(pods)
	return p
}

func anyRunning(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			return true
		}
	}
	return false
}

// OutputPods implements framework.Kind.
func (k *Kind) OutputPods(obj framework.Object) framework.OutputPods {
	return framework.OutputPods{Selector: framework.JobNameLabel + "=" + obj.GetName(), Container: ContainerName}
}

// SetSuspend implements framework.Suspendable (Kueue admits Jobs).
func (*Kind) SetSuspend(obj framework.Object, suspend bool) bool {
	obj.(*batchv1.Job).Spec.Suspend = ptr.To(suspend)
	return true
}

// Suspended implements framework.Suspendable.
func (*Kind) Suspended(obj framework.Object) bool {
	return ptr.Deref(obj.(*batchv1.Job).Spec.Suspend, false)
}
