package store

import (
	"context"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// DefaultLogReadBytes is ReadLog's budget when maxBytes <= 0.
const DefaultLogReadBytes = 1 << 20

// AppendLog stores the chunk of a step attempt's log that starts at byte
// offset. It is idempotent on (key, offset): a chunk already stored at that
// offset is kept and the call succeeds, so a retried activity may re-send.
// Empty chunks are not stored.
func (s *Store) AppendLog(ctx context.Context, key activities.LogKey, offset int64, data []byte) error {
	if key.RunID == "" || key.Step == "" || offset < 0 {
		return invalid("log key needs a run and a step, and offset >= 0")
	}
	if len(data) == 0 {
		return nil // would shadow a later real chunk at the same offset
	}
	_, err := s.q.AppendLog(ctx, db.AppendLogParams{
		RunID: key.RunID, Step: key.Step, Item: int32(key.Item), Attempt: int32(key.Attempt),
		ByteOffset: offset, Data: data,
	})
	return mapErr(err, "append log of %s/%s attempt %d", key.RunID, key.Step, key.Attempt)
}

// LogEnd returns where an attempt's stored log ends (0 when nothing is
// stored): a writer that resumes a log (the cluster worker's follower
// after its activity was retried) appends from there.
func (s *Store) LogEnd(ctx context.Context, key activities.LogKey) (int64, error) {
	n, err := s.q.LogEnd(ctx, db.LogEndParams{RunID: key.RunID, Step: key.Step, Item: int32(key.Item), Attempt: int32(key.Attempt)})
	return n, mapErr(err, "log end of %s/%s attempt %d", key.RunID, key.Step, key.Attempt)
}

// ReadLog returns the log bytes in [fromOffset, fromOffset+maxBytes), as
// chunks ordered by offset; a chunk straddling a bound is cut to it. An
// empty result means nothing is stored there (yet). maxBytes <= 0 means
// DefaultLogReadBytes. The next read starts at the last chunk's
// Offset+len(Data).
func (s *Store) ReadLog(ctx context.Context, key activities.LogKey, fromOffset int64, maxBytes int) ([]catalog.LogChunk, error) {
	fromOffset = max(fromOffset, 0)
	if maxBytes <= 0 {
		maxBytes = DefaultLogReadBytes
	}
	end := fromOffset + int64(maxBytes)
	rows, err := s.q.ReadLog(ctx, db.ReadLogParams{
		RunID: key.RunID, Step: key.Step, Item: int32(key.Item), Attempt: int32(key.Attempt),
		FromOffset: fromOffset, MaxBytes: int64(maxBytes),
	})
	if err != nil {
		return nil, mapErr(err, "read log of %s/%s attempt %d", key.RunID, key.Step, key.Attempt)
	}
	out := make([]catalog.LogChunk, 0, len(rows))
	for _, r := range rows {
		lo, hi := max(r.Offset, fromOffset), min(r.Offset+int64(len(r.Data)), end)
		if hi <= lo {
			continue
		}
		out = append(out, catalog.LogChunk{Offset: lo, Data: r.Data[lo-r.Offset : hi-r.Offset]})
	}
	return out, nil
}
