package schema

import "fmt"

// Problem is one validation finding, located by a JSON-path-like Path such
// as "steps[2].dependsOn[0]" or "rollout.canary.steps[1].weight", with a
// message saying what to change.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// ValidationError carries every problem found in one document.
type ValidationError struct {
	// Subject names the document in the message: "pipeline", "endpoint".
	Subject  string
	Problems []Problem
	// Kind, when set, is the sentinel errors.Is matches (for example
	// inference.ErrInvalidSpec).
	Kind error
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return fmt.Sprintf("invalid %s: %s: %s", e.Subject, e.Problems[0].Path, e.Problems[0].Message)
	}
	return fmt.Sprintf("invalid %s: %d problems (first: %s: %s)", e.Subject, len(e.Problems), e.Problems[0].Path, e.Problems[0].Message)
}

// Is makes errors.Is(err, e.Kind) true.
func (e *ValidationError) Is(target error) bool { return e.Kind != nil && target == e.Kind }
