package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/runstate"
)

// maxDetailRows bounds the step table shown in the Temporal UI: the
// details are rendered on every status change, so a 1,000-step run must
// not pay for 1,000 rows each time.
const maxDetailRows = 40

// publishDetails keeps the run's Temporal UI details (the "current
// details" the UI shows on the workflow page, and `temporal workflow
// metadata`) a Markdown table of the steps and their states, so the
// Temporal UI reads as the pipeline. It renders only when the status
// changed since the last call. SetCurrentDetails is answered from memory by
// the SDK: it adds no command, so recorded histories replay unchanged.
//
// It is called where the run already wakes up (the pipeline's scheduling
// loop, the end of every attempt, finish), not from a coroutine of its
// own: a coroutine per run costs every workflow task a visit (measured:
// about 1 ms per step with bench/overhead).
func (r *Run) publishDetails() {
	if r.detailsSeq == r.status.Seq && r.detailsSeq != 0 {
		return
	}
	r.detailsSeq = r.status.Seq
	workflow.SetCurrentDetails(r.root, r.details())
}

// details renders the status as Markdown: the run's state, then a row per
// step (state, attempts, forEach progress, message).
func (r *Run) details() string {
	var b strings.Builder
	name := r.status.Pipeline
	if name == "" {
		name = r.status.Workflow
	}
	b.WriteString(fmt.Sprintf("**%s** · project `%s` · **%s**", name, r.status.Project, r.status.State))
	if p := r.status.ParentRun; p != "" {
		b.WriteString(fmt.Sprintf(" · child of run [%s](/namespaces/%s/workflows/%s), step `%s`", p, r.namespace(), p, r.status.ParentStep))
	}
	if r.status.Error != "" {
		b.WriteString(fmt.Sprintf("\n\n> %s", mdCell(r.status.Error)))
	}
	b.WriteString("\n\n| step | kind | state | attempts | items | message |\n|---|---|---|---|---|---|\n")
	for i, st := range r.steps {
		if i == maxDetailRows {
			b.WriteString(fmt.Sprintf("| … %d more steps (see the `status` query or REST) | | | | | |\n", len(r.steps)-maxDetailRows))
			break
		}
		items := ""
		if n := len(st.Items); n > 0 {
			done := 0
			for j := range st.Items {
				if st.Items[j].State == runstate.StepSucceeded || st.Items[j].State == runstate.StepCached {
					done++
				}
			}
			items = fmt.Sprintf("%d/%d", done, n)
		}
		if w := st.Wide; w != nil {
			items = fmt.Sprintf("%d/%d (%d failed)", w.Counts.Succeeded+w.Counts.Cached, w.Items, w.Counts.Failed)
		}
		msg := st.Error
		if msg == "" {
			msg = st.Message
		}
		msg = mdCell(msg)
		if n := len(st.Attempts); n > 0 && st.Attempts[n-1].ChildRun != nil {
			// A pipeline step links to its child run's page in this UI.
			c := st.Attempts[n-1].ChildRun
			link := fmt.Sprintf("child run [%s](/namespaces/%s/workflows/%s) (%s v%d)", c.RunID, r.namespace(), c.RunID, c.Pipeline, c.Version)
			msg = strings.TrimPrefix(msg+" · "+link, " · ")
		}
		kind := st.Kind
		if st.OnExit {
			kind += " (on exit)"
		}
		b.WriteString(fmt.Sprintf("| %s | %s | %s | %d | %s | %s |\n", mdCell(st.Name), kind, st.State, len(st.Attempts), items, msg))
	}
	return b.String()
}

// namespace is the run's Temporal namespace, for links within the UI.
func (r *Run) namespace() string { return workflow.GetInfo(r.root).Namespace }

// mdCell keeps a value on one table row: no newlines or pipes, at most
// 120 characters.
func mdCell(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "\\|")
	if len(s) > 120 {
		s = s[:117] + "…"
	}
	return s
}

// withAttemptSummary names the step (and item) and attempt on the
// activity, so the Temporal UI's event history and timeline read as the
// pipeline ("train · attempt 2") instead of the activity type alone.
// Summaries are user metadata, not compared on replay.
func withAttemptSummary(ctx workflow.Context, step string, item *int, attempt int) workflow.Context {
	opts := workflow.GetActivityOptions(ctx)
	if item != nil {
		opts.Summary = fmt.Sprintf("%s[%d] · attempt %d", step, *item, attempt)
	} else {
		opts.Summary = fmt.Sprintf("%s · attempt %d", step, attempt)
	}
	return workflow.WithActivityOptions(ctx, opts)
}
