package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

var (
	once      sync.Once
	serverURL string
	serverErr error
)

// ServerURL returns the URL of the test server's "atelier" database.
func ServerURL(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		var logs strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		serverURL, _, serverErr = devstack.EnsurePostgres(ctx, stateDir(), func(format string, args ...any) {
			fmt.Fprintf(&logs, format+"\n", args...)
		})
		if serverErr != nil {
			serverErr = fmt.Errorf("%w\n%s", serverErr, logs.String())
		}
	})
	if serverErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("storetest: no Postgres: %v", serverErr)
		}
		t.Skipf("storetest: no Postgres: %v", serverErr)
	}
	return serverURL
}

func stateDir() string {
	if d := os.Getenv("ATELIER_TEST_PG_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "atelier", "test-postgres")
	}
	return filepath.Join(os.TempDir(), "atelier-test-postgres")
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates an empty, uniquely named database on the test server,
// drops it when the test ends (t.Cleanup), and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)

	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	name := "t_" + base + "_" + hex.EncodeToString(rnd[:])

	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if err := exec("CREATE DATABASE " + ident); err != nil {
		t.Fatalf("storetest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)"); err != nil {
			t.Errorf("storetest: dropping database %s: %v", name, err)
		}
	})

	if !strings.HasPrefix(server, "postgres://") && !strings.HasPrefix(server, "postgresql://") {
		return server + " dbname=" + name // key=value form
	}
	u, err := url.Parse(server)
	if err != nil {
		t.Fatalf("storetest: server URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
