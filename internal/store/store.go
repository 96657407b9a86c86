package store

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// ErrBadPageToken reports a RunFilter.PageToken that ListRuns did not
// produce for the same filter. It wraps catalog.ErrInvalidArgument, which
// is what callers usually test for.
var ErrBadPageToken = fmt.Errorf("%w: bad page token", catalog.ErrInvalidArgument)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the Postgres catalogue. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	q    *db.Queries
	// lq runs the list queries with a custom plan per execution (see
	// customPlans).
	lq *db.Queries
	// inserts group-commits run inserts (runbatch.go).
	inserts *runInserts
	// box seals webhook signing secrets (webhooksecrets.go); nil keeps
	// them as given.
	box *secretbox.Box
}

// customPlans runs queries as unnamed prepared statements
// (pgx.QueryExecModeCacheDescribe: still one round trip), which Postgres
// plans for the actual arguments every time. pgx's default caches named
// statements, and after five executions Postgres may switch those to a
// generic plan, chosen without knowing which project, state or window is
// asked for; measured on 200,000 runs (TestListingPlans), generic plans
// of the list queries picked an index that left the pipeline or creator
// to a filter and read up to 17,000 rows for a page. A custom plan costs
// a fraction of a millisecond of planning and picks the matching index.
type customPlans struct{ *pgxpool.Pool }

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.Pool.Query(ctx, sql, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...)
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.Pool.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...)
}

func (c customPlans) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return c.Pool.SendBatch(ctx, b)
}

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.Pool.Exec(ctx, sql, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...)
}

// Option configures Open.
type Option func(*options)

type options struct {
	maxConns int32
	minConns int32
	appName  string
	tracer   pgx.QueryTracer
	box      *secretbox.Box
}

// WithSecretBox seals webhook signing secrets with box before they are
// stored, and opens them for the dispatcher.
func WithSecretBox(box *secretbox.Box) Option { return func(o *options) { o.box = box } }

// WithMaxConns bounds the connection pool (default: pgxpool's, max(4, CPUs)).
func WithMaxConns(n int32) Option { return func(o *options) { o.maxConns = n } }

// WithMinConns keeps at least n connections open.
func WithMinConns(n int32) Option { return func(o *options) { o.minConns = n } }

// WithApplicationName sets application_name, shown in pg_stat_activity.
func WithApplicationName(name string) Option { return func(o *options) { o.appName = name } }

// WithTracer traces every query (tests use it to EXPLAIN the exact
// statements the store sends).
func WithTracer(t pgx.QueryTracer) Option { return func(o *options) { o.tracer = t } }

// Open connects to databaseURL (a postgres:// URL or a libpq key=value
// string) and checks the connection. It does not migrate: call Migrate.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Store, error) {
	o := options{appName: "atelier"}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: parsing database URL: %v", err)
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	if o.minConns > 0 {
		cfg.MinConns = o.minConns
	}
	if o.appName != "" {
		if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
			cfg.ConnConfig.RuntimeParams["application_name"] = o.appName
		}
	}
	if o.tracer != nil {
		cfg.ConnConfig.Tracer = o.tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, mapErr(err, "store: open")
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, mapErr(err, "store: connect")
	}
	q := db.New(pool)
	return &Store{pool: pool, q: q, lq: db.New(customPlans{pool}), inserts: newRunInserts(q), box: o.box}, nil
}

// Close closes every connection. The Store must not be used afterwards.
func (s *Store) Close() {
	s.inserts.close()
	s.pool.Close()
}

// Ping checks that the database answers, for readiness probes.
func (s *Store) Ping(ctx context.Context) error {
	return mapErr(s.pool.Ping(ctx), "store: ping")
}

// Migrate applies the embedded migrations that the database lacks. Several
// processes may call it at once: a Postgres session advisory lock serialises
// them and the later ones find nothing to do.
func (s *Store) Migrate(ctx context.Context) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("store: migrate: %v", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("store: migrate: %v", err)
	}
	sqlDB := stdlib.OpenDBFromPool(s.pool) // closing it leaves the pool open
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("store: migrate: %v", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return mapErr(err, "store: migrate")
	}
	return nil
}

// withTx runs fn in a transaction, committing when it returns nil.
func (s *Store) withTx(ctx context.Context, fn func(q *db.Queries) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return fn(s.q.WithTx(tx))
	})
}

// mapErr turns a driver error into a catalogue error with context; see the
// package documentation. It returns nil for nil.
func mapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	op := fmt.Sprintf(format, args...)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, catalog.ErrNotFound)
	}
	// Already one of ours (returned from inside a transaction).
	if errors.Is(err, catalog.ErrNotFound) || errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrInvalidArgument) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if unreachable(err) {
		return fmt.Errorf("%s: %w (%v)", op, catalog.ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505": // unique_violation
			return fmt.Errorf("%s: %w (%s)", op, catalog.ErrConflict, pgErr.ConstraintName)
		case pgErr.Code == "23503": // foreign_key_violation
			return fmt.Errorf("%s: %w: referenced row missing (%s)", op, catalog.ErrNotFound, pgErr.ConstraintName)
		case pgErr.Code == "23502", pgErr.Code == "23514", len(pgErr.Code) == 5 && pgErr.Code[:2] == "22":
			// not_null_violation, check_violation, data exceptions (bad JSON, ...)
			return fmt.Errorf("%s: %w: %s", op, catalog.ErrInvalidArgument, pgErr.Message)
		}
		return fmt.Errorf("%s: postgres error %s: %s", op, pgErr.Code, pgErr.Message)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w (%v)", op, context.Canceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w (%v)", op, context.DeadlineExceeded, err)
	}
	return fmt.Errorf("%s: %v", op, err) // flattened: no driver type escapes
}

// unreachable reports errors that mean the server could not be reached or
// the connection broke, as opposed to the server refusing a statement.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.Timeout(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
	}
	return strings.Contains(err.Error(), "conn closed")
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", catalog.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + hex.EncodeToString(b[:])
}

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
