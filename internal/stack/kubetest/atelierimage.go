package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/stack/ociimage"
)

// AtelierImage is the whole Atelier binary (/atelier, its entrypoint) and
// the step launcher (/atelier-launcher), what the Helm chart runs; built
// and imported on demand by ImportAtelierImage, not at the node's start:
// only the chart's test needs it, and its static build takes about two
// minutes from a warm Go build cache.
const AtelierImage = "localhost/atelier/atelier:dev"

// ImportAtelierImage builds AtelierImage from this checkout (static Go
// builds, CGO off) and imports it into the node's containerd, once per
// node. Pods use it with imagePullPolicy Never (no registry).
func (n *RealNode) ImportAtelierImage(ctx context.Context) error {
	n.atelierOnce.Do(func() { n.atelierErr = n.importAtelierImage(ctx) })
	return n.atelierErr
}

func (n *RealNode) importAtelierImage(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "atelier-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	bins := map[string]string{"./cmd/atelier": filepath.Join(dir, "atelier"), "./cmd/atelier-launcher": filepath.Join(dir, "atelier-launcher")}
	for pkg, out := range bins {
		progress("building %s for %s (static; about 2 min the first time)…", pkg, AtelierImage)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w: %s", pkg, err, b)
		}
	}
	var files []ociimage.File
	for _, name := range []string{"atelier", "atelier-launcher"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		files = append(files, ociimage.File{Path: "/" + name, Mode: 0o755, Data: data})
	}
	// /tmp for the programs' scratch files where the chart mounts none.
	files = append(files, ociimage.Dir("/tmp", 0o1777))
	img := ociimage.Image{Ref: AtelierImage, Files: files, Entrypoint: []string{"/atelier"}, Env: []string{"PATH=/"}}
	tar := filepath.Join(dir, "atelier.tar")
	f, err := os.Create(tar)
	if err != nil {
		return err
	}
	_, werr := img.Write(f)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("write image %s: %w", AtelierImage, err)
	}
	if err := n.ctr(ctx, "images", "import", "--no-unpack=false", tar); err != nil {
		return fmt.Errorf("import %s: %w", AtelierImage, err)
	}
	progress("%s built and imported in %s", AtelierImage, time.Since(start).Round(time.Second))
	return nil
}

// ForwardToPods makes addr, a TCP address on the host's loopback (the
// test's Postgres, Temporal, the API server), reachable from the real
// node's pods at the returned address on RealNodeIP: the services of the
// tests listen on loopback, which a pod's network namespace cannot
// reach. Bytes are copied as they are (TLS included). It stops with t.
func ForwardToPods(t testing.TB, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(RealNodeIP, "0"))
	if err != nil {
		t.Fatalf("kubetest: forward %s to the node's pods: %v", addr, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	closed := false
	conns := map[net.Conn]bool{}
	// track adds c to what the cleanup closes; false once it has run (c is
	// then closed at once).
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			_ = c.Close()
			return false
		}
		conns[c] = true
		return true
	}
	untrack := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		delete(conns, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			if !track(in) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer untrack(in)
				defer in.Close()
				out, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil || !track(out) {
					return
				}
				defer untrack(out)
				defer out.Close()
				// Each direction ends on its own (a half-closed reply is
				// still delivered); the connection ends with both.
				var copies sync.WaitGroup
				copies.Add(2)
				go func() { defer copies.Done(); _, _ = io.Copy(out, in); closeWrite(out) }()
				go func() { defer copies.Done(); _, _ = io.Copy(in, out); closeWrite(in) }()
				copies.Wait()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// closeWrite half-closes a TCP connection: the peer reads EOF.
func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
