package benchstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// CPU is the processor time (user + system) spent so far by the parts of
// a benchmark that run as separate processes. Throughput ratios move with
// whatever else the machine runs; CPU per operation does not, so a
// benchmark that prints both can tell a slower subject from a busier
// machine.
type CPU struct {
	// Bench is this process: clients, and the in-process gateway and
	// worker when the stack has them.
	Bench time.Duration
	// Temporal is the dev server and any other child process.
	Temporal time.Duration
	// Postgres is the server backends connected to the benchmark's
	// database (not the server's shared writer and checkpointer
	// processes, which other users of a shared server also drive).
	Postgres time.Duration
}

// Sub is c - o, part by part.
func (c CPU) Sub(o CPU) CPU {
	return CPU{Bench: c.Bench - o.Bench, Temporal: c.Temporal - o.Temporal, Postgres: c.Postgres - o.Postgres}
}

// Total is the sum of the parts.
func (c CPU) Total() time.Duration { return c.Bench + c.Temporal + c.Postgres }

// CPU reads the processor time of the stack's processes from /proc
// (Linux; elsewhere the parts read zero). A Postgres backend that closed
// since the last reading takes its time with it: the pool keeps its
// connections for the length of a benchmark.
func (s *Stack) CPU(ctx context.Context) CPU {
	self := os.Getpid()
	c := CPU{Bench: procCPU(self)}
	for _, pid := range childPIDs(self) {
		c.Temporal += procCPU(pid)
	}
	pids, _ := s.backendPIDs(ctx)
	for _, pid := range pids {
		c.Postgres += procCPU(pid)
	}
	return c
}

// backendPIDs lists the Postgres backends connected to the benchmark's
// database (none without one).
func (s *Stack) backendPIDs(ctx context.Context) ([]int, error) {
	if s.dbURL == "" {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, err
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU is utime + stime of pid (0 when it cannot be read).
func procCPU(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[13], 10, 64)
	stime, _ := strconv.ParseInt(f[14], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

// statFields splits /proc/<pid>/stat; the command name (field 2) may
// hold spaces, so fields are counted from its closing parenthesis.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return append([]string{strconv.Itoa(pid), s[:i+1]}, strings.Fields(s[i+1:])...)
}

// childPIDs lists the direct children of pid.
func childPIDs(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	parent := strconv.Itoa(pid)
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(p); len(f) > 3 && f[3] == parent {
			out = append(out, p)
		}
	}
	return out
}

// PinSplit puts the Temporal server (and every other child process) on
// CPU 0 and this process and the benchmark database's Postgres backends
// on CPU 1, thread by thread, so that the engine and what runs in front
// of it (clients, gateway, catalogue) no longer take each other's
// processor time, as when they run on separate machines. Threads created
// later inherit their creator's CPU. It needs two CPUs and Linux.
func (s *Stack) PinSplit(ctx context.Context) error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("pinning needs 2 CPUs, this machine has %d", runtime.NumCPU())
	}
	var engine, front unix.CPUSet
	engine.Set(0)
	front.Set(1)
	self := os.Getpid()
	children := childPIDs(self)
	if len(children) == 0 {
		return fmt.Errorf("pinning: no Temporal server process among this process's children")
	}
	for _, pid := range children {
		if err := pinProcess(pid, &engine); err != nil {
			return err
		}
	}
	if err := pinProcess(self, &front); err != nil {
		return err
	}
	runtime.GOMAXPROCS(1)
	pids, err := s.backendPIDs(ctx)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := pinProcess(pid, &front); err != nil {
			return err
		}
	}
	return nil
}

// pinProcess sets the CPU affinity of every thread of pid.
func pinProcess(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return fmt.Errorf("pinning %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread that exited since the listing is not an error.
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pinning thread %d of %d: %w", tid, pid, err)
		}
	}
	return nil
}
