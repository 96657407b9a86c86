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

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

// progressEvery is how often a wait for someone else's build reports that it
// is still alive (build.sh has its own heartbeat).
const progressEvery = 60 * time.Second

// Binaries are the executables a cluster runs.
type Binaries struct {
	APIServer, ControllerManager, Scheduler, Etcd string
	// Kwok plays kubelet for fake nodes; RayOperator is KubeRay's operator.
	Kwok, RayOperator string
}

// paths lists the binaries a cluster of mode needs.
func (b Binaries) paths(controlPlane bool) []string {
	p := []string{b.APIServer, b.Etcd}
	if controlPlane {
		p = append(p, b.ControllerManager, b.Scheduler, b.Kwok, b.RayOperator)
	}
	return p
}

// binariesIn returns where the binaries live: all in one directory (dir
// set: $ATELIER_KUBE_BIN_DIR), else in the cache, one directory per pinned
// module version as build.sh lays them out.
func binariesIn(dir, cache string) Binaries {
	if dir != "" {
		return Binaries{
			APIServer: filepath.Join(dir, "kube-apiserver"), ControllerManager: filepath.Join(dir, "kube-controller-manager"),
			Scheduler: filepath.Join(dir, "kube-scheduler"), Etcd: filepath.Join(dir, "etcd"),
			Kwok: filepath.Join(dir, "kwok"), RayOperator: filepath.Join(dir, "ray-operator"),
		}
	}
	kube := filepath.Join(cache, "kube-"+KubeVersion)
	return Binaries{
		APIServer: filepath.Join(kube, "kube-apiserver"), ControllerManager: filepath.Join(kube, "kube-controller-manager"),
		Scheduler: filepath.Join(kube, "kube-scheduler"), Etcd: filepath.Join(kube, "etcd"),
		Kwok:        filepath.Join(cache, "kwok-"+KwokVersion, "kwok"),
		RayOperator: filepath.Join(cache, "kuberay-"+KubeRayOperatorVersion, "ray-operator"),
	}
}

// findBinaries returns the binaries a cluster needs (controlPlane: all of
// them; else kube-apiserver and etcd): from $ATELIER_KUBE_BIN_DIR, else the
// cache, else the cache after running tools/kube/build.sh.
func findBinaries(ctx context.Context, controlPlane bool, log func(string, ...any)) (Binaries, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		b := binariesIn(d, "")
		if err := checkBinaries(b.paths(controlPlane)); err != nil {
			return Binaries{}, fmt.Errorf("%s=%s: %w", EnvBinDir, d, err)
		}
		return b, nil
	}
	cache, err := devstack.CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	b := binariesIn("", cache)
	if checkBinaries(b.paths(controlPlane)) == nil {
		return b, nil
	}

	// Build under a lock, so that the test binaries `go test ./...` runs in
	// parallel build once: the others wait, then find the binaries. The lock
	// sits beside the directory because build.sh creates the directory.
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Binaries{}, err
	}
	lock := filepath.Join(cache, "kube-"+KubeVersion+".lock")
	unlock, err := devstack.LockFile(ctx, lock, func(waited time.Duration) {
		log("waiting for another process to finish building the Kubernetes binaries (%s)…", waited.Round(time.Second))
	})
	if err != nil {
		return Binaries{}, fmt.Errorf("lock %s: %w", lock, err)
	}
	defer unlock()
	if checkBinaries(b.paths(controlPlane)) == nil {
		return b, nil
	}

	root, err := repoRoot()
	if err != nil {
		return Binaries{}, err
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
	log("Kubernetes binaries missing under %s; running %s", cache, script)
	log("(a first build can outlast go test's default 10m -timeout: run `make ensure-kube` once beforehand, or pass -timeout 60m)")
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("%s: %w (see its output above)", script, err)
	}
	if err := checkBinaries(b.paths(controlPlane)); err != nil {
		return Binaries{}, fmt.Errorf("%s finished but %w", script, err)
	}
	return b, nil
}

// checkBinaries reports whether every path is an executable file.
func checkBinaries(paths []string) error {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", p)
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
		path, _, _ := strings.Cut(m, "@") // "module@version" is keyed by its path
		if dirs[path] == "" {
			return nil, fmt.Errorf("go mod download: no directory for %s", m)
		}
	}
	return dirs, nil
}
