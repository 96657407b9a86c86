// Command artifacts measures moving step artifacts through the
// content-addressed store (internal/platform/artifactstore) against direct
// gocloud.dev/blob transfers on the same S3 server: a versitygw
// (internal/stack/s3test.Run, posix backend on loopback) that the program
// starts itself.
//
//   - a large file up: Store.PutPath against io.Copy into bucket.NewWriter
//     (default WriterOptions), and down: Store.Get against
//     bucket.NewReader copied into a file;
//   - a directory of many small files up and down: PutPath/Get against a
//     direct copy of every file by -parallel goroutines;
//   - the peak memory of each transfer.
//
// Every transfer runs in a fresh child process of this binary (a hidden
// subcommand) that opens the bucket, times the transfer alone and reports
// its VmHWM (peak RSS) and CPU time, so one transfer's heap never counts
// for another. The program does not import bench/internal/benchstack: that
// brings the whole of Atelier (Temporal, Kubernetes clients), whose
// package initialization alone would add ~20 MiB to every child's RSS.
// See bench/doc.go.
//
//	go run ./bench/artifacts [-size 1GiB] [-files 10000] [-file-size 4KiB] [-reps 5] [-parallel 16] [-quick] [-only file,dir,shards] [-cpuprofile dir] [-memprofile dir]
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"
	"golang.org/x/sync/errgroup"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// Targets printed next to the figures (never asserted).
const (
	targetFileRatio = 0.9
	targetDirRatio  = 0.8
	targetPeakRSS   = 64 << 20
)

const (
	project = "bench"
	// childArg, as the first argument, makes the binary run one transfer
	// described on stdin (a job) and print its outcome on stdout.
	childArg = "__artifacts-transfer"
	// Prefixes of the two modes in the bucket.
	subjectPrefix  = "artifacts/"
	baselinePrefix = "direct/"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		os.Exit(child())
	}
	size := sizeFlag(1<<30, "size", "bytes of the large file (KiB, MiB, GiB suffixes)")
	files := flag.Int("files", 10000, "files of the directory")
	fileSize := sizeFlag(4<<10, "file-size", "bytes of each file of the directory")
	shards := flag.Int("shards", 4, "files of the directory of large files (0: skip it)")
	shardSize := sizeFlag(128<<20, "shard-size", "bytes of each file of the directory of large files")
	reps := flag.Int("reps", 5, "measured repetitions of each transfer and mode, interleaved, after a warm-up")
	parallel := flag.Int("parallel", artifactstore.DefaultParallel, "goroutines of the baseline's directory copy (the store's own is artifactstore.DefaultParallel)")
	quick := flag.Bool("quick", false, "smoke run: -size 64MiB -files 1000 -shard-size 32MiB -reps 2 unless given")
	tmpRoot := flag.String("dir", "", "where the server's data and the files go (default $TMPDIR)")
	profiles := flag.String("cpuprofile", "", "directory for a CPU profile of every measured transfer (<op>-<mode>-<rep>.pprof)")
	memProfiles := flag.String("memprofile", "", "directory for an allocation profile of every measured transfer (<op>-<mode>-<rep>.alloc.pprof)")
	only := flag.String("only", "", "measure only these transfers, comma-separated: file, dir, shards (default all)")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["size"] {
			*size = 64 << 20
		}
		if !set["files"] {
			*files = 1000
		}
		if !set["reps"] {
			*reps = 2
		}
		if !set["shard-size"] {
			*shardSize = 32 << 20
		}
	}
	if *size < 1 || *files < 1 || *fileSize < 0 || *shards < 0 || *shardSize < 0 || *reps < 1 || *parallel < 1 {
		fmt.Fprintln(os.Stderr, "artifacts: need -size, -files, -reps, -parallel >= 1 and -file-size, -shards, -shard-size >= 0")
		os.Exit(2)
	}
	measure := map[string]bool{"file": true, "dir": true, "shards": true}
	if *only != "" {
		clear(measure)
		for w := range strings.SplitSeq(*only, ",") {
			if _, ok := map[string]bool{"file": true, "dir": true, "shards": true}[w]; !ok {
				fmt.Fprintf(os.Stderr, "artifacts: -only %q: want file, dir or shards\n", w)
				os.Exit(2)
			}
			measure[w] = true
		}
	}
	if !measure["shards"] {
		*shards = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{size: int64(*size), files: *files, fileSize: int64(*fileSize), shards: *shards, shardSize: int64(*shardSize), reps: *reps, parallel: *parallel, profiles: *profiles, memProfiles: *memProfiles,
		file: measure["file"], dir: measure["dir"]}
	if err := run(ctx, cfg, *tmpRoot); err != nil {
		fmt.Fprintln(os.Stderr, "artifacts:", err)
		os.Exit(1)
	}
}

type config struct {
	size, fileSize, shardSize int64
	files, shards, reps       int
	parallel                  int
	profiles                  string
	memProfiles               string
	file, dir                 bool // measure the large file, the directory of small files
}

// --- the child: one transfer ---

// job is one transfer, run by a child process.
type job struct {
	Op      string // putFile, getFile, putDir, getDir
	Subject bool   // through the store; else the direct baseline
	URL     string // the bucket, with the mode's prefix
	// Puts: the file or directory Name inside Root.
	Root, Name string
	// Baseline: the object's key (a file), or the keys' prefix (a
	// directory: Key/<relative path>).
	Key string
	// Baseline getDir: the files' relative paths.
	Files []string
	// Subject gets: what PutPath returned.
	Object artifactstore.Object
	// Gets: where it lands (must not exist).
	Dest       string
	Parallel   int
	CPUProfile string
	MemProfile string
}

// outcome is what a child measured.
type outcome struct {
	Seconds float64 // the transfer alone (the bucket was opened before)
	Bytes   int64
	Files   int
	Object  artifactstore.Object // subject puts
	// The child's RSS (VmRSS) and peak RSS (VmHWM) once the bucket was
	// opened, before the first byte moved, and its peak RSS at the end.
	RSSBefore, HWMBefore, HWMAfter int64
	CPUSeconds                     float64 // user+system of the child during the transfer
	Err                            string
}

func child() int {
	var j job
	var out outcome
	err := json.NewDecoder(os.Stdin).Decode(&j)
	if err == nil {
		out, err = transfer(context.Background(), j)
	}
	if err != nil {
		out.Err = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "artifacts child:", err)
		return 1
	}
	if out.Err != "" {
		return 1
	}
	return 0
}

func transfer(ctx context.Context, j job) (outcome, error) {
	var out outcome
	var store *artifactstore.Store
	var bucket *blob.Bucket
	var err error
	if j.Subject {
		store, err = artifactstore.Open(ctx, j.URL)
		if err == nil {
			defer store.Close()
		}
	} else {
		bucket, err = blob.OpenBucket(ctx, j.URL)
		if err == nil {
			defer bucket.Close()
		}
	}
	if err != nil {
		return out, err
	}
	var root *os.Root
	if j.Root != "" {
		if root, err = os.OpenRoot(j.Root); err != nil {
			return out, err
		}
		defer root.Close()
	}
	out.RSSBefore, out.HWMBefore = procStatus("VmRSS:"), procStatus("VmHWM:")
	if j.CPUProfile != "" {
		f, err := os.Create(j.CPUProfile)
		if err != nil {
			return out, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return out, err
		}
	}
	cpu0 := selfCPU()
	t0 := time.Now()
	switch {
	case j.Subject && (j.Op == "putFile" || j.Op == "putDir"):
		out.Object, err = store.PutPath(ctx, project, root, j.Name)
		out.Bytes, out.Files = out.Object.Size, out.Object.Files
	case j.Subject && (j.Op == "getFile" || j.Op == "getDir"):
		err = store.Get(ctx, project, j.Object, j.Dest)
		out.Bytes, out.Files = j.Object.Size, j.Object.Files
	case j.Op == "putFile":
		out.Bytes, err = putDirect(ctx, bucket, filepath.Join(j.Root, j.Name), j.Key)
	case j.Op == "getFile":
		out.Bytes, err = getDirect(ctx, bucket, j.Key, j.Dest)
	case j.Op == "putDir":
		out.Bytes, out.Files, err = putDirDirect(ctx, bucket, root, j.Name, j.Key, j.Parallel)
	case j.Op == "getDir":
		out.Bytes, err = getDirDirect(ctx, bucket, j.Key, j.Files, j.Dest, j.Parallel)
		out.Files = len(j.Files)
	default:
		err = fmt.Errorf("unknown op %q", j.Op)
	}
	out.Seconds = time.Since(t0).Seconds()
	out.CPUSeconds = (selfCPU() - cpu0).Seconds()
	if j.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	out.HWMAfter = procStatus("VmHWM:")
	if j.MemProfile != "" && err == nil {
		f, err := os.Create(j.MemProfile)
		if err != nil {
			return out, err
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return out, err
		}
	}
	return out, err
}

// putDirect is the baseline upload: the file copied into a blob writer
// with default options.
func putDirect(ctx context.Context, b *blob.Bucket, file, key string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w, err := b.NewWriter(ctx, key, nil)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, f)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// getDirect is the baseline download: the blob's reader copied into a new
// file.
func getDirect(ctx context.Context, b *blob.Bucket, key, dest string) (int64, error) {
	r, err := b.NewReader(ctx, key, nil)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	f, err := os.Create(dest)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// putDirDirect walks the directory (as PutPath does) and uploads every
// file under prefix/<relative path>, parallel at a time.
func putDirDirect(ctx context.Context, b *blob.Bucket, root *os.Root, dir, prefix string, parallel int) (int64, int, error) {
	var rels []string
	err := fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rels = append(rels, strings.TrimPrefix(p, dir+"/"))
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	var total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	base := filepath.Join(root.Name(), dir)
	for _, rel := range rels {
		g.Go(func() error {
			n, err := putDirect(gctx, b, filepath.Join(base, filepath.FromSlash(rel)), prefix+"/"+rel)
			total.Add(n)
			return err
		})
	}
	err = g.Wait()
	return total.Load(), len(rels), err
}

// getDirDirect downloads prefix/<rel> to dest/<rel> for every rel,
// parallel at a time, the directories made first.
func getDirDirect(ctx context.Context, b *blob.Bucket, prefix string, rels []string, dest string, parallel int) (int64, error) {
	made := map[string]bool{}
	for _, rel := range rels {
		if d := filepath.Dir(filepath.Join(dest, filepath.FromSlash(rel))); !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return 0, err
			}
			made[d] = true
		}
	}
	var total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, rel := range rels {
		g.Go(func() error {
			n, err := getDirect(gctx, b, prefix+"/"+rel, filepath.Join(dest, filepath.FromSlash(rel)))
			total.Add(n)
			return err
		})
	}
	err := g.Wait()
	return total.Load(), err
}

// procStatus is a size field of /proc/self/status (VmRSS:, VmHWM:), in
// bytes.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// selfCPU is the user+system CPU time of this process so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// --- the parent: data, server, repetitions, report ---

// kase is one of the transfers measured.
type kase struct {
	name   string
	target float64 // subject/baseline MB/s; 0: none set
}

// The cases, in results' order.
const (
	fileUp = iota
	fileDown
	dirUp
	dirDown
	shardsUp
	shardsDown
	nCases
)

var cases = [nCases]kase{
	{"file up", targetFileRatio},
	{"file down", targetFileRatio},
	{"directory up", targetDirRatio},
	{"directory down", targetDirRatio},
	// A model's shards: a few large files in parallel (no target of its
	// own in the issue; there for the memory of parallel large uploads).
	{"large files up", 0},
	{"large files down", 0},
}

// sample is one measured transfer, as the parent saw it.
type sample struct {
	outcome
	serverCPU float64 // CPU seconds of versitygw over the child's life
	maxRSS    int64   // the child's ru_maxrss (bytes), a cross-check of HWMAfter
}

type bench struct {
	cfg     config
	srv     *s3test.Server
	env     []string
	self    string
	work    string // the files: sources and downloads
	results [len(modesOrder)][nCases][]sample
	loads   []float64 // 1-minute load average before each measured transfer
}

// modesOrder indexes results: 0 baseline, 1 subject.
var modesOrder = [2]string{"baseline", "subject"}

func run(ctx context.Context, cfg config, tmpRoot string) error {
	load0 := loadAvg()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(tmpRoot, "atelier-bench-artifacts-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, d := range []string{"server", "work"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Minute) // may build versitygw
	srv, stopServer, err := s3test.Run(sctx, filepath.Join(tmp, "server"))
	cancel()
	if err != nil {
		return err
	}
	defer stopServer()
	logf("versitygw %s on %s, data in %s", devstack.VersityGWVersion, srv.Endpoint, tmp)
	for _, d := range []string{cfg.profiles, cfg.memProfiles} {
		if d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	b := &bench{cfg: cfg, srv: srv, env: append(os.Environ(), srv.Env()...), self: self, work: filepath.Join(tmp, "work")}
	var loadWarm string
	for rep := 0; rep <= cfg.reps; rep++ { // rep 0 is the warm-up
		if b.cfg.file {
			if err := b.fileRound(ctx, rep); err != nil {
				return err
			}
		}
		files, shards := b.cfg.files, b.cfg.shards
		if rep == 0 {
			files, shards = min(files, 500), min(shards, 2)
		}
		if b.cfg.dir {
			if err := b.dirRound(ctx, rep, dirUp, files, b.cfg.fileSize, 100); err != nil {
				return err
			}
		}
		if shards > 0 {
			size := b.cfg.shardSize
			if rep == 0 {
				size = min(size, 16<<20)
			}
			if err := b.dirRound(ctx, rep, shardsUp, shards, size, shards); err != nil {
				return err
			}
		}
		if rep == 0 {
			loadWarm = loadAvg()
		}
	}
	b.report(load0, loadWarm, loadAvg())
	return nil
}

// order is who goes first in a repetition: the baseline in even ones, the
// subject in odd ones, so neither always runs on a page cache or server
// the other just warmed.
func order(rep int) []int {
	if rep%2 == 0 {
		return []int{0, 1}
	}
	return []int{1, 0}
}

func (b *bench) fileRound(ctx context.Context, rep int) error {
	size := b.cfg.size
	if rep == 0 {
		size = min(size, 64<<20)
	}
	src := filepath.Join(b.work, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := writeRandomFile(filepath.Join(src, "model.bin"), size, newRand()); err != nil {
		return err
	}
	key := fmt.Sprintf("rep%d/model.bin", rep)
	var obj artifactstore.Object
	for _, m := range order(rep) {
		j := job{Op: "putFile", Subject: m == 1, Root: src, Name: "model.bin", Key: key}
		out, err := b.measure(ctx, rep, fileUp, m, j)
		if err != nil {
			return err
		}
		if m == 1 {
			obj = out.Object
		}
	}
	dests := [2]string{filepath.Join(b.work, "down-baseline.bin"), filepath.Join(b.work, "down-subject.bin")}
	defer func() {
		for _, d := range dests {
			os.Remove(d)
		}
	}()
	for _, m := range order(rep) {
		j := job{Op: "getFile", Subject: m == 1, Key: key, Object: obj, Dest: dests[m]}
		if _, err := b.measure(ctx, rep, fileDown, m, j); err != nil {
			return err
		}
	}
	// The subject checked its digest; check the baseline's bytes too.
	if sum, err := fileDigest(dests[0]); err != nil || sum != obj.Digest {
		return fmt.Errorf("baseline download: %s, %v; want %s", sum, err, obj.Digest)
	}
	return b.clearBucket()
}

// dirRound moves a directory of files files of size bytes, perDir to a
// subdirectory, up (case up) and down (case up+1).
func (b *bench) dirRound(ctx context.Context, rep, up, files int, size int64, perDir int) error {
	src := filepath.Join(b.work, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	rels, err := writeRandomTree(filepath.Join(src, "dataset"), files, size, perDir, newRand())
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("rep%d/dataset", rep)
	var obj artifactstore.Object
	for _, m := range order(rep) {
		j := job{Op: "putDir", Subject: m == 1, Root: src, Name: "dataset", Key: prefix, Parallel: b.cfg.parallel}
		out, err := b.measure(ctx, rep, up, m, j)
		if err != nil {
			return err
		}
		if out.Files != files {
			return fmt.Errorf("%s directory up: %d files, want %d", modesOrder[m], out.Files, files)
		}
		if m == 1 {
			obj = out.Object
		}
	}
	dests := [2]string{filepath.Join(b.work, "down-baseline"), filepath.Join(b.work, "down-subject")}
	defer func() {
		for _, d := range dests {
			os.RemoveAll(d)
		}
	}()
	for _, m := range order(rep) {
		j := job{Op: "getDir", Subject: m == 1, Key: prefix, Files: rels, Object: obj, Dest: dests[m], Parallel: b.cfg.parallel}
		out, err := b.measure(ctx, rep, up+1, m, j)
		if err != nil {
			return err
		}
		if out.Bytes != int64(files)*size {
			return fmt.Errorf("%s directory down: %d bytes, want %d", modesOrder[m], out.Bytes, int64(files)*size)
		}
	}
	for _, rel := range []string{rels[0], rels[len(rels)-1]} {
		want, err := os.ReadFile(filepath.Join(src, "dataset", rel))
		if err != nil {
			return err
		}
		for _, d := range dests {
			if got, err := os.ReadFile(filepath.Join(d, rel)); err != nil || !bytes.Equal(got, want) {
				return fmt.Errorf("%s: downloaded bytes differ (%v)", filepath.Join(d, rel), err)
			}
		}
	}
	return b.clearBucket()
}

// clearBucket removes every object both modes stored, straight from the
// posix backend's directory (an object is a file there): fresh bytes come
// next anyway, and 2×10,000 DELETE requests would only add time.
func (b *bench) clearBucket() error {
	for _, p := range []string{subjectPrefix, baselinePrefix} {
		if err := os.RemoveAll(filepath.Join(b.srv.Dir, b.srv.Bucket, p)); err != nil {
			return err
		}
	}
	return nil
}

// measure runs one transfer in a child process, after sync(2) so that no
// earlier write-back competes with it.
func (b *bench) measure(ctx context.Context, rep, c, m int, j job) (outcome, error) {
	prefix := baselinePrefix
	if j.Subject {
		prefix = subjectPrefix
	}
	j.URL = b.srv.URL(prefix)
	label := fmt.Sprintf("%s, %s, rep %d/%d", cases[c].name, modesOrder[m], rep, b.cfg.reps)
	if rep == 0 {
		label = fmt.Sprintf("%s, %s, warm-up", cases[c].name, modesOrder[m])
	} else {
		if b.cfg.profiles != "" {
			j.CPUProfile = filepath.Join(b.cfg.profiles, fmt.Sprintf("%s-%s-%d.pprof", j.Op, modesOrder[m], rep))
		}
		if b.cfg.memProfiles != "" {
			j.MemProfile = filepath.Join(b.cfg.memProfiles, fmt.Sprintf("%s-%s-%d.alloc.pprof", j.Op, modesOrder[m], rep))
		}
	}
	in, err := json.Marshal(j)
	if err != nil {
		return outcome{}, err
	}
	syscall.Sync()
	cmd := exec.CommandContext(ctx, b.self, childArg)
	cmd.Env = b.env
	cmd.Stdin = bytes.NewReader(in)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if rep > 0 {
		b.loads = append(b.loads, load1())
	}
	srv0 := procCPU(b.srv.PID)
	runErr := cmd.Run()
	s := sample{serverCPU: (procCPU(b.srv.PID) - srv0).Seconds()}
	if err := json.Unmarshal(stdout.Bytes(), &s.outcome); err != nil {
		return outcome{}, fmt.Errorf("%s: %v (child output %q)", label, errors.Join(runErr, err), stdout.String())
	}
	if s.Err != "" || runErr != nil {
		return outcome{}, fmt.Errorf("%s: %s %v", label, s.Err, runErr)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.maxRSS = ru.Maxrss << 10
	}
	logf("%-32s %8.1f MB/s %6.2f s, peak RSS %s MiB, CPU client %.2f s server %.2f s",
		label, mbps(s), s.Seconds, mib(s.HWMAfter), s.CPUSeconds, s.serverCPU)
	if rep > 0 {
		b.results[m][c] = append(b.results[m][c], s)
	}
	return s.outcome, nil
}

func mbps(s sample) float64 { return float64(s.Bytes) / 1e6 / s.Seconds }

func mib(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }

// newRand is a fast generator with a fresh seed: every repetition's bytes
// are new, so the content-addressed store never finds them stored.
func newRand() *mrand.ChaCha8 {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return mrand.NewChaCha8(seed)
}

func writeRandomFile(name string, size int64, r *mrand.ChaCha8) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		_, _ = r.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	return f.Close()
}

// writeRandomTree writes files files of size bytes under dir, perDir to a
// subdirectory, and returns their slash-separated relative paths.
func writeRandomTree(dir string, files int, size int64, perDir int, r *mrand.ChaCha8) ([]string, error) {
	rels := make([]string, 0, files)
	for i := range files {
		rel := path.Join(fmt.Sprintf("d%03d", i/perDir), fmt.Sprintf("f%05d.bin", i))
		name := filepath.Join(dir, filepath.FromSlash(rel))
		if i%perDir == 0 {
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return nil, err
			}
		}
		if err := writeRandomFile(name, size, r); err != nil {
			return nil, err
		}
		rels = append(rels, rel)
	}
	return rels, nil
}

func fileDigest(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// procCPU is the user+system CPU time of process pid (0 if unreadable).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticksPerSecond
}

// --- report ---

type stats struct{ med, lo, hi float64 }

func summarize(v []float64) stats {
	if len(v) == 0 {
		return stats{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{med, s[0], s[len(s)-1]}
}

func collect(ss []sample, f func(sample) float64) stats {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	return summarize(v)
}

func (b *bench) report(load0, loadWarm, loadEnd string) {
	out := os.Stdout
	cfg := b.cfg
	fmt.Fprintf(out, "## bench/artifacts: step artifacts through the content-addressed store vs direct blob transfers\n\n")
	fmt.Fprintf(out, "Command: `%s`\n\n", commandLine())
	l := summarize(b.loads)
	fmt.Fprintf(out, "Machine: %s/%s, %s, NumCPU=%d, GOMAXPROCS=%d, loadavg at start %s, after the warm-up %s, at end %s; "+
		"1-minute load before the measured transfers: median %.2f, min–max %.2f–%.2f (the benchmark's own server and client count in it); %s; %s\n\n",
		runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), load0, loadWarm, loadEnd,
		l.med, l.lo, l.hi, runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "Server: versitygw %s, posix backend, on loopback (its data on the same disk as the files). Client: %s.\n\n",
		devstack.VersityGWVersion, modVersions("gocloud.dev", "github.com/aws/aws-sdk-go-v2/service/s3", "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"))
	fmt.Fprintf(out, "Large file: %s MiB; directory: %d files of %d bytes (100 per subdirectory); directory of large files: %d files of %s MiB. R=%d measured repetitions per transfer and mode, "+
		"baseline and subject interleaved (who goes first alternates) after a warm-up round at small sizes; fresh random bytes every repetition; "+
		"every transfer in a fresh child process (bucket opened, then timed), after sync(2); objects removed between repetitions. MB = 10⁶ bytes.\n\n",
		mib(cfg.size), cfg.files, cfg.fileSize, cfg.shards, mib(cfg.shardSize), cfg.reps)
	fmt.Fprintf(out, "- file up: subject `Store.PutPath` (hash the whole and each part in one read, look the digest up, upload the parts with their sha256 for the server to check); baseline `io.Copy` of the file into `bucket.NewWriter` (default WriterOptions).\n")
	fmt.Fprintf(out, "- file down: subject `Store.Get` (temporary file beside dest, digest check, rename); baseline `bucket.NewReader` copied into a new file.\n")
	fmt.Fprintf(out, "- directory up/down (both directories): subject `PutPath`/`Get` (%d files at a time, plus the manifest); baseline a walk of the directory / the known list of files, each file copied as above by %d goroutines.\n\n",
		artifactstore.DefaultParallel, cfg.parallel)

	fmt.Fprintf(out, "| transfer | mode | MB/s median | MB/s min–max | files/s median | s median | client CPU s | server CPU s | peak RSS MiB median (max) | ready RSS MiB | transfer's own MiB: peak − ready, median (max) |\n")
	fmt.Fprintf(out, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for c, k := range cases {
		if len(b.results[0][c]) == 0 {
			continue
		}
		for m, name := range modesOrder {
			ss := b.results[m][c]
			rate := collect(ss, mbps)
			fps := "—"
			if c >= dirUp {
				fps = fmt.Sprintf("%.0f", collect(ss, func(s sample) float64 { return float64(s.Files) / s.Seconds }).med)
			}
			peak := collect(ss, func(s sample) float64 { return float64(s.HWMAfter) })
			ready := collect(ss, func(s sample) float64 { return float64(s.RSSBefore) })
			own := collect(ss, func(s sample) float64 { return float64(s.HWMAfter - s.RSSBefore) })
			label := name
			if m == 1 {
				label = "**subject**"
			}
			fmt.Fprintf(out, "| %s | %s | %.1f | %.1f–%.1f | %s | %.2f | %.2f | %.2f | %s (%s) | %s | %s (%s) |\n", k.name, label,
				rate.med, rate.lo, rate.hi, fps, collect(ss, func(s sample) float64 { return s.Seconds }).med,
				collect(ss, func(s sample) float64 { return s.CPUSeconds }).med,
				collect(ss, func(s sample) float64 { return s.serverCPU }).med,
				mib(int64(peak.med)), mib(int64(peak.hi)), mib(int64(ready.med)), mib(int64(own.med)), mib(int64(own.hi)))
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| figure | measured | per-repetition subject/baseline min–max | target | |\n|---|---|---|---|---|\n")
	for c, k := range cases {
		if len(b.results[0][c]) == 0 {
			continue
		}
		base, subj := collect(b.results[0][c], mbps), collect(b.results[1][c], mbps)
		var paired []float64
		for i := range min(len(b.results[0][c]), len(b.results[1][c])) {
			paired = append(paired, mbps(b.results[1][c][i])/mbps(b.results[0][c][i]))
		}
		p := summarize(paired)
		ratio := subj.med / base.med
		target, v := "—", ""
		if k.target > 0 {
			target, v = fmt.Sprintf("≥ %.1f×", k.target), verdict(ratio >= k.target)
		}
		fmt.Fprintf(out, "| %s: subject/baseline MB/s (medians) | %.2f× | %.2f–%.2f× | %s | %s |\n",
			k.name, ratio, p.lo, p.hi, target, v)
	}
	for c, k := range cases {
		if len(b.results[0][c]) == 0 {
			continue
		}
		cpu := func(s sample) float64 { return s.CPUSeconds + s.serverCPU }
		fmt.Fprintf(out, "| %s: baseline/subject CPU (client + server, medians): the ratio a CPU-bound machine tends to | %.2f× | | — | |\n",
			k.name, collect(b.results[0][c], cpu).med/collect(b.results[1][c], cpu).med)
	}
	for m, name := range modesOrder {
		for _, f := range []struct {
			what string
			v    func(sample) int64
		}{
			{"transfer's own memory (peak − ready RSS)", func(s sample) int64 { return s.HWMAfter - s.RSSBefore }},
			{"peak RSS of the whole transfer process", func(s sample) int64 { return s.HWMAfter }},
		} {
			var worst int64
			var at string
			for c, k := range cases {
				for _, s := range b.results[m][c] {
					if v := f.v(s); v > worst {
						worst, at = v, k.name
					}
				}
			}
			target, v := "—", ""
			if m == 1 {
				target, v = fmt.Sprintf("< %d MiB", targetPeakRSS>>20), verdict(worst < targetPeakRSS)
			}
			fmt.Fprintf(out, "| %s: highest %s, over all transfers (%s) | %s MiB | | %s | %s |\n", name, f.what, at, mib(worst), target, v)
		}
	}
	fmt.Fprintf(out, "\nPeak RSS is the child's VmHWM at the end of the transfer: the whole process (Go runtime, AWS SDK, buffers, default GOGC). "+
		"Ready RSS is its VmRSS once the bucket was opened, before the first byte moved; the difference is what the transfer itself added.\n")
}

// logf writes a progress line to stderr (the report goes to stdout).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// commandLine is the go run invocation that reproduces this run.
func commandLine() string {
	parts := []string{"go", "run", "./bench/artifacts"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " '\"$\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// verdict is "meets" or "MISSES": a printed target, never an assertion.
func verdict(ok bool) string {
	if ok {
		return "meets"
	}
	return "MISSES"
}

func modVersions(paths ...string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown versions"
	}
	var parts []string
	for _, p := range paths {
		for _, d := range bi.Deps {
			if d.Path == p {
				parts = append(parts, p+" "+d.Version)
			}
		}
	}
	return strings.Join(parts, ", ")
}

// load1 is the 1-minute load average.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// --- sizes ---

type byteSize int64

func sizeFlag(def int64, name, usage string) *byteSize {
	v := byteSize(def)
	flag.Var(&v, name, usage)
	return &v
}

func (b *byteSize) String() string {
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if *b >= byteSize(u.n) && int64(*b)%u.n == 0 {
			return fmt.Sprintf("%d%s", int64(*b)/u.n, u.s)
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Set(s string) error {
	units := []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.s); ok {
			s, mult = num, u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return fmt.Errorf("%q: want a number of bytes, optionally with KiB, MiB or GiB", s)
	}
	*b = byteSize(n * mult)
	return nil
}
