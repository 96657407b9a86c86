package api

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/workflows"
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
	run.Status.Steps = []workflows.StepStatus{{Name: "prep", Kind: "container", State: workflows.StepSucceeded,
		Attempts: []workflows.Attempt{{Number: 1, State: workflows.StepSucceeded, FinishedAt: &now}}}}
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
