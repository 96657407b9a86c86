package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/internal/platform/launch"
)

// Parallel is how many files of a directory move at once.
const Parallel = 16

// Install copies the running binary to dir/atelier-launcher (the init
// container: the step's image need not have it).
func Install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".atelier-launcher-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, "atelier-launcher"))
}

// Paths are where the launcher puts things; tests move them out of /atelier.
type Paths struct {
	Inputs, Artifacts, Outputs, Metrics string
}

// PodPaths are the paths in a step's pod.
var PodPaths = Paths{Inputs: launch.InputsDir, Artifacts: launch.ArtifactsDir, Outputs: launch.OutputsFile, Metrics: launch.MetricsFile}

// Run does the launcher's work around argv (the step's command) and
// returns the container's exit code. Its Result goes to spec.ResultPath;
// what went wrong also goes to stderr, which is the step's log.
//
// The launcher is the container's first process: the signals the kubelet
// sends (SIGTERM) go to the command's process group while it runs, and
// stop the transfers before and after it.
func Run(ctx context.Context, spec launch.Spec, grant string, paths Paths, argv []string, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &run{spec: spec, paths: paths, stderr: stderr, objs: launch.NewClient(spec.Gateway, grant, nil)}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case s := <-sigs:
				if !l.signalCommand(s) {
					l.logf("got %s: stopping", s)
					cancel()
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return l.run(ctx, argv)
}

// Fetch places spec's inputs under paths.Inputs and returns the exit
// code: an init container fetching an inference revision's model, with
// the revision's grant, for the engine beside it to load.
func Fetch(ctx context.Context, spec launch.Spec, grant string, paths Paths, stderr io.Writer) int {
	l := &run{spec: spec, paths: paths, stderr: stderr, objs: launch.NewClient(spec.Gateway, grant, nil)}
	start := time.Now()
	if err := l.placeInputs(ctx); err != nil {
		return l.fail(launch.ErrTransfer, err)
	}
	var bytes int64
	for _, in := range spec.Inputs {
		bytes += in.Size
	}
	l.logf("fetched %d artifacts (%d bytes) in %s", len(spec.Inputs), bytes, time.Since(start).Round(time.Millisecond))
	l.write(launch.Result{Launcher: launch.ResultVersion})
	return 0
}

type run struct {
	spec   launch.Spec
	paths  Paths
	objs   *launch.Client
	stderr io.Writer
	// running is the command's process while it runs.
	mu      sync.Mutex
	running *os.Process
}

// signalCommand passes s to the running command's process group; false
// when no command runs.
func (l *run) signalCommand(s os.Signal) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		return false
	}
	signalGroup(l.running, s)
	return true
}

func (l *run) logf(format string, args ...any) {
	fmt.Fprintf(l.stderr, "atelier-launcher: "+format+"\n", args...)
}

// fail writes a Result saying why and returns the exit code for it.
func (l *run) fail(kind launch.ErrorKind, err error) int {
	l.logf("%v", err)
	l.write(launch.Result{Launcher: launch.ResultVersion, Error: err.Error(), Kind: kind})
	return 1
}

// write writes r to the result path; false when r did not fit and an
// error took its place (the container must then fail).
func (l *run) write(r launch.Result) bool {
	fits := true
	b, err := json.Marshal(r)
	if err == nil && len(b) > maxResult {
		if r.Error != "" { // the launcher's own failure: keep it, shortened
			r.Error = r.Error[:min(len(r.Error), maxResult/2)] + "…"
		} else {
			r.Error = fmt.Sprintf("the step's outputs and artifact references take %d bytes, over the %d a Kubernetes termination message holds: output fewer or shorter values", len(b), maxResult)
			r.Kind, r.Artifacts, r.Metrics, r.Outputs = launch.ErrOutputs, nil, nil, nil
			l.logf("%s", r.Error)
		}
		fits = false
		b, err = json.Marshal(r)
	}
	if err == nil {
		err = os.WriteFile(l.spec.ResultPath, b, 0o644)
	}
	if err != nil {
		l.logf("could not write the result to %s: %v", l.spec.ResultPath, err)
		return false
	}
	return fits
}

// maxResult is the kubelet's limit on a termination message.
const maxResult = 4096

func (l *run) run(ctx context.Context, argv []string) int {
	if len(argv) == 0 {
		return l.fail(launch.ErrSetup, errors.New("no command to run"))
	}
	start := time.Now()
	if err := l.placeInputs(ctx); err != nil {
		return l.fail(launch.ErrTransfer, err)
	}
	if len(l.spec.Inputs) > 0 {
		l.logf("placed %d input artifacts in %s", len(l.spec.Inputs), time.Since(start).Round(time.Millisecond))
	}
	code, err := l.command(ctx, argv)
	if err != nil {
		return l.fail(launch.ErrSetup, err)
	}
	if code != 0 {
		l.write(launch.Result{Launcher: launch.ResultVersion})
		return code
	}
	res := launch.Result{Launcher: launch.ResultVersion}
	if b, err := os.ReadFile(l.paths.Outputs); err == nil && len(b) > 0 {
		var compact bytes.Buffer
		if err := json.Compact(&compact, b); err != nil {
			return l.fail(launch.ErrOutputs, fmt.Errorf("the step's outputs ($ATELIER_OUTPUTS) are not JSON: %v", err))
		}
		res.Outputs = compact.Bytes()
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l.fail(launch.ErrOutputs, fmt.Errorf("read the step's outputs: %w", err))
	}
	start = time.Now()
	stored, kind, err := l.storeOutputs(ctx)
	if err != nil {
		return l.fail(kind, err)
	}
	if len(stored) > 0 {
		l.logf("stored %d output artifacts in %s", len(stored), time.Since(start).Round(time.Millisecond))
	}
	res.Artifacts = stored
	if res.Metrics, kind, err = l.storeMetrics(ctx); err != nil {
		return l.fail(kind, err)
	}
	if !l.write(res) {
		return 1
	}
	return 0
}

// storeMetrics stores the metrics file the step wrote, if any, for the
// worker to read and check.
func (l *run) storeMetrics(ctx context.Context) (*launch.Stored, launch.ErrorKind, error) {
	fi, err := os.Lstat(l.paths.Metrics)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", nil
	case err != nil:
		return nil, launch.ErrOutputs, err
	case !fi.Mode().IsRegular() || fi.Size() > launch.MaxMetrics:
		return nil, launch.ErrOutputs, fmt.Errorf("the metrics file ($ATELIER_METRICS) is not a regular file of at most %d bytes", launch.MaxMetrics)
	}
	root, err := os.OpenRoot(filepath.Dir(l.paths.Metrics))
	if err != nil {
		return nil, launch.ErrSetup, err
	}
	defer root.Close()
	o, err := tree.Put(ctx, l.objs, root, filepath.Base(l.paths.Metrics), 1)
	if err != nil {
		return nil, launch.ErrTransfer, fmt.Errorf("store the metrics file: %w", err)
	}
	return &launch.Stored{Name: "metrics", Digest: o.Digest, Size: o.Size}, "", nil
}

// placeInputs downloads the inputs into a fresh inputs directory and
// makes an empty artifacts directory.
func (l *run) placeInputs(ctx context.Context) error {
	for _, f := range []string{l.paths.Outputs, l.paths.Metrics} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for _, dir := range []string{l.paths.Inputs, l.paths.Artifacts} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, in := range l.spec.Inputs {
		if !filepath.IsLocal(in.Name) {
			return fmt.Errorf("input artifact name %q cannot name a path under $ATELIER_INPUTS", in.Name)
		}
		dest := filepath.Join(l.paths.Inputs, filepath.FromSlash(in.Name))
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if err := tree.Get(ctx, l.objs, in.Object(), dest, Parallel); err != nil {
			return fmt.Errorf("download input artifact %q: %w", in.Name, err)
		}
	}
	return nil
}

// command runs argv with the step's variables in a process group of its
// own (signals go to the group: see Run), and returns its exit code. What
// the command left running is killed once it exits: its outputs are
// about to be stored.
func (l *run) command(ctx context.Context, argv []string) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(childEnv(os.Environ()),
		"ATELIER_INPUTS="+l.paths.Inputs, "ATELIER_ARTIFACTS="+l.paths.Artifacts, "ATELIER_OUTPUTS="+l.paths.Outputs,
		"ATELIER_METRICS="+l.paths.Metrics)
	ownGroup(cmd)
	l.mu.Lock()
	if ctx.Err() != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("stopped before the step's command started: %w", ctx.Err())
	}
	if err := cmd.Start(); err != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("start the step's command: %w", err)
	}
	l.running = cmd.Process
	l.mu.Unlock()
	err := cmd.Wait()
	l.mu.Lock()
	killGroup(l.running)
	l.running = nil
	l.mu.Unlock()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil // as a shell reports it
		}
		return exit.ExitCode(), nil
	}
	return 0, err
}

// childEnv is the container's environment without what is the launcher's
// alone: its spec and its grant.
func childEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if hasKey(kv, launch.SpecEnv) || hasKey(kv, launch.GrantEnv) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func hasKey(kv, key string) bool {
	return len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '='
}

// storeOutputs stores every declared output. A missing one, or one that
// is or holds a link or a special file, is the step's fault (ErrOutputs).
func (l *run) storeOutputs(ctx context.Context) ([]launch.Stored, launch.ErrorKind, error) {
	if len(l.spec.Outputs) == 0 {
		return nil, "", nil
	}
	root, err := os.OpenRoot(l.paths.Artifacts)
	if err != nil {
		return nil, launch.ErrSetup, err
	}
	defer root.Close()
	// The project's cap is held against all the outputs at once.
	var total int64
	for _, o := range l.spec.Outputs {
		total += tree.Size(root, o.Path)
	}
	l.objs.SetStoring(total)
	var out []launch.Stored
	for _, o := range l.spec.Outputs {
		obj, err := tree.Put(ctx, l.objs, root, o.Path, Parallel)
		switch {
		case errors.Is(err, launch.ErrOverLimit):
			return nil, launch.ErrLimit, fmt.Errorf("store output artifact %q: %w", o.Name, err)
		case errors.Is(err, fs.ErrNotExist):
			return nil, launch.ErrOutputs, fmt.Errorf("the step did not write its output artifact %q ($ATELIER_ARTIFACTS/%s)", o.Name, o.Path)
		case tree.Escapes(err):
			return nil, launch.ErrOutputs, fmt.Errorf("output artifact %q: %v", o.Name, err)
		case err != nil:
			return nil, launch.ErrTransfer, fmt.Errorf("store output artifact %q: %w", o.Name, err)
		}
		out = append(out, launch.Stored{Name: o.Name, Digest: obj.Digest, Size: obj.Size, Files: obj.Files})
	}
	return out, "", nil
}
