package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is what InsertSyntheticRuns writes through (a *pgx.Conn, a pool).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Synthetic describes generated runs for listing tests and benchmarks.
// Rows are generated in Postgres (generate_series), deterministically from
// the row number g in 1..N (a multiplicative hash per attribute):
//
//   - project: every 10th run is in BigProject (10% of N: 100,000 of
//     1,000,000); the others are spread evenly over Projects-1 projects
//     named p001, p002, ...;
//   - pipeline: one of Pipelines names pl-0, pl-1, ...; every 10th run has
//     none (a Go workflow run);
//   - created_by: one of Creators token names tok-0, tok-1, ...; every 4th
//     run has "" (started through the SDK, not REST);
//   - state: SUCCEEDED 85%, FAILED 8%, CANCELLED 3%, RUNNING 2%, PENDING 1%,
//     TERMINATED 0.5%, CANCELLING 0.5%;
//   - created_at: evenly over Span up to End, increasing with g (distinct),
//     updated_at one minute later; a small status document per row.
type Synthetic struct {
	N          int
	BigProject string // default "p000"
	Projects   int    // default 100 (BigProject included)
	Pipelines  int    // default 20 per project
	Creators   int    // default 8 per project
	End        time.Time
	Span       time.Duration // default 365 days
	// To load in several statements: this one inserts g in Offset+1 ..
	// Offset+N of Total rows in all (default Offset+N), so created_at
	// spreads over Span across all of them.
	Offset int
	Total  int
}

// States in the synthetic distribution, most frequent first.
var SyntheticStates = []string{"SUCCEEDED", "FAILED", "CANCELLED", "RUNNING", "PENDING", "TERMINATED", "CANCELLING"}

// InsertSyntheticRuns inserts s.N runs in one statement.
func InsertSyntheticRuns(ctx context.Context, db Execer, s Synthetic) error {
	if s.BigProject == "" {
		s.BigProject = "p000"
	}
	if s.Projects <= 1 {
		s.Projects = 100
	}
	if s.Pipelines <= 0 {
		s.Pipelines = 20
	}
	if s.Creators <= 0 {
		s.Creators = 8
	}
	if s.Span <= 0 {
		s.Span = 365 * 24 * time.Hour
	}
	if s.End.IsZero() {
		s.End = time.Now()
	}
	total := s.Total
	if total <= 0 {
		total = s.Offset + s.N
	}
	// h(k) = a hash of g in [0, 2^32) with multiplier k.
	const sql = `
INSERT INTO runs (id, project, pipeline, version, workflow, state, seq, status, created_at, updated_at, created_by, request_hash)
SELECT id, project, pipeline, 1, 'atelier.Pipeline', state, 3,
       jsonb_build_object('runId', id, 'project', project, 'pipeline', pipeline, 'state', state, 'seq', 3, 'steps', '[]'::jsonb),
       created_at, created_at + interval '1 minute', created_by, ''
FROM (
  SELECT 'run-' || substr(md5(g::text), 1, 20) AS id,
         CASE WHEN g % 10 = 0 THEN $1::text
              ELSE 'p' || lpad((1 + (g::bigint * 2654435761) % 4294967296 % ($2::int - 1))::text, 3, '0') END AS project,
         CASE WHEN (g::bigint * 40503) % 65536 % 10 = 0 THEN NULL
              ELSE 'pl-' || ((g::bigint * 2246822519) % 4294967296 % $3::int) END AS pipeline,
         CASE WHEN (g::bigint * 3266489917) % 4294967296 % 4 = 0 THEN ''
              ELSE 'tok-' || ((g::bigint * 668265263) % 4294967296 % $4::int) END AS created_by,
         CASE WHEN h < 850 THEN 'SUCCEEDED' WHEN h < 930 THEN 'FAILED' WHEN h < 960 THEN 'CANCELLED'
              WHEN h < 980 THEN 'RUNNING' WHEN h < 990 THEN 'PENDING' WHEN h < 995 THEN 'TERMINATED'
              ELSE 'CANCELLING' END AS state,
         $5::timestamptz - ($6::bigint - g) * ($7::bigint / $6::bigint) * interval '1 microsecond' AS created_at
  FROM (SELECT g, (g::bigint * 374761393) % 4294967291 % 1000 AS h
        FROM generate_series($8::bigint, $9::bigint) g) gs
) r`
	_, err := db.Exec(ctx, sql, s.BigProject, s.Projects, s.Pipelines, s.Creators,
		s.End, int64(total), s.Span.Microseconds(), int64(s.Offset+1), int64(s.Offset+s.N))
	if err != nil {
		return fmt.Errorf("storetest: inserting %d synthetic runs: %w", s.N, err)
	}
	return nil
}

// LoadSyntheticRuns inserts s.N runs in statements of chunk rows (progress
// is called after each), with the runs table's secondary indexes dropped
// during the load and then rebuilt from their own definitions (what the
// migrations made): building an index once is several times faster than
// updating eleven of them row by row. Primary key and unique constraints
// stay. The caller should ANALYZE afterwards.
func LoadSyntheticRuns(ctx context.Context, conn *pgx.Conn, s Synthetic, chunk int, progress func(done int)) error {
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'runs'::regclass AND NOT i.indisprimary AND NOT i.indisunique
		ORDER BY c.relname`)
	if err != nil {
		return fmt.Errorf("storetest: listing the indexes of runs: %w", err)
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var x index
		return x, r.Scan(&x.name, &x.def)
	})
	if err != nil {
		return fmt.Errorf("storetest: listing the indexes of runs: %w", err)
	}
	for _, ix := range indexes {
		if _, err := conn.Exec(ctx, "DROP INDEX "+pgx.Identifier{ix.name}.Sanitize()); err != nil {
			return fmt.Errorf("storetest: dropping %s: %w", ix.name, err)
		}
	}
	if chunk <= 0 {
		chunk = s.N
	}
	total, base := s.Total, s.Offset
	if total <= 0 {
		total = base + s.N
	}
	for done := 0; done < s.N; done += chunk {
		part := s
		part.N, part.Offset, part.Total = min(chunk, s.N-done), base+done, total
		if err := InsertSyntheticRuns(ctx, conn, part); err != nil {
			return err
		}
		if progress != nil {
			progress(done + part.N)
		}
	}
	if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '256MB'"); err != nil {
		return err
	}
	for _, ix := range indexes {
		if _, err := conn.Exec(ctx, ix.def); err != nil {
			return fmt.Errorf("storetest: rebuilding %s: %w", ix.name, err)
		}
	}
	return nil
}
