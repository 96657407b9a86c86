package outbox

import (
	"context"
	"time"
)

// Poll calls tick until ctx is done: again at once when it claimed a full
// batch (more may be due), else after every. tick's errors (Postgres
// away) go to warn at most once a minute; polling goes on.
func Poll(ctx context.Context, every time.Duration, batch int, tick func(context.Context) (int, error), warn func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	var warned time.Time
	for {
		n, err := tick(ctx)
		if err != nil && ctx.Err() == nil && time.Since(warned) > time.Minute {
			warned = time.Now()
			warn(err)
		}
		if n == batch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
