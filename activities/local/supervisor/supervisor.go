package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/atelier-ml/atelier/activities/local/supervisor/entry"
)

// The files of the attempt directory (see the package doc).
const (
	startedFile = entry.StartedFile
	exitFile    = entry.ExitFile
	leaseFile   = entry.LeaseFile
	outputFile  = entry.OutputFile
)

// BinaryEnv names another binary to run supervisors from, instead of the
// worker's own (any binary that imports package local will do, built from
// the same code). Tests set it: a race-instrumented test binary takes a
// second or more to start, a plain build of the atelier command a few
// milliseconds.
const BinaryEnv = "ATELIER_STEP_SUPERVISOR_BINARY"

// BootID identifies this boot of the machine ("" where unknown): after a
// reboot, process ids from records and heartbeats mean nothing.
func BootID() string { return entry.BootID() }

// StatFields are the fields of /proc/<pid>/stat after the command, nil if
// the process is gone or the system has no /proc (see entry.StatFields).
func StatFields(pid int) []string { return entry.StatFields(pid) }

// Spec is what a supervisor runs.
type Spec = entry.Spec

// Credential is a user and group to run the step as.
type Credential = entry.Credential

// Started is started.json: the step's process is running.
type Started struct {
	Request    string `json:"request"`
	Execution  int    `json:"execution"`
	Supervisor int    `json:"supervisor"` // the supervisor's pid
	// SupervisorStart is when the supervisor started, in the kernel's
	// clock ticks since boot: with the pid, it names the process.
	SupervisorStart uint64 `json:"supervisorStart,omitempty"`
	// Pid is the step's process; it leads its own process group.
	Pid       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
	BootID    string    `json:"bootId"`
	// Attached supervisors die with their worker: there is nothing to adopt.
	Attached bool `json:"attached,omitempty"`
}

// Exited is exit.json: how the step's process ended.
type Exited struct {
	Request    string    `json:"request"`
	Execution  int       `json:"execution"`
	ExitCode   int       `json:"exitCode"` // 128+N for death by signal N
	Signal     string    `json:"signal,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
	// Orphaned says why the supervisor stopped the step itself ("" when
	// it ended on its own or was stopped by a worker).
	Orphaned string `json:"orphaned,omitempty"`
}

// ErrLost is the end of a supervisor that exited without recording how
// the step ended (it was killed): the step's process died with it.
var ErrLost = errors.New("the step's supervisor ended without recording the step's exit")

// StartError is a step program that could not be started (not found, not
// executable, ...). It unwraps to the errno.
type StartError struct {
	Msg   string
	Errno syscall.Errno
}

func (e *StartError) Error() string { return e.Msg }
func (e *StartError) Unwrap() error { return e.Errno }

// OutputPath is the file that receives the step's stdout and stderr.
func OutputPath(dir string) string { return filepath.Join(dir, outputFile) }

// Clear removes what an earlier execution recorded in dir, before a new
// one starts.
func Clear(dir string) error {
	for _, f := range []string{startedFile, exitFile, leaseFile, outputFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Renew renews the lease of the step supervised in dir: a worker watches
// it. A detached supervisor stops its step once the lease is older than
// Spec.OrphanAfter.
func Renew(dir string) error {
	p := filepath.Join(dir, leaseFile)
	now := time.Now()
	err := os.Chtimes(p, now, now)
	if errors.Is(err, os.ErrNotExist) {
		err = os.WriteFile(p, nil, 0o600)
	}
	return err
}

// ReadStarted returns the started.json of dir.
func ReadStarted(dir string) (Started, error) {
	var st Started
	return st, readJSON(filepath.Join(dir, startedFile), &st)
}

// ReadExited returns the exit.json of dir.
func ReadExited(dir string) (Exited, error) {
	var ex Exited
	return ex, readJSON(filepath.Join(dir, exitFile), &ex)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// Process is a supervised step, started by this worker (Start) or adopted
// from an earlier one (Adopt). Done is closed when the step has ended;
// Result then says how.
type Process struct {
	Started
	dir string
	// request and execution are what the exit record must name, known
	// before the record of the start.
	request   string
	execution int
	done      chan struct{}
	exit      Exited
	err       error
}

// Done is closed once the step's process has ended (or its supervisor was
// lost).
func (p *Process) Done() <-chan struct{} { return p.done }

// Result is how the step ended, once Done is closed.
func (p *Process) Result() (Exited, error) { return p.exit, p.err }

// WriteJSON writes v to path atomically (a temporary file renamed): a
// crash of the writing process leaves the old file or the whole new one.
// durable also syncs the file and the directory, so that a crash of the
// machine does too; the supervisor's records do without (a few
// milliseconds per step), since after a reboot there is nothing to adopt.
func WriteJSON(path string, v any, durable bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	return d.Sync()
}
