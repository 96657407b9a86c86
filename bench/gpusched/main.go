// Command gpusched measures one decision cycle of the GPU admission
// scheduler (gpu.Schedule) on a synthetic snapshot of 10,000 pending
// workloads × 1,000 nodes (gpu/gpusynth), against two baselines measured
// in the same run: the same snapshot with an empty queue (the fixed cost
// of a cycle) and a one-admission-per-cycle loop (Kueue admits one head
// per ClusterQueue per cycle). No Temporal, no Postgres: the scheduler is
// pure. See bench/doc.go.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/gpu/gpusynth"
)

// Targets printed next to the figures (never asserted).
const targetP99 = 10 * time.Millisecond

func main() {
	reps := flag.Int("r", 300, "measured cycles per mode, interleaved in rounds of 20, after a warm-up")
	naive := flag.Int("naive", 3, "repetitions of the one-per-cycle baseline (each runs one cycle per admission)")
	pending := flag.Int("pending", 10000, "pending workloads")
	nodes := flag.Int("nodes", 1000, "nodes")
	seed := flag.Uint64("seed", 1, "snapshot seed")
	quick := flag.Bool("quick", false, "smoke run: -r 40 -naive 1 unless given")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["r"] {
			*reps = 40
		}
		if !set["naive"] {
			*naive = 1
		}
	}
	if *reps < 1 || *pending < 1 || *nodes < 1 {
		fmt.Fprintln(os.Stderr, "gpusched: need -r, -pending and -nodes >= 1")
		os.Exit(2)
	}
	cfg := gpusynth.Default()
	cfg.Pending, cfg.Nodes, cfg.Seed = *pending, *nodes, *seed
	run(cfg, *reps, *naive)
}

func timed(s gpu.Snapshot) (time.Duration, gpu.Plan) {
	start := time.Now()
	p := gpu.Schedule(s)
	return time.Since(start), p
}

// threadCPU is the CPU time of the calling OS thread (the measuring
// goroutine is locked to it): what a cycle costs, without the time spent
// waiting for a core on a loaded machine (GC work on other threads is not
// counted; GC assists are).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3 // CLOCK_THREAD_CPUTIME_ID (Linux)
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

func timedCPU(s gpu.Snapshot, cpu *[]time.Duration) (time.Duration, gpu.Plan) {
	c0 := threadCPU()
	d, p := timed(s)
	*cpu = append(*cpu, threadCPU()-c0)
	return d, p
}

func run(cfg gpusynth.Config, reps, naiveReps int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	load0 := loadAvg()
	benchstack.Logf("building the snapshot (%d pending × %d nodes)", cfg.Pending, cfg.Nodes)
	snap := gpusynth.Snapshot(cfg)
	empty := snap
	empty.Pending = nil

	_, plan := timed(snap)
	for range 5 { // warm-up
		timed(snap)
		timed(empty)
	}
	const round = 20
	var subj, base, subjCPU, baseCPU []time.Duration
	var subjRound, baseRound []time.Duration // per-round p50
	for done := 0; done < reps; {
		n := min(round, reps-done)
		var rs, rb []time.Duration
		for range n {
			d, _ := timedCPU(empty, &baseCPU)
			rb = append(rb, d)
			d, p := timedCPU(snap, &subjCPU)
			rs = append(rs, d)
			if len(p.Admissions) != len(plan.Admissions) {
				fmt.Fprintln(os.Stderr, "gpusched: plan changed between identical cycles")
				os.Exit(1)
			}
		}
		subj, base = append(subj, rs...), append(base, rb...)
		subjRound = append(subjRound, benchstack.Summarize(rs).P50)
		baseRound = append(baseRound, benchstack.Summarize(rb).P50)
		done += n
		benchstack.Logf("%d/%d cycles: subject p50 %s ms, empty-queue p50 %s ms", done, reps,
			benchstack.Ms(benchstack.Summarize(rs).P50), benchstack.Ms(benchstack.Summarize(rb).P50))
	}

	// One admission per cycle until as many are admitted as the subject
	// admitted in one cycle.
	var naiveTotal []time.Duration
	var naiveCycles, naiveAdmitted int
	for rep := range naiveReps {
		total, cycles, admitted := oneAtATime(snap, len(plan.Admissions))
		naiveTotal, naiveCycles, naiveAdmitted = append(naiveTotal, total), cycles, admitted
		benchstack.Logf("one-per-cycle %d/%d: %d admitted in %d cycles, %s ms", rep+1, naiveReps, admitted, cycles, benchstack.Ms(total))
	}
	report(cfg, snap, plan, subj, base, subjRound, baseRound, subjCPU, baseCPU, naiveTotal, naiveCycles, naiveAdmitted, reps, load0)
}

// oneAtATime admits only the first admission of each cycle's plan (the
// workload moves to Running), as a one-head-per-cycle scheduler would,
// until want workloads are admitted or a cycle admits none.
func oneAtATime(s gpu.Snapshot, want int) (time.Duration, int, int) {
	s.Running = slices.Clone(s.Running)
	s.Pending = slices.Clone(s.Pending)
	var total time.Duration
	cycles, admitted := 0, 0
	for ; admitted < want; admitted++ {
		d, p := timed(s)
		total += d
		cycles++
		if len(p.Admissions) == 0 {
			break
		}
		a := p.Admissions[0]
		i := slices.IndexFunc(s.Pending, func(w gpu.Workload) bool { return w.ID == a.Workload })
		s.Running = append(s.Running, gpu.Running{Workload: s.Pending[i], Admitted: s.Now, Placement: a.Placement})
		s.Pending = slices.Delete(s.Pending, i, i+1)
	}
	return total, cycles, admitted
}

func report(cfg gpusynth.Config, snap gpu.Snapshot, plan gpu.Plan, subj, base, subjRound, baseRound, subjCPU, baseCPU, naive []time.Duration, naiveCycles, naiveAdmitted, reps int, load0 string) {
	out := os.Stdout
	fmt.Fprintf(out, "## bench/gpusched: one GPU admission cycle\n\n")
	fmt.Fprintf(out, "Command: `%s`\n\n", benchstack.CommandLine("gpusched"))
	fmt.Fprintf(out, "Machine: %s/%s, %s, NumCPU=%d, GOMAXPROCS=%d, loadavg at start %s, at end %s; %s; %s\n\n",
		runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), load0, loadAvg(),
		runtime.Version(), time.Now().UTC().Format(time.RFC3339))

	gpus := map[gpu.Resource]int{}
	for _, n := range snap.Inventory.Nodes {
		gpus[n.GPUType] += n.GPUs
		for _, m := range n.MIG {
			gpus[m.Profile] += m.Allocatable
		}
	}
	held := 0
	for _, r := range snap.Running {
		for _, ps := range r.PodSets {
			held += ps.Count * ps.Per
		}
	}
	total := 0
	var fleet []string
	for _, r := range []gpu.Resource{gpusynth.A100, gpusynth.H100, gpusynth.L4, gpusynth.MIG} {
		fleet = append(fleet, fmt.Sprintf("%d %s", gpus[r], r))
		total += gpus[r]
	}
	fmt.Fprintf(out, "Snapshot (gpusynth, seed %d): %d nodes offering %s; %d projects in %d cohorts; %d running workloads holding %d of %d units (%.0f%%); %d pending.\n\n",
		cfg.Seed, len(snap.Inventory.Nodes), strings.Join(fleet, ", "), len(snap.Policy.Projects), cfg.Cohorts,
		len(snap.Running), held, total, 100*float64(held)/float64(total), len(snap.Pending))
	reasons := map[gpu.WaitReason]int{}
	for _, w := range plan.Waits {
		reasons[w.Reason]++
	}
	var rs []string
	for _, r := range []gpu.WaitReason{gpu.WaitQuota, gpu.WaitCapacity, gpu.WaitNoNodeFits, gpu.WaitNeverFits, gpu.WaitReservation, gpu.WaitPreemption, gpu.WaitInvalid} {
		if reasons[r] > 0 {
			rs = append(rs, fmt.Sprintf("%s %d", r, reasons[r]))
		}
	}
	fmt.Fprintf(out, "Plan: %d admitted, %d preemptions, %d reservations; waits: %s.\n\n",
		len(plan.Admissions), len(plan.Preemptions), len(plan.Reservations), strings.Join(rs, ", "))

	fmt.Fprintf(out, "%d cycles per mode, interleaved (empty queue, subject, ...) in rounds of 20 after a warm-up; wall time of one gpu.Schedule call, GC included.\n\n", reps)
	fmt.Fprintf(out, "| mode | p50 ms | p90 ms | p99 ms | max ms | per-round p50 min–max ms |\n|---|---|---|---|---|---|\n")
	row := func(name string, d, r []time.Duration) benchstack.Summary {
		s := benchstack.Summarize(d)
		lo, hi := benchstack.MinMax(r)
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s–%s |\n", name, benchstack.Ms(s.P50), benchstack.Ms(s.P90),
			benchstack.Ms(s.P99), benchstack.Ms(s.Max), benchstack.Ms(lo), benchstack.Ms(hi))
		return s
	}
	b := row("baseline: empty queue (same fleet and running workloads)", base, baseRound)
	s := row(fmt.Sprintf("**subject: %d pending**", len(snap.Pending)), subj, subjRound)
	fmt.Fprintln(out)
	fmt.Fprintf(out, "CPU time of the measuring thread per cycle (excludes waiting for a core; GC assists included, background GC on other threads not):\n\n")
	fmt.Fprintf(out, "| mode | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|\n")
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"baseline: empty queue", baseCPU}, {"subject", subjCPU}} {
		c := benchstack.Summarize(m.d)
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s |\n", m.name, benchstack.Ms(c.P50), benchstack.Ms(c.P90), benchstack.Ms(c.P99), benchstack.Ms(c.Max))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| figure | measured | target |\n|---|---|---|\n")
	fmt.Fprintf(out, "| subject p99 (wall) | %s ms | ≤ %s ms — %s |\n", benchstack.Ms(s.P99), benchstack.Ms(targetP99), benchstack.Verdict(s.P99 <= targetP99))
	c := benchstack.Summarize(subjCPU)
	fmt.Fprintf(out, "| subject p99 (thread CPU) | %s ms | ≤ %s ms — %s |\n", benchstack.Ms(c.P99), benchstack.Ms(targetP99), benchstack.Verdict(c.P99 <= targetP99))
	fmt.Fprintf(out, "| subject / empty queue, p50 | %s | — |\n", benchstack.Ratio(float64(s.P50), float64(b.P50)))
	fmt.Fprintf(out, "| cost per pending workload, p50 | %.0f ns | — |\n", float64(s.P50-b.P50)/float64(len(snap.Pending)))
	if len(naive) > 0 {
		n := benchstack.Summarize(naive)
		fmt.Fprintf(out, "| one-per-cycle baseline: cycles until it has admitted the subject's %d (or a cycle admits none) | %s ms over %d cycles, %d admitted (median of %d runs) | — |\n",
			len(plan.Admissions), benchstack.Ms(n.P50), naiveCycles, naiveAdmitted, len(naive))
		fmt.Fprintf(out, "| one-per-cycle / subject (p50), same admissions | %s | — |\n", benchstack.Ratio(float64(n.P50), float64(s.P50)))
	}
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
