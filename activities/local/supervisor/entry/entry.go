// Package entry is the supervisor process itself (see package supervisor):
// the init that takes a process of the worker's binary over when it is
// started as a supervisor, and what that process does.
//
// It imports only packages the Go runtime initializes first (os, syscall,
// time, errors): Go initializes packages in import-path order as soon as
// their imports are, so this package's init runs before the binary's other
// packages (Kubernetes, Temporal, OpenTelemetry clients: tens of
// milliseconds of init on a busy machine) and the supervisor costs about
// what starting a small program costs. Hence no fmt, strconv, path/filepath
// or encoding/json here: the spec arrives NUL-separated (EncodeSpec) and
// the records are written as JSON by hand (record.go). docs/benchmarks.md
// has the figures.
package entry

import (
	"errors"
	"time"
)

const (
	// EnvVar set to "1" and argv[0] Argv0 make a process of the worker's
	// binary a supervisor.
	EnvVar = "ATELIER_STEP_SUPERVISOR"
	Argv0  = "atelier-step-supervisor"

	// Files of the attempt directory.
	StartedFile = "started.json"
	ExitFile    = "exit.json"
	LeaseFile   = "lease"
	OutputFile  = "output"
)

// Spec is what a supervisor runs.
type Spec struct {
	Path string   // the program, already resolved
	Args []string // argv, argv[0] included
	Env  []string
	Dir  string // the working directory
	// Credential runs the process as another user (nil: the supervisor's).
	Credential *Credential
	// Request and Execution identify what runs; they are copied into the
	// records so a worker adopts only the attempt it was delivered.
	Request   string
	Execution int
	// OrphanAfter is how long the supervisor keeps the step running with
	// no worker renewing the lease. 0 attaches it to the worker instead:
	// supervisor and step die with the worker's forking thread.
	OrphanAfter time.Duration
	// Grace is the time between SIGTERM and SIGKILL when the supervisor
	// stops an orphan.
	Grace time.Duration
}

// Credential is a user and group to run the step as, with no
// supplementary groups.
type Credential struct {
	UID, GID uint32
}

// EncodeSpec is what the worker writes to a supervisor's stdin: the
// attempt directory and spec as NUL-terminated key and value strings,
// then "end". Exec strings cannot hold NUL, so nothing needs escaping.
func EncodeSpec(dir string, s Spec) ([]byte, error) {
	var b []byte
	put := func(k, v string) {
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, v...)
		b = append(b, 0)
	}
	all := append([]string{dir, s.Path, s.Dir, s.Request}, s.Args...)
	all = append(all, s.Env...)
	for _, v := range all {
		for i := range len(v) {
			if v[i] == 0 {
				return nil, errors.New("a step's command, environment or directory cannot hold a NUL byte")
			}
		}
	}
	put("attempt", dir)
	put("path", s.Path)
	for _, a := range s.Args {
		put("arg", a)
	}
	for _, e := range s.Env {
		put("env", e)
	}
	put("dir", s.Dir)
	if c := s.Credential; c != nil {
		put("uid", itoa(int64(c.UID)))
		put("gid", itoa(int64(c.GID)))
	}
	put("request", s.Request)
	put("execution", itoa(int64(s.Execution)))
	put("orphanAfter", itoa(int64(s.OrphanAfter)))
	put("grace", itoa(int64(s.Grace)))
	put("end", "")
	return b, nil
}

// errIncomplete: the bytes so far hold no whole spec yet.
var errIncomplete = errors.New("truncated spec")

// decodeSpec reads the first spec EncodeSpec wrote into b, and returns
// the bytes after it.
func decodeSpec(b []byte) (dir string, s Spec, rest []byte, err error) {
	var fields []string
	for {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i == len(b) {
			return "", s, nil, errIncomplete
		}
		fields = append(fields, string(b[:i]))
		b = b[i+1:]
		if len(fields)%2 == 0 && fields[len(fields)-2] == "end" {
			break
		}
	}
	rest = b
	var uid, gid int64 = -1, -1
	for i := 0; i+1 < len(fields); i += 2 {
		k, v := fields[i], fields[i+1]
		var n int64
		var ok = true
		switch k {
		case "attempt":
			dir = v
		case "path":
			s.Path = v
		case "arg":
			s.Args = append(s.Args, v)
		case "env":
			s.Env = append(s.Env, v)
		case "dir":
			s.Dir = v
		case "uid":
			uid, ok = atoi(v)
		case "gid":
			gid, ok = atoi(v)
		case "request":
			s.Request = v
		case "execution":
			n, ok = atoi(v)
			s.Execution = int(n)
		case "orphanAfter":
			n, ok = atoi(v)
			s.OrphanAfter = time.Duration(n)
		case "grace":
			n, ok = atoi(v)
			s.Grace = time.Duration(n)
		}
		if !ok {
			return "", s, rest, errors.New("bad number for " + k + ": " + v)
		}
	}
	if uid >= 0 && gid >= 0 {
		s.Credential = &Credential{UID: uint32(uid), GID: uint32(gid)}
	}
	if dir == "" || s.Path == "" || len(s.Args) == 0 {
		return "", s, rest, errors.New("spec without attempt directory, program or argv")
	}
	return dir, s, rest, nil
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	neg := n < 0
	u := uint64(n)
	if neg {
		u = uint64(-n)
	}
	for u > 0 {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

func atoi(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var n int64
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' || n > (1<<62)/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, s != ""
}
