//go:build linux

package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local/supervisor"
)

// A second execution of an attempt whose step still runs (what Temporal
// delivers after the first worker was lost) adopts the step: the command
// runs once, the second execution returns its result and outputs, and its
// log continues where the first stopped, saying so.
func TestRunningStepIsAdoptedNotRunAgain(t *testing.T) {
	first := newHarness(t)
	count := filepath.Join(t.TempDir(), "count")
	req := request("sh", "-c", `echo ran >> "$1"; echo "before $ATELIER_EXECUTION"; sleep 1.5; echo after; printf '{"n": 7}' > "$ATELIER_OUTPUTS"`, "sh", count)
	done := make(chan error, 1)
	go func() {
		_, err := first.run(req)
		done <- err
	}()
	first.firstBeat(10 * time.Second)
	waitFor(t, func() bool { return strings.Contains(first.sink.log(t, key(req)), "before 1") })

	second := newHarness(t, WithDataDir(first.data)) // the next worker, same data directory
	res, err := second.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran\n" {
		t.Fatalf("the command ran %q", b)
	}
	if res.ExitCode != 0 || res.Outputs["n"] != 7.0 {
		t.Fatalf("adopted result %+v", res)
	}
	log := second.sink.log(t, key(req))
	if !strings.Contains(log, "adopted the step's process") || !strings.Contains(log, "after\n") || strings.Count(log, "before 1") != 1 {
		t.Fatalf("adopting worker's log %q", log)
	}
	if hb := second.firstBeat(time.Second); hb.Execution != 1 || hb.Supervisor == 0 {
		t.Fatalf("adopting heartbeat %+v: same execution, supervised", hb)
	}
}

// A step that ended while no worker watched it (its exit recorded, its
// result not: the worker died before outputs were read) is finished by
// the next execution without running the command again, a failure too.
func TestEndedStepIsAdoptedFromItsExitRecord(t *testing.T) {
	h := newHarness(t)
	count := filepath.Join(t.TempDir(), "count")
	req := request("sh", "-c", `echo ran >> "$1"; echo oops; exit 5`, "sh", count)
	_, err := h.run(req)
	appError(t, err, activities.ErrTypeStepFailed)
	attemptDir := filepath.Join(h.data, "runs", "run-1", "train", "attempt-1")
	if err := os.Remove(filepath.Join(attemptDir, "result.json")); err != nil {
		t.Fatal(err)
	}
	_, err = newHarness(t, WithDataDir(h.data)).run(req)
	if a := appError(t, err, activities.ErrTypeStepFailed); !strings.Contains(a.Error(), "oops") {
		t.Fatalf("adopted failure %v does not quote the step's last lines", a)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran\n" {
		t.Fatalf("the command ran %q", b)
	}
}

// A step stopped as an orphan (no worker renewed its lease in time) cannot
// be adopted: the next execution runs it again, visibly, as execution 2
// in a fresh work directory.
func TestOrphanedStepIsRunAgainVisibly(t *testing.T) {
	h := newHarness(t)
	count := filepath.Join(t.TempDir(), "count")
	req := request("sh", "-c", `echo "ran $ATELIER_EXECUTION" >> "$1"; ls`, "sh", count)
	if _, err := h.run(req); err != nil {
		t.Fatal(err)
	}
	attemptDir := filepath.Join(h.data, "runs", "run-1", "train", "attempt-1")
	// What an orphan's supervisor records; the result never was.
	ex, err := supervisor.ReadExited(attemptDir)
	if err != nil {
		t.Fatal(err)
	}
	ex.Orphaned = "no worker watched the step for 1m0s"
	if err := supervisor.WriteJSON(filepath.Join(attemptDir, "exit.json"), ex, false); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(attemptDir, "result.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(attemptDir, "work", "leftover"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := newHarness(t, WithDataDir(h.data))
	res, err := second.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Execution != 2 {
		t.Fatalf("result of execution %d, want 2", res.Execution)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran 1\nran 2\n" {
		t.Fatalf("runs %q", b)
	}
	log := second.sink.log(t, key(req))
	if !strings.Contains(log, "re-running step (execution 2: its process was stopped: no worker watched the step") || strings.Contains(log, "leftover") {
		t.Fatalf("log %q", log)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
