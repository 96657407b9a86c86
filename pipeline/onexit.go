package pipeline

import "time"

// Exit handlers (Pipeline.OnExit) are ordinary steps with three rules of
// their own:
//
//   - they start once every step of Steps has ended, whatever the outcome:
//     success, failure, cancel or the pipeline deadline; the deadline does
//     not apply to them, OnExitTimeout does;
//   - they may depend on each other (dependsOn, references) but not on
//     Steps, which have all ended; their templates may read the outputs of
//     Steps that succeeded (steps.train.outputs.model; use
//     steps.train?.outputs?.model ?? "" for a step that may not have);
//   - they see how the run is about to end: run.state (SUCCEEDED, FAILED or
//     CANCELLED), run.failedSteps (the names of the FAILED steps, in
//     declaration order) and run.error (the run's error message, "" when
//     it succeeded).
//
// Their outcome does not change the run's state (they were told it): a
// failed exit handler is a FAILED step and a warning on the run. One
// failing does not stop the others from starting (no fail-fast among exit
// handlers); their runIf rules apply among themselves. Approval steps may
// not be exit handlers: they also run after a cancel, when nobody should
// have to decide anything.
const (
	// DefaultOnExitTimeout bounds the exit handlers of a run without
	// onExitTimeout.
	DefaultOnExitTimeout = 10 * time.Minute
	// MaxOnExitTimeout bounds onExitTimeout: a run's end must not wait
	// for its cleanup longer than a day.
	MaxOnExitTimeout = 24 * time.Hour
)

// exitRunFields are the run fields known only to exit handlers.
var exitRunFields = map[string]bool{"state": true, "failedSteps": true, "error": true}

// ExitTimeout is how long the exit handlers of p may run.
func (p *Spec) ExitTimeout() time.Duration {
	if p.OnExitTimeout > 0 {
		return p.OnExitTimeout.D()
	}
	return DefaultOnExitTimeout
}

// ExitPipeline is p's exit handlers as a pipeline of their own (the steps
// are OnExit; params, placement and shared Ray clusters are p's), which
// is how the workflow schedules them and Dependencies reads them.
func (p *Spec) ExitPipeline() *Spec {
	return &Spec{
		Name: p.Name, Params: p.Params, Steps: p.OnExit,
		Placement: p.Placement, RayClusters: p.RayClusters,
	}
}

// validateOnExit checks the exit handlers with the rules of steps, under
// paths onExit[i], plus their own: names unique across the whole run, no
// dependsOn on a pipeline step, no approval step, onExitTimeout's bounds.
func validateOnExit(p *Spec, vc *vctx, psc *refScope, ps *problems) {
	switch {
	case p.OnExitTimeout < 0:
		ps.add("onExitTimeout", "must not be negative")
	case p.OnExitTimeout.D() > MaxOnExitTimeout:
		ps.add("onExitTimeout", "%s is longer than the limit of %s", p.OnExitTimeout.D(), MaxOnExitTimeout)
	case p.OnExitTimeout > 0 && len(p.OnExit) == 0:
		ps.add("onExitTimeout", "bounds the onExit steps, and this pipeline has none")
	}
	if len(p.OnExit) == 0 {
		return
	}
	q := p.ExitPipeline()
	evc := *vc
	evc.section = "onExit"
	sc := &refScope{params: psc.params, steps: map[string]int{}, outer: map[string]bool{}, exit: true}
	for name := range psc.steps {
		sc.outer[name] = true
	}
	for i, s := range q.Steps {
		path := index("onExit", i)
		switch {
		case s.Name == "":
			ps.add(field(path, "name"), "required")
			continue
		case !stepNameRE.MatchString(s.Name):
			ps.add(field(path, "name"), "invalid step name %q: use lowercase letters, digits and '-', starting with a letter, at most 63 characters", s.Name)
			continue
		}
		if j, dup := psc.steps[s.Name]; dup {
			ps.add(field(path, "name"), "step name %q is also steps[%d]; every step of a run, exit handlers included, needs a name of its own", s.Name, j)
			continue
		}
		if j, dup := sc.steps[s.Name]; dup {
			ps.add(field(path, "name"), "duplicate step name %q (also onExit[%d])", s.Name, j)
			continue
		}
		sc.steps[s.Name] = i
		if s.Kind == KindApproval {
			ps.add(field(path, "kind"), "an approval step cannot be an exit handler: exit handlers also run after a cancel, when nobody should have to decide anything")
		}
	}
	for i := range q.Steps {
		validateStep(q, i, &evc, sc, ps)
	}
	reportCycles(q, "onExit", ps)
}
