package devstack

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// goTool is a command built from the Go module proxy with `go install
// pkg@version` into <CacheDir>/<dir>/<exe>, once per machine: the temporal
// CLI of the dev stack, helm for the chart tests, versitygw for the S3
// tests.
type goTool struct {
	// name is the tool's name in progress and error messages ("temporal CLI").
	name string
	// exe is the binary's name as `go install` writes it (the package's last
	// element), without .exe.
	exe string
	// dir is the cache directory under CacheDir, keyed by version
	// ("temporal-v1.5.1").
	dir string
	// pkg and version are what `go install` builds.
	pkg, version string
	// ldflags stamps versions the way upstream release builds do.
	ldflags string
	// estimate is said in the first progress message ("~10 min on 2 cores").
	estimate string
	// env names a variable that points at an existing binary instead.
	env string
}

// path is where the tool lives (or will live once built).
func (g goTool) path() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, g.dir, temporalExeName(g.exe)), nil
}

// ensure returns the path of the tool, building it on first use.
//
// Order: $<env> if set (must exist); else the cached build; else `go
// install` it there. The build goes to a temporary GOBIN inside the cache
// dir and is renamed into place, so a crash never leaves a half-written
// binary that later callers would trust. An exclusive lock file serialises
// concurrent callers (parallel test binaries, `make dev` racing `make
// test`): the loser waits and then finds the binary. log receives progress
// messages (may be nil).
func (g goTool) ensure(ctx context.Context, log func(string, ...any)) (string, error) {
	log = temporalLogOrNop(log)
	if p := os.Getenv(g.env); g.env != "" && p != "" {
		if err := temporalCheckExec(p); err != nil {
			return "", fmt.Errorf("devstack: %s=%s: %w", g.env, p, err)
		}
		return p, nil
	}
	path, err := g.path()
	if err != nil {
		return "", err
	}
	if temporalCheckExec(path) == nil {
		return path, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("devstack: create %s: %w", dir, err)
	}

	unlock, err := LockFile(ctx, filepath.Join(dir, ".lock"), func(waited time.Duration) {
		log("waiting for another process to finish building %s %s (%s)…", g.name, g.version, temporalRoundDur(waited))
	})
	if err != nil {
		return "", fmt.Errorf("devstack: lock %s cache: %w", g.name, err)
	}
	defer unlock()
	// Someone else may have finished the build while we waited for the lock.
	if temporalCheckExec(path) == nil {
		return path, nil
	}
	if err := g.build(ctx, dir, path, log); err != nil {
		return "", err
	}
	return path, nil
}

// build runs `go install` into a temp GOBIN under dir and renames the
// result to path. The caller holds the lock.
func (g goTool) build(ctx context.Context, dir, path string, log func(string, ...any)) error {
	goBin, err := temporalFindGo()
	if err != nil {
		return fmt.Errorf("devstack: building %s needs Go: %w (or set %s to an existing binary)", g.name, err, g.env)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return fmt.Errorf("devstack: temp GOBIN: %w", err)
	}
	defer os.RemoveAll(tmp)

	// Keep the full build log next to the binary so a failed first-time
	// build can be diagnosed after the fact; the error carries its tail.
	logPath := filepath.Join(dir, "build.log")
	logF, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	defer logF.Close()
	tail := newTemporalTail(8 << 10)
	out := io.MultiWriter(logF, tail)

	pkg := g.pkg + "@" + g.version
	args := []string{"install"}
	if g.ldflags != "" {
		args = append(args, "-ldflags="+g.ldflags)
	}
	cmd := exec.CommandContext(ctx, goBin, append(args, pkg)...)
	// Run outside the repo so no go.work / go.mod of the caller interferes;
	// -mod=mod keeps a GOFLAGS=-mod=vendor from the environment from breaking
	// a module-mode install.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"GOBIN="+tmp,
		"GOWORK=off",
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"),
	)
	cmd.Stdout = out
	cmd.Stderr = out
	// Own process group, so cancelling stops go's compiler children too, and
	// a parent-death signal, so a killed caller does not leave a build
	// running that would hold the CPUs (the lock is released by the kernel).
	temporalProcAttrs(cmd)
	cmd.Cancel = func() error { return temporalInterrupt(cmd.Process) }
	cmd.WaitDelay = 5 * time.Second

	start := time.Now()
	log("building %s %s (first time, %s; log: %s)…", g.name, g.version, g.estimate, logPath)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("devstack: start go install: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(temporalProgressEvery)
	defer tick.Stop()
wait:
	for {
		select {
		case <-tick.C:
			log("still building %s %s (%s)…", g.name, g.version, temporalRoundDur(time.Since(start)))
		case err = <-done:
			break wait
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("devstack: building %s: %w", g.name, ctx.Err())
		}
		return fmt.Errorf("devstack: go install %s failed: %w (full log: %s)\n%s", pkg, err, logPath, tail.String())
	}
	built := filepath.Join(tmp, temporalExeName(g.exe))
	if err := os.Rename(built, path); err != nil {
		return fmt.Errorf("devstack: install %s: %w", g.name, err)
	}
	log("built %s %s in %s: %s", g.name, g.version, temporalRoundDur(time.Since(start)), path)
	return nil
}
