package store

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/internal/store/storetest"
)

// A batch goes to Postgres as one transaction; one failing insert must
// not take its neighbours down: they are run again one by one.
func TestRunInsertBatchIsolatesAFailure(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	arg := func(id, key string) db.InsertRunsParams {
		p := db.InsertRunsParams{ID: id, Project: "p", Workflow: "w", State: "PENDING", CreatedBy: "t", RequestHash: "h"}
		if key != "" {
			p.IdempotencyKey = &key
		}
		return p
	}
	if _, err := s.inserts.insert(ctx, arg("taken", "")); err != nil {
		t.Fatal(err)
	}

	// One batch: two good inserts, the same key twice, one taken ID.
	reqs := []*runInsert{
		{ctx: ctx, arg: arg("a", ""), done: make(chan struct{})},
		{ctx: ctx, arg: arg("k1", "key"), done: make(chan struct{})},
		{ctx: ctx, arg: arg("k2", "key"), done: make(chan struct{})},
		{ctx: ctx, arg: arg("taken", ""), done: make(chan struct{})},
		{ctx: ctx, arg: arg("b", ""), done: make(chan struct{})},
	}
	s.inserts.run(reqs)
	for i, want := range []string{"a", "k1", "", "", "b"} {
		r := reqs[i]
		switch {
		case want != "" && (r.err != nil || r.row.ID != want):
			t.Errorf("insert %d: row %q, err %v; want row %q", i, r.row.ID, r.err, want)
		case i == 2 && !errors.Is(r.err, pgx.ErrNoRows):
			t.Errorf("second insert of a key: %v, want no row (ErrNoRows)", r.err)
		case i == 3 && (r.err == nil || errors.Is(r.err, pgx.ErrNoRows)):
			t.Errorf("taken ID: %v, want the insert's error", r.err)
		}
	}

	// Without a failure, a batch is one transaction (one commit): its
	// rows share the inserting transaction's ID.
	ok := []*runInsert{
		{ctx: ctx, arg: arg("c1", ""), done: make(chan struct{})},
		{ctx: ctx, arg: arg("c2", ""), done: make(chan struct{})},
		{ctx: ctx, arg: arg("c3", ""), done: make(chan struct{})},
	}
	s.inserts.run(ok)
	for _, r := range ok {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	var txs int
	if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM runs WHERE id IN ('c1', 'c2', 'c3')`).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	if txs != 1 {
		t.Errorf("a batch of 3 inserts took %d transactions, want 1", txs)
	}

	// A caller that gave up before its batch left is not written.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	late := &runInsert{ctx: gone, arg: arg("late", ""), done: make(chan struct{})}
	s.inserts.run([]*runInsert{late})
	if !errors.Is(late.err, context.Canceled) {
		t.Fatalf("cancelled insert: %v", late.err)
	}
	if _, err := s.q.GetRun(ctx, db.GetRunParams{Project: "p", ID: "late"}); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("cancelled insert was written: %v", err)
	}
}
