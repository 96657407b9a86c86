package framework

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/atelier-ml/atelier/activities"
)

// StuckReasons are container waiting reasons that rarely resolve by
// themselves: the image cannot be pulled, or the container cannot be
// configured (a missing Secret or ConfigMap). The kubelet retries them
// forever, so without a limit a step would hang until its timeout.
var StuckReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}

// PodTrouble returns why the first of pods that cannot start is stuck, or
// nil. Pods being deleted are ignored.
func PodTrouble(pods []*corev1.Pod) *Trouble {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := cs.State.Waiting; w != nil && slices.Contains(StuckReasons, w.Reason) {
				msg := fmt.Sprintf("pod %s container %s", p.Name, cs.Name)
				if w.Message != "" {
					msg += ": " + w.Message
				}
				return &Trouble{Reason: w.Reason, Message: msg, Pod: p.Name}
			}
		}
	}
	return nil
}

// PodWaiting returns why the first of pods that the scheduler cannot place
// waits (PodScheduled=False, reason Unschedulable, with the scheduler's
// message such as "0/10 nodes are available: 10 Insufficient
// nvidia.com/gpu."), or nil. Pods being deleted are ignored.
func PodWaiting(pods []*corev1.Pod) *Trouble {
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Spec.NodeName != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return &Trouble{Reason: c.Reason, Message: fmt.Sprintf("pod %s: %s", p.Name, c.Message), Pod: p.Name}
			}
		}
	}
	return nil
}

// Termination is a container's terminated state, as read from its pod.
type Termination struct {
	Pod      string
	ExitCode int32
	Message  string
}

// OutputTermination picks, among pods, the termination of container ("" =
// the first container) that holds a step's outputs: the latest successful
// one, else the latest terminated one (a submitter Job may have retried).
// ok is false when no pod has that container terminated; pending is true
// when a matching pod exists whose container has not terminated yet.
func OutputTermination(pods []corev1.Pod, container string) (t Termination, ok, pending bool) {
	var best *corev1.ContainerStateTerminated
	for i := range pods {
		p := &pods[i]
		for _, cs := range p.Status.ContainerStatuses {
			if container == "" {
				if len(p.Spec.Containers) == 0 || cs.Name != p.Spec.Containers[0].Name {
					continue
				}
			} else if cs.Name != container {
				continue
			}
			term := cs.State.Terminated
			if term == nil {
				if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					pending = true
				}
				continue
			}
			if best == nil || better(term, best) {
				best = term
				t = Termination{Pod: p.Name, ExitCode: term.ExitCode, Message: term.Message}
			}
		}
	}
	return t, best != nil, pending
}

// better prefers success, then the later finish.
func better(a, b *corev1.ContainerStateTerminated) bool {
	if (a.ExitCode == 0) != (b.ExitCode == 0) {
		return a.ExitCode == 0
	}
	return a.FinishedAt.After(b.FinishedAt.Time)
}

// MaxTerminationMessage is the kubelet's limit on a termination message;
// longer files are truncated.
const MaxTerminationMessage = 4096

// ParseOutputs reads outputs from a termination message: empty means no
// outputs; anything else must be a JSON object. Messages name
// ATELIER_OUTPUTS because that is what the step's author knows.
func ParseOutputs(msg string) (map[string]any, error) {
	t := bytes.TrimSpace([]byte(msg))
	if len(t) == 0 {
		return nil, nil
	}
	var out map[string]any
	err := json.Unmarshal(t, &out)
	if err == nil && out != nil {
		return out, nil
	}
	if len(msg) >= MaxTerminationMessage {
		return nil, fmt.Errorf("outputs (ATELIER_OUTPUTS) are not a JSON object, probably because Kubernetes truncated them at %d bytes (the termination message limit): write large results to files and output their paths",
			MaxTerminationMessage)
	}
	var v any
	if verr := json.Unmarshal(t, &v); verr != nil {
		var se *json.SyntaxError
		if errors.As(verr, &se) {
			return nil, fmt.Errorf("outputs (ATELIER_OUTPUTS) are not valid JSON: %v (at byte %d)", se, se.Offset)
		}
		return nil, fmt.Errorf("outputs (ATELIER_OUTPUTS) are not valid JSON: %v", verr)
	}
	return nil, fmt.Errorf("outputs (ATELIER_OUTPUTS) must be a JSON object, not %s", activities.JSONKind(t[0]))
}
