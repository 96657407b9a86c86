package outbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Full batches are followed at once, short ones wait for the tick, and a
// failing outbox is warned about once a minute, not per poll.
func TestPoll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls, warns int
	start := time.Now()
	var firstShort time.Duration
	Poll(ctx, 50*time.Millisecond, 10, func(context.Context) (int, error) {
		calls++
		switch {
		case calls <= 3:
			return 10, nil // full: again at once
		case calls == 4:
			firstShort = time.Since(start)
			return 2, errors.New("postgres away")
		case calls < 7:
			return 0, errors.New("postgres away")
		default:
			cancel()
			return 0, nil
		}
	}, func(error) { warns++ })
	if calls != 7 || warns != 1 {
		t.Fatalf("calls %d, warns %d", calls, warns)
	}
	if firstShort > 40*time.Millisecond {
		t.Fatalf("full batches waited: %s", firstShort)
	}
	if elapsed := time.Since(start); elapsed < 3*50*time.Millisecond {
		t.Fatalf("short batches did not wait for the tick: %s", elapsed)
	}
}
