package devstack

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func queryRow(t *testing.T, url, sql string, dest ...any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

func requirePGBin(t *testing.T) {
	t.Helper()
	if _, err := findPGBin(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestEnsurePostgresThrowaway runs the initdb + pg_ctl path for real: first
// in a directory the unprivileged user can reach, then (when root) in a
// private one, which moves the cluster to $TMPDIR.
func TestEnsurePostgresThrowaway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres clusters")
	}
	requirePGBin(t)
	t.Setenv(EnvDatabaseURL, "")
	t.Setenv(EnvPGThrowaway, "1")

	open, err := os.MkdirTemp("", "atelier-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	private := t.TempDir() // 0700
	if os.Geteuid() == 0 {
		t.Cleanup(func() { os.RemoveAll(fallbackBase(private)) })
	}

	for _, dir := range []string{open, private} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ctx := t.Context()
			url, stop, err := EnsurePostgres(ctx, dir, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stop() })
			var db, usr string
			if err := queryRow(t, url, "SELECT current_database(), current_user", &db, &usr); err != nil {
				t.Fatal(err)
			}
			if db != DatabaseName || usr != "atelier" {
				t.Fatalf("connected to %s as %s", db, usr)
			}
			ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx2, url)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx2, "CREATE TABLE IF NOT EXISTS kept (x int)"); err != nil {
				t.Fatal(err)
			}
			conn.Close(ctx2)
			if filepath.Base(dir) == filepath.Base(open) {
				if _, err := os.Stat(filepath.Join(dir, "postgres", "PG_VERSION")); err != nil {
					t.Fatalf("cluster not in the state directory: %v", err)
				}
				if fi, err := os.Stat(filepath.Join(dir, "postgres.log")); err != nil || fi.Size() == 0 {
					t.Fatalf("no server log: %v", err)
				}
			}

			// A second caller adopts the running cluster.
			url2, stop2, err := EnsurePostgres(ctx, dir, t.Logf)
			if err != nil || url2 != url {
				t.Fatalf("second EnsurePostgres = %s, %v; want %s", url2, err, url)
			}

			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := stop(); err != nil { // idempotent
				t.Fatal(err)
			}
			if err := stop2(); err != nil { // already stopped: nothing to do
				t.Fatal(err)
			}
			if err := queryRow(t, url, "SELECT 1", new(int)); err == nil {
				t.Fatal("server still answers after stop")
			}

			// Restart on the same data directory: data kept, no initdb.
			url3, stop3, err := EnsurePostgres(ctx, dir, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if err := queryRow(t, url3, "SELECT count(*) FROM kept", &n); err != nil {
				t.Fatalf("table lost across restart: %v", err)
			}
			if err := stop3(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEnsurePostgresLocalServer(t *testing.T) {
	c, err := net.DialTimeout("tcp", "127.0.0.1:5432", 500*time.Millisecond)
	if err != nil {
		t.Skip("no server on 127.0.0.1:5432")
	}
	c.Close()
	t.Setenv(EnvDatabaseURL, "")
	t.Setenv(EnvPGThrowaway, "")
	dir := t.TempDir()
	url, stop, err := EnsurePostgres(t.Context(), dir, t.Logf)
	if err != nil {
		t.Skipf("server on 5432 does not trust postgres/root: %v", err)
	}
	t.Cleanup(func() {
		admin := strings.Replace(url, "/"+SharedDatabaseName(dir)+"?", "/postgres?", 1)
		_ = queryRow(t, admin, "SELECT 1 FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+SharedDatabaseName(dir)+"') x LIMIT 0", new(int))
		conn, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+SharedDatabaseName(dir))
			conn.Close(context.Background())
		}
	})
	var db string
	// One database per state dir: two dev stacks never share a catalogue.
	if err := queryRow(t, url, "SELECT current_database()", &db); err != nil || db != SharedDatabaseName(dir) {
		t.Fatalf("database %q, %v", db, err)
	}
	if SharedDatabaseName(t.TempDir()) == db {
		t.Fatal("two state dirs share a database name")
	}
	if err := stop(); err != nil { // not ours: must not stop it
		t.Fatal(err)
	}
	if err := queryRow(t, url, "SELECT 1", new(int)); err != nil {
		t.Fatalf("stop stopped a server it did not start: %v", err)
	}
}

func TestEnsurePostgresDatabaseURL(t *testing.T) {
	t.Setenv(EnvDatabaseURL, "postgres://x@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	if _, _, err := EnsurePostgres(t.Context(), t.TempDir(), nil); err == nil {
		t.Fatal("unreachable ATELIER_DATABASE_URL accepted")
	}
}
