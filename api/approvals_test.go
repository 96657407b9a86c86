package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/runstate"
)

// The gateway passes the token's identity and role to the workflow and
// maps each refusal of its validator to the problem the API documents.
func TestDecideApprovalStep(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	approve := runsPath + "/" + runID1 + "/steps/gate/approve"
	reject := runsPath + "/" + runID1 + "/steps/gate/reject"

	wantStatus(t, h.do("POST", approve, h.editor, map[string]any{"comment": "lgtm"}), http.StatusOK)
	wantStatus(t, h.do("POST", reject, h.viewer, nil), http.StatusOK)
	if len(h.eng.decisions) != 2 {
		t.Fatalf("decisions %+v", h.eng.decisions)
	}
	d0, d1 := h.eng.decisions[0], h.eng.decisions[1]
	if d0 != (runstate.ApprovalRequest{Step: "gate", Approve: true, Comment: "lgtm", Approver: "ci", ApproverID: h.editorTok.ID, Role: "editor"}) {
		t.Errorf("approve sent %+v", d0)
	}
	if d1.Approve || d1.Role != "viewer" || d1.Comment != "" {
		t.Errorf("reject sent %+v", d1)
	}
	wantProblem(t, h.do("POST", approve, h.editor, map[string]any{"note": "x"}), http.StatusBadRequest, "invalid-request")

	for _, tc := range []struct {
		kind   error
		status int
		slug   string
	}{
		{runclient.ErrStepNotFound, http.StatusNotFound, "not-found"},
		{runclient.ErrStepNotWaiting, http.StatusConflict, "step-not-waiting"},
		{runclient.ErrApprovalForbidden, http.StatusForbidden, "forbidden"},
		{runclient.ErrCommentRequired, http.StatusUnprocessableEntity, "comment-required"},
	} {
		h.eng.decideErr = &runclient.RefusedError{Kind: tc.kind, Message: "because " + tc.slug}
		p := wantProblem(t, h.do("POST", approve, h.viewer, nil), tc.status, tc.slug)
		if !strings.Contains(*p.Detail, "because "+tc.slug) {
			t.Errorf("%s: detail %q does not carry the workflow's reason", tc.slug, *p.Detail)
		}
	}
	h.eng.decideErr = runclient.ErrRunNotFound
	wantProblem(t, h.do("POST", approve, h.editor, nil), http.StatusConflict, "run-finished")

	h.eng.decideErr = nil
	run.State = runstate.Succeeded
	h.cat.setRun(run)
	n := len(h.eng.decisions)
	wantProblem(t, h.do("POST", approve, h.editor, nil), http.StatusConflict, "run-finished")
	if len(h.eng.decisions) != n {
		t.Fatal("sent a decision to a finished run")
	}
}
