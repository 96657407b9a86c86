package framework

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/atelier-ml/atelier/runstate"
)

// StuckReasons are container waiting reasons that rarely resolve by
// themselves: the image cannot be pulled, or the container cannot be
// configured (a missing Secret or ConfigMap). The kubelet retries them
// forever, so without a limit a step would hang until its timeout.
var StuckReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull"}

// PermanentReasons are the StuckReasons no wait can resolve, since a pod's
// image and pull policy never change: the image is not on the node and the
// pod may not pull it (imagePullPolicy: Never), or its reference does not
// parse. A step fails with them at once.
var PermanentReasons = []string{"ErrImageNeverPull", "InvalidImageName"}

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
				return &Trouble{Reason: w.Reason, Message: msg, Pod: p.Name, Permanent: slices.Contains(PermanentReasons, w.Reason)}
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
	Pod, Container string
	Node           string // the node the pod ran on
	ExitCode       int32
	// Reason is the kubelet's: Completed, Error, OOMKilled, StartError
	// (the runtime could not start the command), ...
	Reason  string
	Message string
}

// Describe says how the container ended, for a failed step's message:
// its exit code and, when the runtime rather than the program ended it
// (OOMKilled, StartError, ...), the reason, with the runtime's message
// when it could not start the command at all. Otherwise the message is
// the program's outputs file, left out.
func (t Termination) Describe() string {
	s := fmt.Sprintf("container %s exited with code %d", t.Container, t.ExitCode)
	if t.Reason == "" || t.Reason == "Error" || t.Reason == "Completed" {
		return s
	}
	s += " (" + t.Reason
	if m := strings.TrimSpace(t.Message); m != "" && slices.Contains(startFailures, t.Reason) {
		if len(m) > 1024 {
			m = m[:1024] + "…"
		}
		s += ": " + m
	}
	return s + ")"
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
				t = Termination{Pod: p.Name, Container: cs.Name, Node: p.Spec.NodeName, ExitCode: term.ExitCode, Reason: term.Reason, Message: term.Message}
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

// startFailures are the reasons of a container whose command the runtime
// could not start; its message is then the runtime's error.
var startFailures = []string{"StartError", "ContainerCannotRun", "RunContainerError"}

// MaxTerminationMessage is the kubelet's limit on a termination message;
// longer files are truncated.
const MaxTerminationMessage = 4096

// MetricsMarker starts the first line of a termination message that
// carries the step's metrics (its $ATELIER_METRICS, one line of JSON)
// before its outputs: the Ray submitter writes it (jobs/rayjob), since a
// Ray driver's files stay on the head pod. Other kinds' steps write their
// outputs straight to the message and report metrics through the
// launcher.
const MetricsMarker = "ATELIER_METRICS_JSON="

// SplitMetrics separates a termination message's metrics line (nil when
// it has none) from the outputs that follow it.
func SplitMetrics(msg string) (metrics []byte, outputs string) {
	if !strings.HasPrefix(msg, MetricsMarker) {
		return nil, msg
	}
	line, rest, _ := strings.Cut(msg, "\n")
	return []byte(strings.TrimPrefix(line, MetricsMarker)), rest
}

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
	return nil, fmt.Errorf("outputs (ATELIER_OUTPUTS) must be a JSON object, not %s", runstate.JSONKind(t[0]))
}
