package benchstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/wire"
)

// Options selects what Start runs in-process.
type Options struct {
	// Name of the benchmark: task queue "bench-<Name>", log prefix.
	Name string
	// Worker starts an in-process worker on the stack's task queue.
	Worker bool
	// Register adds the benchmark's own workflows and activities to that
	// worker, next to Atelier's.
	Register func(worker.Registry)
	// Gateway starts the REST gateway on 127.0.0.1:<free port>.
	Gateway bool
	// LogLevel of the stack's own logs (default "error": results only).
	LogLevel string
	// Configure adjusts the configuration of the gateway and worker.
	Configure func(*config.Config)
}

// Stack is a running embedded Atelier. Close it.
type Stack struct {
	Cfg      config.Config
	Temporal *devstack.TemporalServer
	// Client is the benchmark's own Temporal client (not the gateway's nor
	// the worker's).
	Client client.Client
	// Store is the benchmark's own handle on the catalogue.
	Store *store.Store
	// URL is the gateway's base URL ("" without Gateway).
	URL string
	// Info describes the machine and the stack, for the report.
	Info Info

	dbURL   string // the benchmark's database (CPU reads its backends)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closers []func() // run in reverse order by Close
	once    sync.Once
}

// Logf writes a progress line to stderr (results go to stdout).
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// Start brings the stack up. On error everything started so far is torn
// down again.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	if o.LogLevel == "" {
		o.LogLevel = "error"
	}
	s = &Stack{}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	s.Info = collectInfo(ctx)
	s.Info.Command = CommandLine(o.Name)

	// Temporal: own dev server, so no other user of the machine's servers
	// shares its history shards with the measurement.
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Minute) // may build the CLI
	defer tcancel()
	ts, err := devstack.StartTemporal(tctx, devstack.TemporalOptions{Headless: true}, Logf)
	if err != nil {
		return s, err
	}
	s.Temporal = ts
	s.closers = append(s.closers, func() {
		if err := ts.Stop(); err != nil {
			Logf("%v", err)
		}
	})

	// Postgres: a fresh database on whatever server EnsurePostgres finds.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer pcancel()
	serverURL, stopPG, err := devstack.EnsurePostgres(pctx, filepath.Join(os.TempDir(), "atelier-bench"), Logf)
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, func() {
		if err := stopPG(); err != nil {
			Logf("%v", err)
		}
	})
	dbURL, dropDB, err := createDatabase(pctx, serverURL)
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, dropDB)
	s.dbURL = dbURL
	s.Info.Postgres = postgresVersion(pctx, dbURL)

	dataDir, err := os.MkdirTemp("", "atelier-bench-data-")
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, func() { _ = os.RemoveAll(dataDir) })
	// Steps run as an unprivileged user when the bench runs as root; they
	// must be able to reach their work directories.
	if err := os.Chmod(dataDir, 0o711); err != nil {
		return s, err
	}

	cfg := config.Default()
	cfg.DatabaseURL = dbURL
	cfg.TemporalHostPort = ts.HostPort()
	cfg.Namespace = ts.Namespace()
	cfg.TemporalUIURL = ""
	cfg.TaskQueue = "bench-" + o.Name
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DataDir = dataDir
	cfg.LogLevel = o.LogLevel
	cfg.ShutdownTimeout = 5 * time.Second
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	s.Cfg = cfg

	s.Store, err = store.Open(ctx, dbURL, store.WithApplicationName("atelier-bench"))
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, s.Store.Close)
	if err := s.Store.Migrate(ctx); err != nil {
		return s, err
	}
	s.Client, err = client.DialContext(ctx, ts.ClientOptions())
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, s.Client.Close)

	// In-process processes run until Close cancels runCtx.
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.closers = append(s.closers, func() { cancel(); s.wg.Wait() })

	metrics := telemetry.New(telemetry.Options{}) // shared, as in `atelier dev`
	if o.Gateway {
		gw, clean, err := wire.InitGateway(ctx, cfg, metrics)
		if err != nil {
			return s, fmt.Errorf("gateway: %w", err)
		}
		s.closers = append(s.closers, clean)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := gw.Run(runCtx); err != nil {
				Logf("gateway: %v", err)
			}
		}()
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		addr, err := gw.Addr(actx)
		acancel()
		if err != nil {
			return s, fmt.Errorf("gateway address: %w", err)
		}
		s.URL = "http://" + addr
	}
	if o.Worker {
		w, clean, err := wire.InitWorker(ctx, cfg, metrics, nil)
		if err != nil {
			return s, err
		}
		s.closers = append(s.closers, clean)
		if o.Register != nil {
			o.Register(w.Registry())
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = w.Run(runCtx)
		}()
	}
	return s, nil
}

// StartDatabase is Start for benchmarks of the catalogue alone: a fresh,
// migrated Postgres database and s.Store, no Temporal server, gateway or
// worker (Info.TemporalCLI says so).
func StartDatabase(ctx context.Context, name string) (s *Stack, err error) {
	s = &Stack{}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	s.Info = collectInfoNoTemporal()
	s.Info.Command = CommandLine(name)
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer pcancel()
	serverURL, stopPG, err := devstack.EnsurePostgres(pctx, filepath.Join(os.TempDir(), "atelier-bench"), Logf)
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, func() {
		if err := stopPG(); err != nil {
			Logf("%v", err)
		}
	})
	dbURL, dropDB, err := createDatabase(pctx, serverURL)
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, dropDB)
	s.Info.Postgres = postgresVersion(pctx, dbURL)
	s.Cfg = config.Default()
	s.Cfg.DatabaseURL = dbURL
	s.Store, err = store.Open(ctx, dbURL, store.WithApplicationName("atelier-bench"))
	if err != nil {
		return s, err
	}
	s.closers = append(s.closers, s.Store.Close)
	return s, s.Store.Migrate(ctx)
}

// TokenName is the name of the token Bootstrap creates: runs started
// with it are created by this name.
const TokenName = "bench-editor"

// Bootstrap creates project and an editor token for it, returning the
// token's secret.
func (s *Stack) Bootstrap(ctx context.Context, project string) (string, error) {
	if _, err := s.Store.CreateProject(ctx, catalog.Project{Name: project}); err != nil {
		return "", err
	}
	secret, hash := tokens.New()
	if _, err := s.Store.CreateToken(ctx, catalog.Token{Name: TokenName, Project: project, Role: tokens.RoleEditor}, hash); err != nil {
		return "", err
	}
	return secret, nil
}

// Close stops everything Start started, in reverse order: in-process
// gateway and worker, clients and pools, the database (dropped), the
// Temporal server, Postgres (only a throwaway cluster; see
// devstack.EnsurePostgres) and the data directory.
func (s *Stack) Close() {
	s.once.Do(func() {
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
	})
}

// createDatabase creates bench_<random> on the server of serverURL and
// returns its URL and a func that drops it.
func createDatabase(ctx context.Context, serverURL string) (string, func(), error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "bench_" + hex.EncodeToString(rnd[:])
	ident := pgx.Identifier{name}.Sanitize()
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			Logf("dropping database %s: %v", name, err)
		}
	}
	if !strings.HasPrefix(serverURL, "postgres://") && !strings.HasPrefix(serverURL, "postgresql://") {
		return serverURL + " dbname=" + name, drop, nil // key=value form
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		drop()
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

func postgresVersion(ctx context.Context, dbURL string) string {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return v
}
