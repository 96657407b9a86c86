package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/internal/devstack"
)

// progressEvery is how often a wait for someone else's build reports that it
// is still alive (build.sh has its own heartbeat).
const progressEvery = 60 * time.Second

// binaryNames are the executables a bin dir must hold.
var binaryNames = []string{"kube-apiserver", "etcd"}

// binDir returns a directory holding kube-apiserver and etcd: $ATELIER_KUBE_BIN_DIR,
// else the cache, else the cache after running tools/kube/build.sh.
func binDir(ctx context.Context, log func(string, ...any)) (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		if err := checkBinDir(d); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinDir, d, err)
		}
		return d, nil
	}
	cache, err := devstack.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "kube-"+KubeVersion)
	if checkBinDir(dir) == nil {
		return dir, nil
	}

	// Build under a lock, so that the test binaries `go test ./...` runs in
	// parallel build once: the others wait, then find the binaries. The lock
	// sits beside the directory because build.sh creates the directory.
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	unlock, err := devstack.LockFile(ctx, dir+".lock", func(waited time.Duration) {
		log("waiting for another process to finish building kube-apiserver %s (%s)…", KubeVersion, waited.Round(time.Second))
	})
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", dir+".lock", err)
	}
	defer unlock()
	if checkBinDir(dir) == nil {
		return dir, nil
	}

	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "tools", "kube", "build.sh")
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), EnvCacheDir+"="+cache)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	// build.sh's progress and heartbeat lines, straight to the terminal.
	cmd.Stderr = os.Stderr
	// On timeout kill the whole process group: killing only bash would
	// leave its `go build` running on.
	procAttrs(cmd)
	cmd.Cancel = func() error { return kill(cmd.Process) }
	cmd.WaitDelay = 5 * time.Second
	log("%s not found in %s; running %s", strings.Join(binaryNames, " and "), dir, script)
	log("(a first build can outlast go test's default 10m -timeout: run that script once beforehand, or pass -timeout 30m)")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w (see its output above)", script, err)
	}
	if err := checkBinDir(dir); err != nil {
		return "", fmt.Errorf("%s finished but %s: %w", script, dir, err)
	}
	return dir, nil
}

// checkBinDir reports whether dir holds executable kube-apiserver and etcd.
func checkBinDir(dir string) error {
	for _, name := range binaryNames {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", filepath.Join(dir, name))
		}
	}
	return nil
}

// repoRoot finds the Atelier checkout by walking up from the working
// directory, which `go test` sets to the package's directory. It looks for
// tools/kube/build.sh rather than a go.mod, which nested modules also have.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "tools", "kube", "build.sh")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no tools/kube/build.sh above %s: run the tests from inside the Atelier repository, or set %s", wd, EnvBinDir)
		}
	}
}

// moduleDirs returns the module-cache directories of modules at the versions
// the main go.mod requires, downloading them if needed (`go mod download`
// also verifies them against go.sum).
func moduleDirs(ctx context.Context, modules ...string) (map[string]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "download", "-json"}, modules...)...)
	cmd.Dir = root
	// GOFLAGS=-mod=mod: `go mod download` refuses -mod=vendor from the
	// environment; the module cache is what we want regardless.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %w\n%s%s", strings.Join(modules, " "), err, out, stderr.Bytes())
	}
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go mod download: %w", err)
		}
		if m.Error != "" || m.Dir == "" {
			return nil, fmt.Errorf("go mod download %s: %s", m.Path, m.Error)
		}
		dirs[m.Path] = m.Dir
	}
	for _, m := range modules {
		if dirs[m] == "" {
			return nil, fmt.Errorf("go mod download: no directory for %s", m)
		}
	}
	return dirs, nil
}
