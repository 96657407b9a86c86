package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local/supervisor"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// A step's process runs under a supervisor that outlives the worker
// (package supervisor), so a worker delivered an attempt that an earlier
// execution started adopts the step instead of running it again: it
// follows the step's output from where the log stands and waits for the
// supervisor's exit record (issue 29; docs/operations.md "Crash safety").

// DefaultOrphanTimeout is how long a step runs on with no worker watching
// it before its supervisor stops it (WithOrphanTimeout).
const DefaultOrphanTimeout = time.Minute

// WithOrphanTimeout sets how long a step keeps running after its worker
// was lost, for a worker on this machine to adopt it. Past it the step's
// supervisor stops it (SIGTERM, grace period, SIGKILL) and the next
// execution runs the step again. 0 or less ties steps to their worker:
// they die with it, as before supervisors existed.
func WithOrphanTimeout(d time.Duration) Option {
	return func(r *Runner) { r.orphanAfter = max(d, 0) }
}

// followPoll is how often the output file is read for new output.
const followPoll = 50 * time.Millisecond

// findPrevious looks at what earlier executions of this attempt left (their
// last heartbeat, the supervisor's records) and reports whether the step
// they started can be adopted: its supervisor still runs it, or it ended
// and the supervisor recorded how. Otherwise it says why in a.rerunWhy.
func (a *attempt) findPrevious(ctx context.Context) bool {
	a.prev, a.restarted = previousHeartbeat(ctx, a.logger)
	a.execution = 1
	st, err := supervisor.ReadStarted(a.attemptDir)
	if err != nil || st.Request != requestDigest(a.req) {
		return false
	}
	a.started, a.restarted = &st, true
	ex, err := supervisor.ReadExited(a.attemptDir)
	ended := err == nil && ex.Request == st.Request && ex.Execution == st.Execution
	switch {
	case ended && ex.Orphaned != "":
		a.rerunWhy = "its process was stopped: " + ex.Orphaned
		return false
	case ended:
		return true
	case st.Attached:
		a.rerunWhy = "the worker running it was lost, and the step's process with it"
		return false
	case !supervisor.Alive(st):
		a.rerunWhy = "the worker running it was lost, and the step's supervisor with it"
		return false
	}
	return true
}

// adopt takes over the step an earlier execution started (findPrevious)
// and returns its outcome as RunContainer would have.
func (a *attempt) adopt(ctx context.Context) (activities.ContainerResult, error) {
	st := *a.started
	a.adopted, a.execution, a.startedAt = true, st.Execution, st.StartedAt
	a.workDir = a.req.WorkingDir
	if a.workDir == "" {
		a.workDir = filepath.Join(a.attemptDir, "work")
	}
	// The secrets only to redact the log: the process has its own.
	if err := a.resolveSecrets(ctx); err != nil {
		return activities.ContainerResult{}, err
	}
	defer a.dropSecretFiles()
	// Missing when an earlier execution already had it in the log (it
	// finished the step but could not store its outputs).
	output, err := os.OpenFile(supervisor.OutputPath(a.attemptDir), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return activities.ContainerResult{}, fmt.Errorf("open the adopted step's output: %w", err)
	}
	if err := a.openLog(ctx); err != nil {
		output.Close()
		return activities.ContainerResult{}, err
	}
	a.watch(supervisor.Adopt(a.attemptDir, st, followPoll), output)
	from := a.readCheckpoint()
	a.logs.note("worker restarted; adopted the step's process (pid %d, execution %d), which outlived the worker", st.Pid, st.Execution)
	a.logger.Info("adopted a step an earlier execution started", zap.Int("pid", st.Pid), zap.Int("supervisor", st.Supervisor),
		zap.Int64("outputFrom", from))
	if a.req.Timeout > 0 {
		a.runFor = max(a.req.Timeout-time.Since(st.StartedAt), time.Nanosecond)
	}
	return a.runToEnd(ctx, from)
}

// dropOutput removes the output file once the step's log holds it
// (redacted) and its outcome is recorded: unlike the log it holds secret
// values as the step printed them.
func (a *attempt) dropOutput() {
	if a.left {
		return
	}
	for _, p := range []string{supervisor.OutputPath(a.attemptDir), a.checkpointPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.logger.Warn("cannot remove the step's output file", zap.Error(err))
		}
	}
}

func (a *attempt) checkpointPath() string { return filepath.Join(a.attemptDir, "output.read") }

// readCheckpoint is how much of the output file the log holds.
func (a *attempt) readCheckpoint() int64 {
	b, err := os.ReadFile(a.checkpointPath())
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// follow copies the step's output file into its log from offset from,
// redacted, until stop is closed, then what is left. After each copy it
// records how far the log holds the file (output.read), so that a worker
// adopting the step continues there: a crash between the two repeats at
// most the last lines copied. With secrets to redact it copies whole lines
// only (a value split across two reads is still found).
func (a *attempt) follow(from int64, stop <-chan struct{}) {
	w := redact.NewWriter(a.logs, a.redact)
	cp, err := os.OpenFile(a.checkpointPath(), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		a.logger.Warn("cannot record how much output the log holds; an adopting worker may repeat it", zap.Error(err))
	}
	defer func() {
		if cp != nil {
			cp.Close()
		}
	}()
	off := from
	var carry []byte // read, not yet in the log: the start of a line
	buf := make([]byte, 64<<10)
	copyOut := func(final bool) (more bool) {
		n, err := a.output.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			a.logger.Warn("cannot read the step's output", zap.Error(err))
			return false
		}
		if n == 0 && !final {
			return false
		}
		off += int64(n)
		data := append(carry, buf[:n]...)
		carry = nil
		if a.redact != nil && !final && len(data) <= 64<<10 {
			i := strings.LastIndexByte(string(data), '\n') + 1
			data, carry = data[:i], append([]byte(nil), data[i:]...)
		}
		_, _ = w.Write(data)
		w.Flush()
		if cp != nil {
			_, _ = cp.WriteAt(fmt.Appendf(nil, "%20d\n", off-int64(len(carry))), 0)
		}
		return n == len(buf)
	}
	for {
		for copyOut(false) {
		}
		select {
		case <-stop:
			for copyOut(true) {
			}
			return
		case <-time.After(followPoll):
		}
	}
}
