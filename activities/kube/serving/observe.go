package serving

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// reasonCrashLoop is the kubelet's waiting reason between restarts of a
// crashing container.
const reasonCrashLoop = "CrashLoopBackOff"

// ObserveRevision reads the revision's Deployment and pods: each
// replica's startup phases with their times, how many are ready and
// crash-looping, and why the scheduler cannot place a pod, if it cannot.
// It only reads (from the API server's watch cache: an observation may lag
// by moments, and the workflow observes again), so it can run every few
// seconds. A missing Deployment is not an error: Exists is false.
func (s *Serving) ObserveRevision(ctx context.Context, req activities.ObserveServingRevisionRequest) (activities.ObserveServingRevisionResult, error) {
	if err := checkRef(req.ServingRevisionRef); err != nil {
		return activities.ObserveServingRevisionResult{}, err
	}
	if req.RestartThreshold < 0 {
		return activities.ObserveServingRevisionResult{}, framework.Invalid("restartThreshold must not be negative, got %d", req.RestartThreshold)
	}
	ns, err := s.namespace(req.Project)
	if err != nil {
		return activities.ObserveServingRevisionResult{}, err
	}
	name := RevisionName(req.Project, req.Endpoint, req.Revision)
	labels := RevisionLabels(req.Project, req.Endpoint, req.Revision)
	var dep *appsv1.Deployment
	obj, err := s.res.Deployments.Get(ctx, ns, name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return activities.ObserveServingRevisionResult{}, framework.WrapAPI(err, "get Deployment %s/%s", ns, name)
	default:
		if err := framework.CheckAdoptable(s.res.Deployments, obj, labels); err != nil {
			return activities.ObserveServingRevisionResult{}, err
		}
		dep = obj.(*appsv1.Deployment)
	}
	// Pods are listed even without the Deployment: after a delete, its
	// pods linger while they terminate, and the caller waits for them.
	pods, err := s.clients.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: selectorString(labels), ResourceVersion: "0",
	})
	if err != nil {
		return activities.ObserveServingRevisionResult{}, framework.WrapAPI(err, "list pods of %s/%s", ns, name)
	}
	res := observe(s.clock.Now(), dep, pods.Items, req.RestartThreshold)
	res.Namespace, res.Deployment = ns, name
	if hasMessages(res) {
		// An engine's last log lines may print its secrets.
		var sr stringRedactor = hideAll{}
		if r, err := s.redactor(ctx, ns, name); err == nil {
			sr = r
		}
		res = redactObservation(res, sr)
	}
	return res, nil
}

func hasMessages(res activities.ObserveServingRevisionResult) bool {
	for _, r := range res.Replicas {
		if r.Message != "" {
			return true
		}
	}
	return res.Stuck != nil || res.Unschedulable != nil
}

// stringRedactor hides what must not be shown in a string.
type stringRedactor interface{ String(string) string }

// hideAll hides whole messages: the secrets to hide could not be read.
type hideAll struct{}

func (hideAll) String(s string) string {
	if s == "" {
		return s
	}
	return "(not shown: the revision's secrets, which it may print, could not be read to hide them)"
}

// redactObservation hides secret values in the observation's messages.
func redactObservation(res activities.ObserveServingRevisionResult, r stringRedactor) activities.ObserveServingRevisionResult {
	if rr, ok := r.(*redact.Redactor); r == nil || ok && rr == nil {
		return res
	}
	res.Replicas = slices.Clone(res.Replicas)
	for i := range res.Replicas {
		res.Replicas[i].Message = r.String(res.Replicas[i].Message)
	}
	for _, p := range []**activities.ServingPodProblem{&res.Stuck, &res.Unschedulable} {
		if *p != nil {
			c := **p
			c.Message = r.String(c.Message)
			*p = &c
		}
	}
	return res
}

// observe is ObserveRevision's reading of a Deployment (nil: missing) and
// its pods. It is a pure function of its inputs.
func observe(now time.Time, dep *appsv1.Deployment, pods []corev1.Pod, restartThreshold int) activities.ObserveServingRevisionResult {
	res := activities.ObserveServingRevisionResult{ObservedAt: now, Exists: dep != nil}
	if dep != nil {
		res.Desired = int(ptr.Deref(dep.Spec.Replicas, 1))
	}
	sorted := make([]*corev1.Pod, len(pods))
	for i := range pods {
		sorted[i] = &pods[i]
	}
	slices.SortFunc(sorted, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	var live []*corev1.Pod
	for _, p := range sorted {
		if p.DeletionTimestamp != nil {
			res.Terminating++
			continue
		}
		// A pod that ended (evicted, or Failed after a node loss) is no
		// replica: the ReplicaSet makes another.
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		live = append(live, p)
		r := replica(p, restartThreshold)
		if r.Ready {
			res.Ready++
		}
		if r.CrashLooping {
			res.CrashLooping++
		}
		res.Replicas = append(res.Replicas, r)
	}
	if t := framework.PodWaiting(live); t != nil {
		res.Unschedulable = problem(t)
	}
	if t := framework.PodTrouble(live); t != nil {
		res.Stuck = problem(t)
	}
	return res
}

// problem is a framework.Trouble in the contract's terms.
func problem(t *framework.Trouble) *activities.ServingPodProblem {
	return &activities.ServingPodProblem{Pod: t.Pod, Reason: t.Reason, Message: t.Message}
}

// replica reads one pod's startup phases:
//
//   - Scheduled: the PodScheduled condition turned True;
//   - ImagePulled: the serving container started (running, or it ran
//     before: last termination), since a container starts only once its
//     image is there. With an image ID but no start time (it was pulled,
//     then failed to start), the scheduling time stands in: the phase is
//     reached, and no later than that is known, so a replica is never
//     held late for a time this cannot see;
//   - EngineReady: the pod's Ready condition turned True (the readiness
//     probe passed). A replica that was ready and is not any more has not
//     reached it: it is not serving.
func replica(p *corev1.Pod, restartThreshold int) activities.ServingReplicaObservation {
	r := activities.ServingReplicaObservation{
		ReplicaStartup: inference.ReplicaStartup{Replica: p.Name, Created: p.CreationTimestamp.Time},
		Node:           p.Spec.NodeName,
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				r.Waiting, r.Message = c.Reason, c.Message
			}
			continue
		}
		switch c.Type {
		case corev1.PodScheduled:
			r.Scheduled = c.LastTransitionTime.Time
		case corev1.PodReady:
			r.Ready = true
			r.EngineReady = c.LastTransitionTime.Time
		}
	}
	if r.Scheduled.IsZero() && p.Spec.NodeName != "" {
		// Bound, but the condition is not written yet.
		r.Scheduled = r.Created
	}
	cs := serverStatus(p)
	if cs == nil {
		return r
	}
	if w, msg, ok := initTrouble(p); ok {
		// The engine waits on an init container (a registered model's
		// fetch) that fails: say why, not PodInitializing.
		r.Waiting, r.Message = w, msg
		r.CrashLooping = w == reasonCrashLoop
		return r
	}
	r.Restarts = int(cs.RestartCount)
	switch {
	case cs.State.Running != nil:
		r.ImagePulled = cs.State.Running.StartedAt.Time
	case cs.LastTerminationState.Terminated != nil:
		r.ImagePulled = cs.LastTerminationState.Terminated.StartedAt.Time
	case cs.State.Terminated != nil:
		r.ImagePulled = cs.State.Terminated.StartedAt.Time
	}
	if r.ImagePulled.IsZero() && cs.ImageID != "" {
		r.ImagePulled = r.Scheduled
	}
	if w := cs.State.Waiting; w != nil {
		r.Waiting, r.Message = w.Reason, w.Message
		if w.Reason == reasonCrashLoop && cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Message != "" {
			// The engine's last words (TerminationMessageFallbackToLogsOnError).
			r.Message = cs.LastTerminationState.Terminated.Message
		}
	}
	r.CrashLooping = r.Waiting == reasonCrashLoop || (restartThreshold > 0 && r.Restarts >= restartThreshold)
	return r
}

// initTrouble is the reason and message of an init container that failed
// or crash-loops (its last words, from its termination message).
func initTrouble(p *corev1.Pod) (reason, message string, ok bool) {
	for _, ic := range p.Status.InitContainerStatuses {
		if w := ic.State.Waiting; w != nil && w.Reason == reasonCrashLoop {
			msg := w.Message
			if t := ic.LastTerminationState.Terminated; t != nil && t.Message != "" {
				msg = t.Message
			}
			return reasonCrashLoop, fmt.Sprintf("init container %s: %s", ic.Name, msg), true
		}
		if t := ic.State.Terminated; t != nil && t.ExitCode != 0 {
			return "InitContainerFailed", fmt.Sprintf("init container %s exited with code %d: %s", ic.Name, t.ExitCode, t.Message), true
		}
	}
	return "", "", false
}

// serverStatus is the serving container's status, or the first
// container's (a mutator may have renamed or added containers).
func serverStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	if len(p.Status.ContainerStatuses) > 0 {
		return &p.Status.ContainerStatuses[0]
	}
	return nil
}
