//go:build !unix

package devstack

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"time"
)

// LockFile on non-unix systems uses an exclusive-create marker file. Unlike
// flock it is not released if the holder crashes, so a stale lock older than
// an hour is taken over.
func LockFile(ctx context.Context, path string, waiting func(time.Duration)) (func(), error) {
	start := time.Now()
	lastReport := start
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return func() { _ = os.Remove(path) }, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if fi, serr := os.Stat(path); serr == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.Remove(path)
			continue
		}
		if time.Since(lastReport) >= temporalProgressEvery || lastReport == start {
			waiting(time.Since(start))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func temporalProcAttrs(*exec.Cmd) {}

// temporalInterrupt: there is no SIGINT to deliver to a child on Windows, so the
// graceful step is skipped and Stop falls through to the kill.
func temporalInterrupt(p *os.Process) error { return p.Kill() }

func temporalKill(p *os.Process) error { return p.Kill() }
