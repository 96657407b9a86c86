package devstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/atelier-ml/atelier/internal/platform/fsperm"
)

// Environment variables read by EnsurePostgres.
const (
	// EnvDatabaseURL, when set, is used as is (after checking it connects).
	EnvDatabaseURL = "ATELIER_DATABASE_URL"
	// EnvPGThrowaway, when "1" or "true", skips probing 127.0.0.1:5432 and
	// always runs a throwaway cluster in the state directory.
	EnvPGThrowaway = "ATELIER_PG_THROWAWAY"
)

// DatabaseName is the database EnsurePostgres creates and returns.
const DatabaseName = "atelier"

// EnsurePostgres returns the URL of a Postgres database for Atelier, in this
// order of preference:
//
//  1. $ATELIER_DATABASE_URL, verified to accept connections;
//  2. a server already listening on 127.0.0.1:5432 that trusts user
//     "postgres" or "root": database "atelier_<hash of stateDir>" is
//     created there if missing, so two clones (each with its own Temporal)
//     never share a catalogue;
//  3. a throwaway cluster in <stateDir>/postgres (initdb on first use, then
//     started with pg_ctl on a free loopback port, socket directory inside
//     the state directory, server log in <stateDir>/postgres.log).
//
// Set ATELIER_PG_THROWAWAY=1 to skip step 2.
//
// initdb and postgres refuse to run as root. When the caller is root the
// cluster is initialised and run as user "nobody"; if "nobody" cannot reach
// stateDir (e.g. it is under /root), the cluster lives in
// $TMPDIR/atelier-postgres-<hash of stateDir> instead, and log says so.
//
// stop stops only what this call started (or a throwaway cluster of the same
// state directory left running by an earlier process, which it adopts); for
// cases 1 and 2 it does nothing. log may be nil.
func EnsurePostgres(ctx context.Context, stateDir string, log func(format string, args ...any)) (dbURL string, stop func() error, err error) {
	if log == nil {
		log = func(string, ...any) {}
	}
	noop := func() error { return nil }

	if u := os.Getenv(EnvDatabaseURL); u != "" {
		if err := pingURL(ctx, u); err != nil {
			return "", nil, fmt.Errorf("devstack: %s does not connect: %w", EnvDatabaseURL, err)
		}
		log("postgres: using %s", EnvDatabaseURL)
		return u, noop, nil
	}

	if !envTrue(EnvPGThrowaway) {
		if u, ok := probeLocal(ctx, SharedDatabaseName(stateDir), log); ok {
			return u, noop, nil
		}
	}
	return startThrowaway(ctx, stateDir, log)
}

func envTrue(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

// SharedDatabaseName is the database a state directory gets on a shared
// Postgres server: one per dev stack, since each has its own Temporal and a
// catalogue listing another Temporal's runs would show them in flight
// forever.
func SharedDatabaseName(stateDir string) string {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	sum := sha256.Sum256([]byte(stateDir))
	return DatabaseName + "_" + hex.EncodeToString(sum[:4])
}

// probeLocal looks for a trusting server on the default port.
func probeLocal(ctx context.Context, dbName string, log func(string, ...any)) (string, bool) {
	const host = "127.0.0.1:5432"
	c, err := net.DialTimeout("tcp", host, 500*time.Millisecond)
	if err != nil {
		return "", false
	}
	c.Close()
	for _, usr := range []string{"postgres", "root"} {
		admin := pgURL(usr, host, "postgres")
		if err := pingURL(ctx, admin); err != nil {
			continue
		}
		if err := ensureDatabase(ctx, admin, dbName); err != nil {
			log("postgres: %s accepts user %s but creating database %s failed: %v", host, usr, dbName, err)
			continue
		}
		log("postgres: using database %s on the server on %s as user %s", dbName, host, usr)
		return pgURL(usr, host, dbName), true
	}
	return "", false
}

func pgURL(usr, hostport, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(usr),
		Host:     hostport,
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

func pingURL(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// ensureDatabase creates database name through the server at adminURL.
func ensureDatabase(ctx context.Context, adminURL, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: lost a race
		return nil
	}
	return err
}

// cluster is a throwaway Postgres cluster run with pg_ctl.
type cluster struct {
	bin     string // directory holding initdb and pg_ctl
	base    string // holds postgres/, postgres.log, sock/
	data    string
	logFile string
	cred    *syscall.Credential // nil unless running as root
}

func startThrowaway(ctx context.Context, stateDir string, log func(string, ...any)) (string, func() error, error) {
	if stateDir == "" {
		return "", nil, errors.New("devstack: empty state directory")
	}
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("devstack: %w", err)
	}
	bin, err := findPGBin()
	if err != nil {
		return "", nil, err
	}

	c := &cluster{bin: bin, base: stateDir}
	if os.Geteuid() == 0 {
		uid, gid, err := unprivilegedUser()
		if err != nil {
			return "", nil, err
		}
		c.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
		if fsperm.Reachable(stateDir, uid, gid) != nil {
			c.base = fallbackBase(stateDir)
			log("postgres: running as root; %s is not reachable by uid %d, using %s", stateDir, uid, c.base)
			if err := os.MkdirAll(c.base, 0o755); err != nil {
				return "", nil, fmt.Errorf("devstack: %w", err)
			}
			if err := os.Chmod(c.base, 0o755); err != nil {
				return "", nil, fmt.Errorf("devstack: %w", err)
			}
		}
	}
	c.data = filepath.Join(c.base, "postgres")
	c.logFile = filepath.Join(c.base, "postgres.log")

	// One process at a time sets the cluster up (parallel test binaries).
	unlock, err := LockFile(ctx, filepath.Join(c.base, "postgres.lock"), func(time.Duration) {})
	if err != nil {
		return "", nil, err
	}
	defer unlock()

	if port, ok := c.running(ctx); ok {
		// Left running by an earlier process of ours (one that did not call
		// stop, or another user of the same state directory): adopt it.
		log("postgres: reusing the cluster in %s on port %d", c.data, port)
		u, err := c.finish(ctx, port)
		if err != nil {
			return "", nil, err
		}
		return u, c.stopper(log), nil
	}

	if err := c.initdb(ctx, log); err != nil {
		return "", nil, err
	}
	port, err := freePort("127.0.0.1")
	if err != nil {
		return "", nil, err
	}
	if err := c.start(ctx, port, log); err != nil {
		return "", nil, err
	}
	stop := c.stopper(log)
	u, err := c.finish(ctx, port)
	if err != nil {
		_ = stop()
		return "", nil, err
	}
	return u, stop, nil
}

// fallbackBase is where a root caller's cluster lives when the unprivileged
// user cannot reach stateDir.
func fallbackBase(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join(os.TempDir(), "atelier-postgres-"+hex.EncodeToString(sum[:6]))
}

// finish waits for the server to accept connections and creates the database.
func (c *cluster) finish(ctx context.Context, port int) (string, error) {
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	admin := pgURL("atelier", host, "postgres")
	var err error
	for i := 0; i < 50; i++ {
		if err = pingURL(ctx, admin); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return "", fmt.Errorf("devstack: postgres on port %d does not accept connections: %w%s", port, err, c.logTail())
	}
	if err := ensureDatabase(ctx, admin, DatabaseName); err != nil {
		return "", fmt.Errorf("devstack: creating database %s: %w", DatabaseName, err)
	}
	return pgURL("atelier", host, DatabaseName), nil
}

func (c *cluster) initdb(ctx context.Context, log func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(c.data, "PG_VERSION")); err == nil {
		return nil
	}
	// A half-initialised directory from an interrupted initdb: start over.
	if err := os.RemoveAll(c.data); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	if err := c.mkdirOwned(c.data, 0o700); err != nil {
		return err
	}
	log("postgres: initdb %s", c.data)
	out, err := c.run(ctx, "initdb", "-D", c.data, "-U", "atelier", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err != nil {
		return fmt.Errorf("devstack: initdb: %w\n%s", err, out)
	}
	return nil
}

func (c *cluster) start(ctx context.Context, port int, log func(string, ...any)) error {
	// Unix sockets are limited to ~107 bytes of path; go TCP-only if needed.
	sock := filepath.Join(c.base, "sock")
	if len(sock)+len("/.s.PGSQL.65535") > 100 {
		sock = ""
	} else if err := c.mkdirOwned(sock, 0o755); err != nil {
		return err
	}
	for _, p := range []string{c.data, c.logFile, sock} {
		if strings.ContainsAny(p, `'"\`) {
			return fmt.Errorf("devstack: unsupported character in path %q", p)
		}
	}
	f, err := os.OpenFile(c.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	f.Close()
	if err := c.chown(c.logFile); err != nil {
		return err
	}
	opts := fmt.Sprintf("-p %d -k '%s' -c listen_addresses=127.0.0.1", port, sock)
	log("postgres: starting %s on 127.0.0.1:%d (log %s)", c.data, port, c.logFile)
	out, err := c.run(ctx, "pg_ctl", "start", "-D", c.data, "-l", c.logFile, "-w", "-t", "60", "-o", opts)
	if err != nil {
		return fmt.Errorf("devstack: pg_ctl start: %w\n%s%s", err, out, c.logTail())
	}
	return nil
}

// running reports the port of a live server on c.data, if any.
func (c *cluster) running(ctx context.Context) (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false // stale pid file; postgres removes it on start
	}
	if err := pingURL(ctx, pgURL("atelier", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "postgres")); err != nil {
		return 0, false
	}
	return port, true
}

func (c *cluster) stopper(log func(string, ...any)) func() error {
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			log("postgres: stopping %s", c.data)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if _, e := c.run(ctx, "pg_ctl", "status", "-D", c.data); exitCode(e) == 3 {
				return // not running (any more): nothing to stop
			}
			out, e := c.run(ctx, "pg_ctl", "stop", "-D", c.data, "-m", "fast", "-w", "-t", "60")
			if e != nil {
				err = fmt.Errorf("devstack: pg_ctl stop: %w\n%s", e, out)
			}
		})
		return err
	}
}

// run runs a Postgres program from c.bin, as the unprivileged user if root.
func (c *cluster) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, prog), args...)
	cmd.Dir = "/" // the caller's directory may not be readable by the user
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func (c *cluster) mkdirOwned(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return c.chown(dir)
}

func (c *cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

func (c *cluster) logTail() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n--- " + c.logFile + " (tail) ---\n" + string(b)
}

// findPGBin returns the directory holding both initdb and pg_ctl.
func findPGBin() (string, error) {
	var dirs []string
	for _, prog := range []string{"pg_ctl", "initdb"} {
		if p, err := exec.LookPath(prog); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versioned, func(i, j int) bool { // newest major first
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(versioned[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(versioned[j])))
		return vi > vj
	})
	dirs = append(dirs, versioned...)
	dirs = append(dirs, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin")
	for _, d := range dirs {
		if isExec(filepath.Join(d, "pg_ctl")) && isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", errors.New("devstack: no Postgres found: set " + EnvDatabaseURL +
		", run a server on 127.0.0.1:5432, or install the server (apt-get install postgresql)")
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// unprivilegedUser returns the uid and gid of "nobody".
func unprivilegedUser() (uint32, uint32, error) {
	u, err := user.Lookup("nobody")
	if err != nil {
		return 65534, 65534, nil
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("devstack: bad uid/gid for nobody: %q/%q", u.Uid, u.Gid)
	}
	return uint32(uid), uint32(gid), nil
}
