package kubetest

import (
	_ "embed"
	"strconv"
	"time"
)

// The kwok contract: how a test decides what the "program" in a pod on a
// fake node does, without a container runtime. kwok (with the stages in
// kwok-stages.yaml) makes every pod bound to a fake node Running and Ready at
// once; then its containers exit only as the pod's annotations say:
//
//   - AnnotationExitCode "<int>": the containers exit with that code, at once
//     (or after AnnotationRunFor). 0 ends the pod Succeeded, anything else
//     Failed (container reason Completed / Error).
//   - AnnotationRunFor "<Go duration>", e.g. "1.5s": the containers exit
//     after running that long (exit code 0 unless AnnotationExitCode says
//     otherwise). An RFC 3339 time also works: exit at that time.
//   - AnnotationTerminationMessage: the terminated containers' message, which
//     is where Atelier reads a step's outputs from.
//   - Neither exit code nor run-for: the pod runs until it is deleted, like
//     a server (Ray head and worker pods).
//
// The annotations can be on the pod from its creation (a pod a test creates
// itself, see MakePod) or added while it runs (Workloads does that to the
// pods controllers create for Atelier's steps); kwok re-evaluates a pod on
// every change.
const (
	AnnotationExitCode           = "kwok.atelier.dev/exit-code"
	AnnotationRunFor             = "kwok.atelier.dev/run-for"
	AnnotationTerminationMessage = "kwok.atelier.dev/termination-message"
)

// FakeNodeAnnotation marks the nodes kwok manages (kwok's own convention,
// passed as --manage-nodes-with-annotation-selector): a node without it is
// left alone, so a test could still register a node nobody plays.
const (
	FakeNodeAnnotation      = "kwok.x-k8s.io/node"
	FakeNodeAnnotationValue = "fake"
)

// kwokConfig is kwok's configuration file: options and the pod stages.
//
//go:embed kwok-stages.yaml
var kwokConfig []byte

// ExitAnnotations returns the annotations that make a pod's containers exit
// with code after running for d (0: at once) with message as termination
// message.
func ExitAnnotations(code int, d time.Duration, message string) map[string]string {
	a := map[string]string{AnnotationExitCode: strconv.Itoa(code)}
	if d > 0 {
		a[AnnotationRunFor] = d.String()
	}
	if message != "" {
		a[AnnotationTerminationMessage] = message
	}
	return a
}
