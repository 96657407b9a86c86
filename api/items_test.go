package api

import (
	"net/http"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// A small forEach's items are paged out of the run's status with the
// same shape as a wide step's (which integration/wide_test.go pages from
// Postgres): in index order, optionally of one state, with log links.
func TestListStepItemsOfASmallForEach(t *testing.T) {
	h := newHarness(t)
	var items []runstate.StepStatus
	for k := 0; k < 7; k++ {
		state := runstate.StepSucceeded
		if k%3 == 1 {
			state = runstate.StepFailed
		}
		items = append(items, runstate.StepStatus{Name: "fan", Kind: "container", State: state, Item: float64(k),
			Attempts: []runstate.Attempt{{Number: 1, State: state}}})
	}
	h.cat.setRun(catalog.Run{
		ID: runID1, Project: "alpha", Pipeline: "train", Version: 1, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Failed, CreatedAt: t0, UpdatedAt: t0,
		Status: &runstate.Status{RunID: runID1, Project: "alpha", Workflow: runstate.PipelineWorkflowName, State: runstate.Failed, Seq: 3,
			Steps: []runstate.StepStatus{{Name: "fan", Kind: "container", State: runstate.StepFailed, Items: items}, {Name: "one", Kind: "container", State: runstate.StepSkipped}}},
	})
	base := runsPath + "/" + runID1 + "/steps/fan/items"

	var got []gen.StepItem
	path := base + "?state=FAILED&pageSize=1"
	for pages := 0; pages < 10; pages++ {
		r := h.do("GET", path, h.viewer, nil)
		wantStatus(t, r, http.StatusOK)
		var page gen.StepItemPage
		r.json(t, &page)
		got = append(got, page.Items...)
		if page.NextPageToken == nil {
			break
		}
		path = base + "?state=FAILED&pageSize=1&pageToken=" + *page.NextPageToken
	}
	if len(got) != 2 || got[0].Index != 1 || got[1].Index != 4 || got[1].State != gen.StepStateFAILED {
		t.Fatalf("failed items: %+v", got)
	}
	if a := *got[1].Attempts; len(a) != 1 || a[0].LogUrl == nil || *a[0].LogUrl != runsPath+"/"+runID1+"/steps/fan/logs?attempt=1&item=4" {
		t.Fatalf("attempts of item 4: %+v", a)
	}
	r := h.do("GET", base, h.viewer, nil)
	var all gen.StepItemPage
	r.json(t, &all)
	if len(all.Items) != 7 || all.Total == nil || *all.Total != 7 {
		t.Fatalf("all items: %s", r.body)
	}
	wantProblem(t, h.do("GET", runsPath+"/"+runID1+"/steps/ghost/items", h.viewer, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", base+"?pageToken=x", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	wantProblem(t, h.do("GET", base+"?pageSize=1001", h.viewer, nil), http.StatusBadRequest, "invalid-request")
}
