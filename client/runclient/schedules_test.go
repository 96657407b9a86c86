package runclient

import (
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

// Temporal's backfill range includes its end; Atelier's [start, end) does
// not: a time at exactly end is left out, one a nanosecond before is in.
func TestBackfillRangeExcludesEnd(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(5 * time.Minute)
	b := backfillRange(start, end)
	if !b.Start.Equal(start) {
		t.Errorf("start %s, want %s", b.Start, start)
	}
	if b.End.Before(end.Add(-time.Nanosecond)) || !b.End.Before(end) {
		t.Errorf("end %s: want the last instant before %s, so a run at end is not started", b.End, end)
	}
	if b.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL {
		t.Errorf("overlap %s, want allow all", b.Overlap)
	}
}
