package workflows

import (
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// versionRunIf guards trigger rules (spec.RunIf) and the scheduling that
// goes with them: once a step fails, steps whose rule runs after a
// failure still start, and the others are skipped as soon as their
// dependencies are done rather than when the run ends
// (workflow.GetVersion change ID; never reuse it).
const versionRunIf = "atelier.run-if"

// runIfMet decides rule over the final states of a step's direct
// dependencies, in declaration order. When the rule is not met, why says
// which rule and which dependency (the step's skip reason).
func runIfMet(rule pipeline.RunIf, parents []*runstate.StepStatus) (ok bool, why string) {
	note := ""
	if rule == "" {
		note = " (the default)" // a user may not know a rule applies
	}
	rule = rule.OrDefault()
	failed := func(st *runstate.StepStatus) bool { return st.State == runstate.StepFailed }
	succeeded := func(st *runstate.StepStatus) bool {
		return st.State == runstate.StepSucceeded || st.State == runstate.StepCached
	}
	var blocker *runstate.StepStatus // the first dependency that breaks the rule
	switch rule {
	case pipeline.RunIfAllSucceeded:
		blocker = firstWhere(parents, func(st *runstate.StepStatus) bool { return !succeeded(st) })
	case pipeline.RunIfNoneFailed:
		blocker = firstWhere(parents, func(st *runstate.StepStatus) bool { return !succeeded(st) && st.State != runstate.StepSkipped })
	case pipeline.RunIfAllDone:
		blocker = firstWhere(parents, func(st *runstate.StepStatus) bool { return !st.State.Terminal() })
	case pipeline.RunIfAnyFailed:
		if firstWhere(parents, failed) != nil {
			return true, ""
		}
		return false, fmt.Sprintf("runIf %s not met: no dependency failed", rule)
	}
	if blocker == nil {
		return true, ""
	}
	return false, fmt.Sprintf("runIf %s%s not met: dependency %q %s", rule, note, blocker.Name, strings.ToLower(string(blocker.State)))
}

func firstWhere(sts []*runstate.StepStatus, pred func(*runstate.StepStatus) bool) *runstate.StepStatus {
	for _, st := range sts {
		if pred(st) {
			return st
		}
	}
	return nil
}
