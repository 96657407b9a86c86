// Command launchsign measures the step launcher's transfers of a directory
// of many small files through the gateway's sign route, with the URLs
// signed in batches (launch.Client.Presign, launch.Batch objects per
// request) against one request per object (SetBatch(0): the launcher
// before batching), in the same run.
//
// The gateway is the real api handler (api.New with WithLauncher: the
// sign route, the grant's opening and checks, the object routes) served
// in-process by an httptest server on loopback; its catalog and engine
// are stubs that know one running run (a grant's liveness check reads
// it). The launcher side is launch.Client driven by artifactstore/tree
// with launcher.Parallel transfers at once, as internal/process/launcher
// stores outputs and places inputs. The store is a directory (the gateway
// streams the bytes: its own URLs) or, with -s3, a versitygw
// (s3test.Run, posix backend on loopback: presigned URLs straight to the
// store).
//
// Each repetition writes a fresh directory (bytes never stored before, so
// every file is uploaded), uploads it (tree.Put), then downloads it
// (tree.Get) with a grant that reads it; modes interleave (baseline,
// batched, ...) after a warm-up round of each.
//
//	go run ./bench/launchsign [-files 5000] [-file-size 1024] [-reps 5] [-s3] [-latency 0] [-quick]
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/api"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/process/launcher"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
	"github.com/atelier-ml/atelier/runstate"
)

// stubCatalog knows one running run; any other call panics (the launcher
// routes make none).
type stubCatalog struct{ api.Catalog }

func (stubCatalog) GetRun(_ context.Context, project, id string) (catalog.Run, error) {
	return catalog.Run{ID: id, Project: project, State: runstate.Running}, nil
}

type stubEngine struct{ api.Engine }

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func main() {
	files := flag.Int("files", 5000, "files in the directory")
	size := flag.Int("file-size", 1024, "bytes per file")
	reps := flag.Int("reps", 5, "measured repetitions per mode (after a warm-up)")
	useS3 := flag.Bool("s3", false, "store on a versitygw (presigned URLs) rather than a directory")
	latency := flag.Duration("latency", 0, "added before the gateway answers each request (a pod's hop to the gateway's Service; loopback has none)")
	quick := flag.Bool("quick", false, "500 files, 2 reps")
	flag.Parse()
	if *quick {
		*files, *reps = 500, 2
	}
	if err := run(*files, *size, *reps, *useS3, *latency); err != nil {
		logf("launchsign: %v", err)
		os.Exit(1)
	}
}

type sample struct {
	up, down       time.Duration
	signUp, sig    int64
	slowest        time.Duration // the slowest sign request's handling, up and down
	cpuUp, cpuDown time.Duration // the process's CPU time (launcher and gateway both)
}

func run(files, size, reps int, useS3 bool, latency time.Duration) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "launchsign-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	storeURL, storeName := "file://"+filepath.Join(tmp, "store"), "a directory (bytes through the gateway)"
	if useS3 {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		srv, stop, err := s3test.Run(sctx, filepath.Join(tmp, "s3"))
		cancel()
		if err != nil {
			return err
		}
		defer stop()
		for _, kv := range srv.Env() {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
		storeURL, storeName = srv.URL("artifacts/"), "versitygw (presigned URLs)"
	} else if err := os.MkdirAll(filepath.Join(tmp, "store"), 0o755); err != nil {
		return err
	}
	store, err := artifactstore.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer store.Close()
	key, err := secretbox.NewLocalKeyURL()
	if err != nil {
		return err
	}
	box, err := secretbox.Open(ctx, key)
	if err != nil {
		return err
	}
	e, err := api.New(stubCatalog{}, stubEngine{}, api.WithLauncher(box, store), api.WithLogger(zap.NewNop()))
	if err != nil {
		return err
	}
	var signs, moves, slowest atomic.Int64 // slowest: ns, the slowest sign request's handling
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(latency)
		switch {
		case r.URL.Path == launch.SignPath:
			signs.Add(1)
			start := time.Now()
			defer func() {
				d := time.Since(start)
				for {
					old := slowest.Load()
					if int64(d) <= old || slowest.CompareAndSwap(old, int64(d)) {
						return
					}
				}
			}()
		case strings.HasPrefix(r.URL.Path, launch.ObjectsPath):
			moves.Add(1)
		}
		e.ServeHTTP(w, r)
	}))
	defer gw.Close()
	seal := func(inputs ...grant.GrantInput) (string, error) {
		return grant.Seal(ctx, box, grant.Grant{Project: "bench", Run: "run-1", Step: "s", Attempt: 1, Inputs: inputs, Expires: time.Now().Add(time.Hour)})
	}

	modes := []struct {
		name  string
		batch int
	}{{"one sign request per object (baseline: before batching)", 0}, {fmt.Sprintf("batched, %d objects per request", launch.Batch), launch.Batch}}
	results := make([][]sample, len(modes))
	for r := -1; r < reps; r++ { // r = -1: warm-up
		for m, mode := range modes {
			dir := filepath.Join(tmp, fmt.Sprintf("src-%d-%d", r+1, m))
			if err := writeDir(dir, files, size); err != nil {
				return err
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				return err
			}
			tok, err := seal()
			if err != nil {
				return err
			}
			c := launch.NewClient(gw.URL, tok, nil)
			c.SetBatch(mode.batch)
			signs.Store(0)
			moves.Store(0)
			slowest.Store(0)
			cpu0 := cpuTime()
			start := time.Now()
			o, err := tree.Put(ctx, c, root, "data", launcher.Parallel)
			root.Close()
			if err != nil {
				return fmt.Errorf("%s: upload: %w", mode.name, err)
			}
			var s sample
			s.up, s.signUp, s.cpuUp = time.Since(start), signs.Load(), cpuTime()-cpu0
			if o.Files != files {
				return fmt.Errorf("%s: stored %d files of %d", mode.name, o.Files, files)
			}
			movedUp := moves.Load()

			tok, err = seal(grant.GrantInput{Digest: o.Digest, Files: o.Files})
			if err != nil {
				return err
			}
			c = launch.NewClient(gw.URL, tok, nil)
			c.SetBatch(mode.batch)
			signs.Store(0)
			moves.Store(0)
			cpu0 = cpuTime()
			start = time.Now()
			if err := tree.Get(ctx, c, o, filepath.Join(tmp, fmt.Sprintf("dst-%d-%d", r+1, m)), launcher.Parallel); err != nil {
				return fmt.Errorf("%s: download: %w", mode.name, err)
			}
			s.down, s.sig, s.slowest, s.cpuDown = time.Since(start), signs.Load(), time.Duration(slowest.Load()), cpuTime()-cpu0
			logf("rep %d %s: up %s (%d sign requests, %d uploads through the gateway), down %s (%d, %d)", r+1, mode.name,
				s.up.Round(time.Millisecond), s.signUp, movedUp, s.down.Round(time.Millisecond), s.sig, moves.Load())
			if r >= 0 {
				results[m] = append(results[m], s)
			}
			os.RemoveAll(dir)
			os.RemoveAll(filepath.Join(tmp, fmt.Sprintf("dst-%d-%d", r+1, m)))
		}
	}

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("`go run ./bench/launchsign %s`, %s, %s, %d CPUs, load average %s\n\n",
		strings.Join(os.Args[1:], " "), time.Now().UTC().Format("2006-01-02"), runtime.Version(), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("A directory of %d files of %d bytes, store: %s, %s added per gateway request; %d reps per mode, interleaved, after a warm-up.\n\n", files, size, storeName, latency, reps)
	fmt.Println("| mode | sign requests up / down | upload p50 | min–max | ÷ baseline | download p50 | min–max | ÷ baseline | CPU s up / down, p50 | slowest sign request (max) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	baseUp, baseDown := p50(results[0], func(s sample) time.Duration { return s.up }), p50(results[0], func(s sample) time.Duration { return s.down })
	for m, mode := range modes {
		up := func(s sample) time.Duration { return s.up }
		down := func(s sample) time.Duration { return s.down }
		var slow time.Duration
		for _, s := range results[m] {
			slow = max(slow, s.slowest)
		}
		fmt.Printf("| %s | %d / %d | %s | %s | %.2f× | %s | %s | %.2f× | %.2f / %.2f | %d ms |\n", mode.name, results[m][0].signUp, results[m][0].sig,
			sec(p50(results[m], up)), spread(results[m], up), p50(results[m], up).Seconds()/baseUp.Seconds(),
			sec(p50(results[m], down)), spread(results[m], down), p50(results[m], down).Seconds()/baseDown.Seconds(),
			p50(results[m], func(s sample) time.Duration { return s.cpuUp }).Seconds(), p50(results[m], func(s sample) time.Duration { return s.cpuDown }).Seconds(),
			slow.Milliseconds())
	}
	return nil
}

func writeDir(dir string, files, size int) error {
	b := make([]byte, size)
	for i := range files {
		sub := filepath.Join(dir, "data", fmt.Sprintf("d%02d", i%50))
		if i < 50 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func p50(ss []sample, f func(sample) time.Duration) time.Duration {
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = f(s)
	}
	slices.Sort(ds)
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}

func spread(ss []sample, f func(sample) time.Duration) string {
	lo, hi := f(ss[0]), f(ss[0])
	for _, s := range ss {
		lo, hi = min(lo, f(s)), max(hi, f(s))
	}
	return sec(lo) + "–" + sec(hi)
}

// cpuTime is the process's user and system time: the launcher's and the
// gateway's work, which the neighbours of a shared machine disturb less
// than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
