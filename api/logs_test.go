package api

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/runstate"
)

func TestLogPaging(t *testing.T) {
	h := newHarness(t)
	runningRun(h)
	key := activities.LogKey{RunID: runID1, Step: "prep", Item: -1, Attempt: 1}
	h.cat.appendLog(key, "hello world\nsecond line\n")
	base := runsPath + "/" + runID1 + "/steps/prep/logs"

	// Offset 3 falls inside the first 4-byte chunk: it is trimmed.
	r := h.do("GET", base+"?offset=3", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	if string(r.body) != "lo world\nsecond line\n" || r.Header.Get(hdrNextOffset) != "24" {
		t.Fatalf("body %q next %q", r.body, r.Header.Get(hdrNextOffset))
	}
	if r.Header.Get(hdrLogComplete) != "false" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("headers %v", r.Header)
	}
	// From the next offset: nothing new yet.
	r = h.do("GET", base+"?offset=24&attempt=1", h.viewer, nil)
	if len(r.body) != 0 || r.Header.Get(hdrNextOffset) != "24" {
		t.Fatalf("body %q next %q", r.body, r.Header.Get(hdrNextOffset))
	}

	wantProblem(t, h.do("GET", runsPath+"/"+runID1+"/steps/ghost/logs", h.viewer, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", base+"?offset=-1", h.viewer, nil), http.StatusBadRequest, "invalid-request")
}

func TestLogPagesFollowNextOffset(t *testing.T) {
	h := newHarness(t, withLogPage(16))
	runningRun(h)
	key := activities.LogKey{RunID: runID1, Step: "prep", Item: -1, Attempt: 1}
	h.cat.appendLog(key, strings.Repeat("0123456789", 10))
	base := runsPath + "/" + runID1 + "/steps/prep/logs"
	var all strings.Builder
	next := "0"
	for i := 0; i < 20; i++ {
		r := h.do("GET", base+"?offset="+next, h.viewer, nil)
		if len(r.body) > 16 {
			t.Fatalf("page of %d bytes", len(r.body))
		}
		all.Write(r.body)
		if r.Header.Get(hdrNextOffset) == next {
			break
		}
		next = r.Header.Get(hdrNextOffset)
	}
	if all.String() != strings.Repeat("0123456789", 10) {
		t.Fatalf("reassembled %q", all.String())
	}
}

func TestLogFollow(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	key := activities.LogKey{RunID: runID1, Step: "prep", Item: -1, Attempt: 1}
	h.cat.appendLog(key, "line 1\n")

	req, _ := http.NewRequest("GET", h.srv.URL+runsPath+"/"+runID1+"/steps/prep/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+h.viewer)
	res, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	if line, _ := rd.ReadString('\n'); line != "line 1\n" {
		t.Fatalf("first line %q", line)
	}
	h.cat.appendLog(key, "line 2\n")
	if line, _ := rd.ReadString('\n'); line != "line 2\n" {
		t.Fatalf("second line %q", line)
	}
	// The attempt ends: the stream delivers the tail and closes.
	h.cat.appendLog(key, "done\n")
	now := t0
	// A new status value: the gateway's poller may be reading the old one.
	st := *run.Status
	st.Steps = []runstate.StepStatus{{Name: "prep", Kind: "container", State: runstate.StepSucceeded,
		Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepSucceeded, FinishedAt: &now}}}}
	run.Status = &st
	h.cat.setRun(run)
	done := make(chan string)
	go func() {
		rest, _ := io.ReadAll(rd)
		done <- string(rest)
	}()
	select {
	case rest := <-done:
		if rest != "done\n" {
			t.Fatalf("tail %q", rest)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end with the attempt")
	}
	if res.Trailer.Get(hdrNextOffset) != "19" || res.Trailer.Get(hdrLogComplete) != "true" {
		t.Fatalf("trailers %v", res.Trailer)
	}
}

func TestForEachItemLogs(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	run.Status.Steps = []runstate.StepStatus{{Name: "shard", Kind: "container", State: runstate.StepRunning,
		Items: []runstate.StepStatus{
			{Name: "shard[0]", State: runstate.StepSucceeded, Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepSucceeded}}},
			{Name: "shard[1]", State: runstate.StepRunning, Attempts: []runstate.Attempt{
				{Number: 1, State: runstate.StepFailed}, {Number: 2, State: runstate.StepRunning}}},
		}}}
	h.cat.setRun(run)
	h.cat.appendLog(activities.LogKey{RunID: runID1, Step: "shard", Item: 1, Attempt: 2}, "item one, second try")
	base := runsPath + "/" + runID1 + "/steps/shard/logs"

	// Default attempt: the item's newest.
	r := h.do("GET", base+"?item=1", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	if string(r.body) != "item one, second try" {
		t.Fatalf("%q", r.body)
	}
	// Attempt 1 of item 1 is over; item 0 is over.
	if h.do("GET", base+"?item=1&attempt=1", h.viewer, nil).Header.Get(hdrLogComplete) != "true" {
		t.Error("finished attempt not complete")
	}
	var got gen.Run
	h.do("GET", runsPath+"/"+runID1, h.viewer, nil).json(t, &got)
	wantItems := []gen.StepStatus{
		{Name: "shard[0]", State: gen.StepStateSUCCEEDED, Attempts: &[]gen.Attempt{
			{Number: 1, State: gen.StepStateSUCCEEDED, LogUrl: ptr(base + "?attempt=1&item=0")}}},
		{Name: "shard[1]", State: gen.StepStateRUNNING, Attempts: &[]gen.Attempt{
			{Number: 1, State: gen.StepStateFAILED, LogUrl: ptr(base + "?attempt=1&item=1")},
			{Number: 2, State: gen.StepStateRUNNING, LogUrl: ptr(base + "?attempt=2&item=1")}}},
	}
	if diff := cmp.Diff(&wantItems, got.Status.Steps[0].Items); diff != "" {
		t.Fatalf("item log URLs (-want +got):\n%s", diff)
	}
	wantProblem(t, h.do("GET", base+"?item=0&attempt=5", h.viewer, nil), http.StatusNotFound, "not-found")
}
