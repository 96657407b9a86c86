package workflows

import (
	"encoding/json"
	"fmt"
	"sort"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/runstate"
)

// Temporal's hard limits decide what one run may do: past them a workflow
// is terminated by the server (history) or cannot schedule its next
// command (payloads, pending activities), which looks like a run that
// hangs. Static checks in pipeline.Validate refuse specs that cannot fit; these
// run-time guards keep every other run (retries, forEach lists computed at
// run time, large outputs) inside them, failing a step with a message that
// names the limit instead.
const (
	// MaxInflightAttempts bounds the step attempts one run has in flight
	// (Temporal: 2,000 pending activities per workflow, and the run's own
	// bookkeeping needs a few). More are queued, not refused.
	MaxInflightAttempts = 1000
	// historyEventGuard and historyBytesGuard stop a run from starting new
	// attempts well before Temporal's 51,200 events / 50 MB, leaving room
	// for the attempts in flight to finish and for cleanup and the final
	// mirror.
	historyEventGuard = 45_000
	historyBytesGuard = 40 << 20
	// maxStatusBytes bounds the status served by the query and written by
	// the mirror activity (Temporal payloads: 2 MB).
	maxStatusBytes = 1 << 20
	// OutputsOmittedWarning is in a status's warnings when outputs were
	// dropped to fit maxStatusBytes (a retry cannot reuse them then).
	OutputsOmittedWarning = "omitted from this status"
)

// errHistoryLimit fails an attempt that would start past the history guard.
func historyLimitError(ctx workflow.Context) string {
	info := workflow.GetInfo(ctx)
	n, size := info.GetCurrentHistoryLength(), info.GetCurrentHistorySize()
	if n < historyEventGuard && size < historyBytesGuard {
		return ""
	}
	return fmt.Sprintf("not started: the run's history has %d events / %d MiB, close to Temporal's limit of 51,200 events / 50 MB per run; use fewer forEach items, retries or outputs per run, or split the pipeline", n, size>>20)
}

// boundStatus keeps a status snapshot under maxStatusBytes: a finished
// forEach step's outputs are the list of its items' outputs, so items do
// not repeat them; if it is still too big, outputs are dropped, largest
// first, with a warning (the steps' outputs stay available to expressions:
// they live in workflow memory, not in this snapshot).
func boundStatus(s *runstate.Status) {
	for i := range s.Steps {
		if s.Steps[i].Outputs != nil {
			for k := range s.Steps[i].Items {
				s.Steps[i].Items[k].Outputs = nil
			}
		}
	}
	b, err := json.Marshal(s)
	if err != nil || len(b) <= maxStatusBytes {
		return
	}
	type sized struct {
		o    *runstate.StepStatus
		size int
	}
	var all []sized
	var collect func(st *runstate.StepStatus)
	collect = func(st *runstate.StepStatus) {
		if st.Outputs != nil {
			ob, _ := json.Marshal(st.Outputs)
			all = append(all, sized{st, len(ob)})
		}
		for k := range st.Items {
			collect(&st.Items[k])
		}
	}
	for i := range s.Steps {
		collect(&s.Steps[i])
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].size > all[b].size })
	total, dropped := len(b), 0
	for _, x := range all {
		if total <= maxStatusBytes {
			break
		}
		x.o.Outputs = nil
		total -= x.size
		dropped++
	}
	s.Warnings = append(s.Warnings, fmt.Sprintf("outputs of %d step(s) or item(s) %s: it would exceed %d KiB (Temporal payloads are limited to 2 MB)", dropped, OutputsOmittedWarning, maxStatusBytes>>10))
}
