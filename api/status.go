package api

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// liveStatus prefers the workflow's own answer while the run is open (the
// mirror lags by a write), and falls back to the mirrored status when the
// query fails or times out, e.g. no worker is polling.
func (s *server) liveStatus(ctx context.Context, run catalog.Run) runstate.Status {
	best := run.Status
	if !run.State.Terminal() {
		qctx, cancel := context.WithTimeout(ctx, s.queryTimeout)
		st, err := s.eng.QueryStatus(qctx, run.ID)
		cancel()
		switch {
		case (errors.Is(err, runclient.ErrRunClosed) || errors.Is(err, runclient.ErrRunNotFound)) && s.conv != nil:
			// Ended without mirroring its end (terminated, timed out, gone).
			if cst, ok, cerr := s.conv.Converge(ctx, run); cerr != nil {
				s.log.Warn("cannot converge a closed run; serving mirrored status", zap.String("run", run.ID), zap.Error(cerr))
			} else if ok {
				best = &cst
			}
		case err != nil:
			s.log.Debug("status query failed; serving mirrored status", zap.String("run", run.ID), zap.Error(err))
		case best == nil || st.Seq >= best.Seq:
			best = &st
		}
	}
	var out runstate.Status
	if best != nil {
		out = *best
	} else {
		// Not started yet, or started but never mirrored: the row is all
		// there is.
		out = runstate.Status{
			RunID: run.ID, Project: run.Project, Pipeline: run.Pipeline, Version: run.Version,
			Workflow: run.Workflow, State: run.State,
		}
	}
	out.Steps = withLogURLs(s.runPath(run), out.Steps, "")
	return out
}

// withLogURLs copies steps, filling the log link of each attempt, so
// clients need not build URLs themselves: the gateway serves every
// attempt's log (a local one's written by the runner, a Kubernetes one's
// by the cluster worker, which follows a Job's container and copies the
// others' logs when they end).
func withLogURLs(runPath string, steps []runstate.StepStatus, parent string) []runstate.StepStatus {
	out := make([]runstate.StepStatus, len(steps))
	for i, st := range steps {
		name, item := st.Name, -1
		if parent != "" {
			name, item = parent, i // forEach entries: the item index is their position
		}
		st.Attempts = append([]runstate.Attempt(nil), st.Attempts...)
		for j := range st.Attempts {
			st.Attempts[j].LogURL = logURL(runPath, name, item, st.Attempts[j].Number)
		}
		if st.Items != nil {
			st.Items = withLogURLs(runPath, st.Items, st.Name)
		}
		out[i] = st
	}
	return out
}

func logURL(runPath, step string, item, attempt int) string {
	u := fmt.Sprintf("%s/steps/%s/logs?attempt=%d", runPath, url.PathEscape(step), attempt)
	if item >= 0 {
		u += "&item=" + strconv.Itoa(item)
	}
	return u
}

func (s *server) runPath(run catalog.Run) string {
	return s.link("/v1/projects/%s/runs/%s", run.Project, run.ID)
}

// link prefixes the public URL (empty: links stay relative).
func (s *server) link(format string, args ...any) string {
	return s.publicURL + fmt.Sprintf(format, args...)
}
