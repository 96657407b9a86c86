//go:build unix

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var pool Pool

func start(t testing.TB, dir string, spec Spec) *Process {
	t.Helper()
	var err error
	if spec.Path == "" {
		spec.Path, err = exec.LookPath(spec.Args[0])
		if err != nil {
			t.Fatal(err)
		}
	}
	spec.Dir, spec.Env = dir, []string{"PATH=" + os.Getenv("PATH")}
	p, err := pool.Start(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wait(t *testing.T, p *Process) Exited {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the step did not end")
	}
	ex, err := p.Result()
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// The step's output goes to the output file, its exit code and the time it
// ended to exit.json, and what it left in its group is killed.
func TestStepExitIsRecorded(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, Spec{Args: []string{"sh", "-c", `echo out; echo err >&2; sleep 30 & echo $! > child; exit 3`},
		Request: "r1", Execution: 1})
	ex := wait(t, p)
	if ex.ExitCode != 3 || ex.Request != "r1" || ex.Execution != 1 || ex.Orphaned != "" {
		t.Fatalf("exit %+v", ex)
	}
	if got, _ := os.ReadFile(OutputPath(dir)); string(got) != "out\nerr\n" {
		t.Fatalf("output %q", got)
	}
	st, err := ReadStarted(dir)
	if err != nil || st.Pid != p.Pid || st.Supervisor == 0 || st.StartedAt.After(ex.FinishedAt) {
		t.Fatalf("started %+v, %v", st, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "child"))
	var child int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &child); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(child, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the step's background process %d outlived it", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSignalledStep(t *testing.T) {
	p := start(t, t.TempDir(), Spec{Args: []string{"sh", "-c", `kill -9 $$`}})
	if ex := wait(t, p); ex.ExitCode != 137 || ex.Signal != "killed" {
		t.Fatalf("exit %+v", ex)
	}
}

func TestProgramThatCannotStart(t *testing.T) {
	dir := t.TempDir()
	_, err := pool.Start(dir, Spec{Path: filepath.Join(dir, "missing"), Args: []string{"missing"}, OrphanAfter: time.Minute})
	var se *StartError
	if !errors.As(err, &se) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("err %v", err)
	}
}

// A detached step whose lease nobody renews is stopped and recorded as an
// orphan; one whose lease is renewed runs to its end; a later watcher
// adopts it from started.json.
func TestOrphanIsStoppedRenewedStepIsNot(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, Spec{Args: []string{"sleep", "30"}, OrphanAfter: 300 * time.Millisecond, Grace: 100 * time.Millisecond})
	ex := wait(t, p)
	if ex.Orphaned == "" || ex.Signal != "terminated" {
		t.Fatalf("exit %+v", ex)
	}

	dir = t.TempDir()
	if err := Renew(dir); err != nil {
		t.Fatal(err)
	}
	p = start(t, dir, Spec{Args: []string{"sh", "-c", "sleep 1; exit 4"}, OrphanAfter: 300 * time.Millisecond, Request: "r", Execution: 2})
	if !Alive(p.Started) {
		t.Fatal("a running supervisor is not alive")
	}
	other := p.Started
	other.SupervisorStart++
	if Alive(other) {
		t.Fatal("a process that started at another time passes for the supervisor")
	}
	st, err := ReadStarted(dir)
	if err != nil || st.Attached {
		t.Fatalf("started %+v, %v", st, err)
	}
	adopted := Adopt(dir, st, 20*time.Millisecond)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_ = Renew(dir)
			}
		}
	}()
	ex = wait(t, adopted)
	close(stop)
	if ex.ExitCode != 4 || ex.Orphaned != "" || ex.Execution != 2 {
		t.Fatalf("exit %+v", ex)
	}
	wait(t, p)
	// The supervisor went back to the pool and runs the next step.
	next := start(t, t.TempDir(), Spec{Args: []string{"true"}, OrphanAfter: time.Minute})
	if next.Supervisor != st.Supervisor {
		t.Fatalf("the next step got supervisor %d, not the idle %d", next.Supervisor, st.Supervisor)
	}
	wait(t, next)
}

// BenchmarkTrue is the supervisor's cost per step: from Start to the
// recorded exit of `true`, against starting `true` directly.
func BenchmarkTrue(b *testing.B) {
	path, _ := exec.LookPath("true")
	b.Run("attached", func(b *testing.B) {
		dir := b.TempDir()
		for b.Loop() {
			p := start(b, dir, Spec{Path: path, Args: []string{"true"}})
			<-p.Done()
		}
	})
	b.Run("supervised", func(b *testing.B) {
		dir := b.TempDir()
		for b.Loop() {
			p := start(b, dir, Spec{Path: path, Args: []string{"true"}, OrphanAfter: time.Minute})
			<-p.Done()
			if _, err := p.Result(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command(path).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
