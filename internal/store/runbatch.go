package store

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/store/db"
)

// runInserts group-commits run inserts: the inserts that arrive while the
// writers are busy go to Postgres together, as one pgx batch (one round
// trip, one implicit transaction, one WAL flush). Starting a run is the
// gateway's hot path, and a commit per run was most of the Postgres CPU a
// start costs (bench/starts measures it). An insert that arrives while a
// writer is idle goes at once, alone: batching never waits for company.
//
// In one transaction, one failing insert (a taken run ID, a project
// deleted meanwhile) would fail its neighbours: a batch that fails is
// therefore run again one insert at a time, so each gets its own result.
type runInserts struct {
	q    *db.Queries
	reqs chan *runInsert
	stop chan struct{}
	wg   sync.WaitGroup
}

// runInsert is one waiting insert and, once done is closed, its result.
type runInsert struct {
	ctx  context.Context
	arg  db.InsertRunsParams
	row  db.Run
	err  error
	done chan struct{}
}

const (
	// runInsertWriters bounds the batches in flight (connections used).
	runInsertWriters = 2
	// maxRunBatch bounds one batch; more waiting inserts go in the next.
	maxRunBatch = 64
)

func newRunInserts(q *db.Queries) *runInserts {
	b := &runInserts{q: q, reqs: make(chan *runInsert), stop: make(chan struct{})}
	for range runInsertWriters {
		b.wg.Add(1)
		go b.write()
	}
	return b
}

// errStoreClosed answers inserts that arrive after Close.
var errStoreClosed = errors.New("store: closed")

// insert runs arg's statement in the next batch and returns its row
// (pgx.ErrNoRows when the statement inserted nothing).
func (b *runInserts) insert(ctx context.Context, arg db.InsertRunsParams) (db.Run, error) {
	r := &runInsert{ctx: ctx, arg: arg, done: make(chan struct{})}
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		return db.Run{}, ctx.Err()
	case <-b.stop:
		return db.Run{}, errStoreClosed
	}
	// Once taken, the insert may commit whatever the caller's context
	// does; waiting for the outcome reports what happened.
	<-r.done
	return r.row, r.err
}

// close stops the writers after their current batch.
func (b *runInserts) close() {
	close(b.stop)
	b.wg.Wait()
}

func (b *runInserts) write() {
	defer b.wg.Done()
	for {
		var first *runInsert
		select {
		case first = <-b.reqs:
		case <-b.stop:
			return
		}
		batch := []*runInsert{first}
	fill:
		for len(batch) < maxRunBatch {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		b.run(batch)
	}
}

// run sends a batch, and each insert alone if the batch failed as a
// whole. The batch runs under the first caller's context without its
// cancellation: another caller's insert must not fail because the first
// one gave up.
func (b *runInserts) run(batch []*runInsert) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err // gave up before being sent: nothing was written
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.WithoutCancel(live[0].ctx)
	if err := b.send(ctx, live); err == nil || len(live) == 1 {
		return
	}
	for _, r := range live {
		_ = b.send(ctx, []*runInsert{r})
	}
}

// send runs inserts as one batch, recording each one's result; it returns
// the batch's error (all of them rolled back) if any failed.
func (b *runInserts) send(ctx context.Context, inserts []*runInsert) error {
	args := make([]db.InsertRunsParams, len(inserts))
	for i, r := range inserts {
		args[i] = r.arg
	}
	res := b.q.InsertRuns(ctx, args)
	var failed error
	res.QueryRow(func(i int, row db.Run, err error) {
		inserts[i].row, inserts[i].err = row, err
		if err != nil && failed == nil && !errors.Is(err, pgx.ErrNoRows) {
			failed = err
		}
	})
	if err := res.Close(); err != nil && failed == nil {
		failed = err
	}
	if failed != nil && len(inserts) > 1 {
		for _, r := range inserts {
			r.row, r.err = db.Run{}, failed
		}
	}
	return failed
}
