//go:build unix

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local/supervisor"
)

// memSink is an in-memory LogSink with the Postgres store's semantics: the
// first chunk stored at an offset wins, later ones at that offset are
// ignored. failEvery makes every n-th call fail after storing, like a commit
// whose acknowledgement is lost, so the runner resends.
type memSink struct {
	mu        sync.Mutex
	chunks    map[activities.LogKey]map[int64][]byte
	calls     []call
	failEvery int
	n         int
	failAll   bool
}

type call struct {
	key    activities.LogKey
	offset int64
	data   string
}

func newMemSink() *memSink { return &memSink{chunks: map[activities.LogKey]map[int64][]byte{}} }

func (s *memSink) AppendLog(_ context.Context, key activities.LogKey, offset int64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call{key, offset, string(data)})
	if s.failAll {
		return errors.New("database down")
	}
	if s.chunks[key] == nil {
		s.chunks[key] = map[int64][]byte{}
	}
	if _, ok := s.chunks[key][offset]; !ok {
		s.chunks[key][offset] = bytes.Clone(data)
	}
	s.n++
	if s.failEvery > 0 && s.n%s.failEvery == 0 {
		return errors.New("ack lost")
	}
	return nil
}

// log reads the log back the way the gateway does, chunk after chunk, and
// fails the test on a gap or an overlap.
func (s *memSink) log(t *testing.T, key activities.LogKey) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for len(b) < 1<<30 {
		c, ok := s.chunks[key][int64(len(b))]
		if !ok {
			break
		}
		b = append(b, c...)
	}
	if len(b) < 1<<30 && len(s.chunks[key]) > 0 {
		n := 0
		for off := int64(0); off < int64(len(b)); off += int64(len(s.chunks[key][off])) {
			n++
		}
		if n != len(s.chunks[key]) {
			t.Fatalf("log has %d chunks but only %d tile it from offset 0: gap or overlap", len(s.chunks[key]), n)
		}
	}
	return string(b)
}

type harness struct {
	t      *testing.T
	env    *testsuite.TestActivityEnvironment
	sink   *memSink
	runner *Runner
	data   string
	mu     sync.Mutex
	beats  []Heartbeat
	cancel context.CancelFunc
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, sink: newMemSink(), data: t.TempDir()}
	var suite testsuite.WorkflowTestSuite
	h.env = suite.NewTestActivityEnvironment()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	t.Cleanup(cancel)
	// Cancelling the worker's background context is how a test can cancel a
	// running activity: the activity context derives from it.
	h.env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})
	h.env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var hb Heartbeat
		if err := details.Get(&hb); err == nil {
			h.mu.Lock()
			h.beats = append(h.beats, hb)
			h.mu.Unlock()
		}
	})
	opts = append([]Option{WithDataDir(h.data), WithHeartbeatInterval(50 * time.Millisecond)}, opts...)
	h.runner = New(h.sink, opts...)
	h.runner.flushInterval = 20 * time.Millisecond
	h.runner.flushDeadline = 500 * time.Millisecond
	h.runner.Register(h.env)
	return h
}

func (h *harness) run(req activities.ContainerRequest) (activities.ContainerResult, error) {
	h.t.Helper()
	v, err := h.env.ExecuteActivity(activities.RunContainerName, req)
	var res activities.ContainerResult
	if err == nil {
		if gerr := v.Get(&res); gerr != nil {
			h.t.Fatal(gerr)
		}
	}
	return res, err
}

func (h *harness) firstBeat(timeout time.Duration) Heartbeat {
	h.t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		if len(h.beats) > 0 {
			hb := h.beats[0]
			h.mu.Unlock()
			return hb
		}
		h.mu.Unlock()
	}
	h.t.Fatal("no heartbeat")
	return Heartbeat{}
}

func request(cmd ...string) activities.ContainerRequest {
	return activities.ContainerRequest{Project: "proj", RunID: "run-1", Step: "train", Attempt: 1, Command: cmd}
}

func key(req activities.ContainerRequest) activities.LogKey {
	k := activities.LogKey{RunID: req.RunID, Step: req.Step, Item: -1, Attempt: req.Attempt}
	if req.Item != nil {
		k.Item = *req.Item
	}
	return k
}

func appError(t *testing.T, err error, wantType string) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("want %s application error, got %v", wantType, err)
	}
	if appErr.Type() != wantType {
		t.Fatalf("want type %s, got %s: %v", wantType, appErr.Type(), appErr)
	}
	if !appErr.NonRetryable() {
		t.Fatalf("%s error must be non-retryable", wantType)
	}
	return appErr
}

// groupGone waits until kill(-pgid, 0) fails with ESRCH. Waiting, because
// killed processes linger as zombies until their parent reaps them.
func groupGone(t *testing.T, pgid int, within time.Duration) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Fatalf("process group %d still exists: kill(-pgid, 0) = %v", pgid, err)
}

func TestSuccessWithOutputs(t *testing.T) {
	h := newHarness(t)
	item := 2
	req := request("sh", "-c", `echo "hello $1"; printf '{"accuracy": 0.93, "dir": "%s"}' "$PWD" > "$ATELIER_OUTPUTS"`, "sh", "world")
	req.Item = &item
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Outputs["accuracy"] != 0.93 {
		t.Fatalf("result %+v", res)
	}
	wantDir := filepath.Join(h.data, "runs", "run-1", "train-2", "attempt-1", "work")
	if res.Outputs["dir"] != wantDir {
		t.Fatalf("ran in %v, want %s", res.Outputs["dir"], wantDir)
	}
	if res.StartedAt.IsZero() || res.FinishedAt.Before(res.StartedAt) {
		t.Fatalf("bad times %v %v", res.StartedAt, res.FinishedAt)
	}
	if got := h.sink.log(t, key(req)); got != "hello world\n" {
		t.Fatalf("shipped log %q", got)
	}
	local, err := os.ReadFile(filepath.Join(h.data, "runs", "run-1", "train-2", "attempt-1", "log"))
	if err != nil || string(local) != "hello world\n" {
		t.Fatalf("local log %q, %v", local, err)
	}
}

func TestClockAndWorkingDir(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	h := newHarness(t, WithClock(func() time.Time { return at }))
	dir := t.TempDir()
	req := request("sh", "-c", `printf '{"pwd": "%s"}' "$PWD" > "$ATELIER_OUTPUTS"`)
	req.WorkingDir = dir
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.StartedAt.Equal(at) || !res.FinishedAt.Equal(at) {
		t.Fatalf("clock not used: %v %v", res.StartedAt, res.FinishedAt)
	}
	if res.Outputs["pwd"] != dir {
		t.Fatalf("pwd %v, want %s", res.Outputs["pwd"], dir)
	}

	req.WorkingDir = filepath.Join(dir, "missing")
	_, err = h.run(req)
	if e := appError(t, err, activities.ErrTypeInvalidStep); !strings.Contains(e.Error(), "does not exist") {
		t.Fatalf("message: %v", e)
	}
}

func TestNonZeroExit(t *testing.T) {
	h := newHarness(t)
	req := request("sh", "-c", `for i in 1 2 3 4 5 6 7; do echo "line $i"; done; echo boom >&2; exit 3`)
	_, err := h.run(req)
	e := appError(t, err, activities.ErrTypeStepFailed)
	msg := e.Error()
	if !strings.Contains(msg, "command exited with code 3") || !strings.Contains(msg, "boom") ||
		!strings.Contains(msg, "line 4") || strings.Contains(msg, "line 3") || len(msg) > 1100 {
		t.Fatalf("message %q", msg)
	}
	var res activities.ContainerResult
	if err := e.Details(&res); err != nil || res.ExitCode != 3 {
		t.Fatalf("details %+v, %v", res, err)
	}
}

func TestKilledBySignal(t *testing.T) {
	h := newHarness(t)
	_, err := h.run(request("sh", "-c", `kill -9 $$`))
	e := appError(t, err, activities.ErrTypeStepFailed)
	var res activities.ContainerResult
	if err := e.Details(&res); err != nil || res.ExitCode != 137 || !strings.Contains(e.Error(), "killed") {
		t.Fatalf("details %+v, %v: %v", res, err, e)
	}
}

func TestMissingProgram(t *testing.T) {
	h := newHarness(t)
	req := request("atelier-no-such-program", "--flag")
	req.Image = "ghcr.io/x/y:1"
	_, err := h.run(req)
	msg := appError(t, err, activities.ErrTypeInvalidStep).Error()
	for _, want := range []string{`"atelier-no-such-program"`, "local process", "installed on the worker's machine"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message %q lacks %q", msg, want)
		}
	}

	_, err = h.run(request())
	appError(t, err, activities.ErrTypeInvalidStep)

	bad := request("true")
	bad.Step = "../escape"
	_, err = h.run(bad)
	appError(t, err, activities.ErrTypeInvalidStep)
}

func TestBadOutputs(t *testing.T) {
	for _, tc := range []struct{ name, script, want string }{
		{"array", `echo '[1,2]' > "$ATELIER_OUTPUTS"`, "must hold a JSON object, not an array"},
		{"null", `echo null > "$ATELIER_OUTPUTS"`, "not null"},
		{"invalid", `echo '{"a": ' > "$ATELIER_OUTPUTS"`, "not valid JSON"},
		{"empty", `: > "$ATELIER_OUTPUTS"`, "is empty"},
		{"big", `head -c 70000 /dev/zero | tr '\0' ' ' > "$ATELIER_OUTPUTS"; echo '{}' >> "$ATELIER_OUTPUTS"`, "64 KiB limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			_, err := h.run(request("sh", "-c", tc.script))
			if msg := appError(t, err, activities.ErrTypeBadOutputs).Error(); !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q lacks %q", msg, tc.want)
			}
		})
	}
}

// A step's metrics file (ATELIER_METRICS, next to its outputs) comes back
// in its result; a bad one fails the step like bad outputs, naming every
// problem and its log saying so.
func TestMetricsFile(t *testing.T) {
	h := newHarness(t)
	res, err := h.run(request("sh", "-c", `echo '{"accuracy": 0.93, "loss": [0.9, 0.5]}' > "$ATELIER_METRICS"`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics == nil || res.Metrics.Scalars["accuracy"] != 0.93 || len(res.Metrics.Series["loss"]) != 2 {
		t.Fatalf("metrics %+v", res.Metrics)
	}
	if res, err := h.run(request("true")); err != nil || res.Metrics != nil {
		t.Fatalf("a step without metrics: %+v, %v", res.Metrics, err)
	}
	req := request("sh", "-c", `echo '{"acc": "high", "loss": [1, null]}' > "$ATELIER_METRICS"`)
	_, err = h.run(req)
	msg := appError(t, err, activities.ErrTypeBadOutputs).Error()
	for _, want := range []string{"metrics file (ATELIER_METRICS) is invalid", "acc: must be a number, not a string", "loss[1]: must be a number, not null"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if log := h.sink.log(t, key(req)); !strings.Contains(log, "loss[1]") {
		t.Errorf("log %q", log)
	}
}

func TestTimeoutKillsWholeGroup(t *testing.T) {
	h := newHarness(t, WithGracePeriod(200*time.Millisecond))
	req := request("sh", "-c", "sleep 30 & sleep 30")
	req.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := h.run(req)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s", took)
	}
	e := appError(t, err, activities.ErrTypeStepTimeout)
	if !strings.Contains(e.Error(), "timed out after 300ms") {
		t.Fatalf("message %q", e)
	}
	hb := h.firstBeat(time.Second)
	if hb.Pgid == 0 || hb.Pgid != hb.Pid {
		t.Fatalf("heartbeat %+v", hb)
	}
	groupGone(t, hb.Pgid, 10*time.Second)
	if log := h.sink.log(t, key(req)); !strings.Contains(log, "[atelier] step timed out after 300ms") {
		t.Fatalf("log %q", log)
	}
}

func TestCancellationKillsGroup(t *testing.T) {
	// The step ignores SIGTERM, so this also covers the escalation to
	// SIGKILL after the grace period.
	h := newHarness(t, WithGracePeriod(300*time.Millisecond))
	req := request("sh", "-c", `trap '' TERM; sleep 30 & sleep 30`)
	go func() {
		h.firstBeat(5 * time.Second)
		// The first heartbeat can come before sh has run `trap`: a TERM
		// then ends it at once and there is no SIGKILL to see (a CI flake
		// on a loaded machine). Give the shell time to install it.
		time.Sleep(500 * time.Millisecond)
		h.cancel()
	}()
	start := time.Now()
	_, err := h.run(req)
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("cancellation took %s", took)
	}
	if err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("want cancellation error, got %v", err)
	}
	groupGone(t, h.firstBeat(time.Second).Pgid, 10*time.Second)
	log := h.sink.log(t, key(req))
	if !strings.Contains(log, "[atelier] step cancelled") || !strings.Contains(log, "sending SIGKILL") {
		t.Fatalf("log %q", log)
	}
}

func TestLeftoverProcessesAreKilled(t *testing.T) {
	h := newHarness(t)
	req := request("sh", "-c", `sleep 30 & echo started`)
	if _, err := h.run(req); err != nil {
		t.Fatal(err)
	}
	groupGone(t, h.firstBeat(time.Second).Pgid, 10*time.Second)
}

func TestRestartKillsPreviousGroupAndContinuesLog(t *testing.T) {
	h := newHarness(t)
	req := request("sh", "-c", "echo second run")

	// What a worker killed -9 leaves behind: the step's process group, still
	// running, and a log the sink holds only part of.
	old := exec.Command("sleep", "30")
	old.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	old.Env = append(os.Environ(), markerEnv(req)...)
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-old.Process.Pid, syscall.SIGKILL) })

	logPath := filepath.Join(h.data, "runs", "run-1", "train", "attempt-1", "log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("first run\nand more"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The last heartbeat reported offset 5; the chunk at 5 was shipped after
	// it, and "and more" was never sent.
	if err := os.WriteFile(logPath+".index", []byte("0 5\n5 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for off, data := range map[int64]string{0: "first", 5: " run\n"} {
		if err := h.sink.AppendLog(context.Background(), key(req), off, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	host, _ := os.Hostname()
	h.env.SetHeartbeatDetails(Heartbeat{Pgid: old.Process.Pid, Pid: old.Process.Pid,
		StartedAt: time.Now(), LogOffset: 5, Host: host, BootID: supervisor.BootID()})

	if _, err := h.run(req); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-oldDone:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("previous group ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("previous attempt's process still running")
	}
	want := "first run\nand more\n[atelier] worker restarted; re-running step (execution 2: the worker running it was lost)\nsecond run\n"
	if got := h.sink.log(t, key(req)); got != want {
		t.Fatalf("shipped log %q, want %q", got, want)
	}
	if got, _ := os.ReadFile(logPath); string(got) != want {
		t.Fatalf("local log %q, want %q", got, want)
	}
	if c := h.sink.calls[2]; c.offset != 5 || c.data != " run\n" {
		t.Fatalf("first resend %+v, want the recorded chunk at 5 unchanged", c)
	}
}

func TestRestartSparesForeignGroup(t *testing.T) {
	h := newHarness(t)
	req := request("true")
	// A recycled group id: alive, but not this step's processes.
	other := exec.Command("sleep", "30")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-other.Process.Pid, syscall.SIGKILL); _ = other.Wait() })
	host, _ := os.Hostname()
	h.env.SetHeartbeatDetails(Heartbeat{Pgid: other.Process.Pid, Pid: other.Process.Pid, Host: host, BootID: supervisor.BootID()})
	if _, err := h.run(req); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-other.Process.Pid, 0); err != nil {
		t.Fatalf("foreign group was killed: %v", err)
	}
}

func TestEnvDoesNotLeakWorkerEnv(t *testing.T) {
	t.Setenv("SECRET_X", "hunter2")
	h := newHarness(t)
	item := 4
	req := request("sh", "-c", `env > "$PWD/env.txt"; printf '{"env": "%s"}' "$(env | tr '\n' ';')" > "$ATELIER_OUTPUTS"`)
	req.Item = &item
	req.Env = map[string]string{"MY_VAR": "1", "ATELIER_STEP": "spoofed"}
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	env := res.Outputs["env"].(string)
	if strings.Contains(env, "SECRET_X") || strings.Contains(env, "hunter2") {
		t.Fatalf("worker env leaked: %s", env)
	}
	for _, want := range []string{"MY_VAR=1", "ATELIER_STEP=train", "ATELIER_RUN_ID=run-1", "ATELIER_PROJECT=proj",
		"ATELIER_ATTEMPT=1", "ATELIER_ITEM=4", "ATELIER_OUTPUTS=" + filepath.Join(h.data, "runs", "run-1", "train-4", "attempt-1", "out", "outputs.json"),
		"PATH=" + os.Getenv("PATH")} {
		if !strings.Contains(env, want+";") {
			t.Fatalf("env lacks %q: %s", want, env)
		}
	}
}

func TestLogChunksInOrderAndResent(t *testing.T) {
	h := newHarness(t)
	h.runner.chunkSize = 1000
	h.sink.failEvery = 3 // every third append is stored but reported failed
	req := request("sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`)
	if _, err := h.run(req); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := h.sink.log(t, key(req)); got != want.String() {
		t.Fatalf("shipped log differs: %d bytes, want %d", len(got), want.Len())
	}
	// Each call starts where the last confirmed chunk ended, or resends
	// the failed chunk exactly: the store keeps the first chunk at an offset.
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	var end int64
	var prev call
	resent := 0
	for i, c := range h.sink.calls {
		switch {
		case len(c.data) > 1000:
			t.Fatalf("chunk of %d bytes exceeds the chunk size", len(c.data))
		case i > 0 && c.offset == prev.offset:
			if c.data != prev.data {
				t.Fatalf("resend at %d changed the chunk", c.offset)
			}
			resent++
		case c.offset == end:
		default:
			t.Fatalf("call at offset %d after end %d", c.offset, end)
		}
		end = c.offset + int64(len(c.data))
		prev = c
	}
	if resent == 0 {
		t.Fatal("no chunk was resent")
	}
}

func TestLogTruncatedAtLimit(t *testing.T) {
	h := newHarness(t, WithLogLimit(100))
	req := request("sh", "-c", `i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; exit 1`)
	_, err := h.run(req)
	e := appError(t, err, activities.ErrTypeStepFailed)
	if !strings.Contains(e.Error(), "line 99") {
		t.Fatalf("failure message should show the real end of output: %v", e)
	}
	got := h.sink.log(t, key(req))
	if !strings.HasSuffix(got, truncatedLine) || len(got) != 100+len(truncatedLine) {
		t.Fatalf("log %q", got)
	}
}

func TestSinkDownDoesNotFailStep(t *testing.T) {
	h := newHarness(t)
	h.sink.failAll = true
	if _, err := h.run(request("echo", "hi")); err != nil {
		t.Fatalf("sink errors must not fail the step: %v", err)
	}
}

func TestFailureMessageBounded(t *testing.T) {
	long := strings.Repeat("é", 2000)
	msg := failureMessage(1, "", []string{"a", long})
	if len(msg) > 1024 || !strings.HasPrefix(msg, "command exited with code 1") || !strings.HasSuffix(msg, "é") {
		t.Fatalf("len %d: %q", len(msg), msg[:80])
	}
}

// A step whose process ended before its result was reported (the worker
// or the Temporal server died in between) is not run again: the activity
// delivered again for the same attempt returns the recorded result, a
// failure as the same error.
func TestRecordedResultIsReturnedNotRunAgain(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	req := request("sh", "-c", `echo ran >> "$1"; echo "exec $ATELIER_EXECUTION"; printf '{"n": 7}' > "$ATELIER_OUTPUTS"`, "sh", count)
	first, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran\n" {
		t.Fatalf("the command ran %q", b)
	}
	if again.ExitCode != 0 || again.Outputs["n"] != 7.0 || !again.FinishedAt.Equal(first.FinishedAt) {
		t.Fatalf("recorded %+v, first %+v", again, first)
	}
	if got := h.sink.log(t, key(req)); got != "exec 1\n" {
		t.Fatalf("log %q", got)
	}

	failing := request("sh", "-c", `echo ran >> "$1"; echo broken; exit 3`, "sh", count)
	failing.Step = "fails"
	_, err1 := h.run(failing)
	_, err2 := h.run(failing)
	a1, a2 := appError(t, err1, activities.ErrTypeStepFailed), appError(t, err2, activities.ErrTypeStepFailed)
	if a1.Error() != a2.Error() || !a2.NonRetryable() {
		t.Fatalf("replayed failure %v, first %v", a2, a1)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran\nran\n" {
		t.Fatalf("the failing command ran again: %q", b)
	}
}
