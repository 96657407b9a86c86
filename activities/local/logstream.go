package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
)

// LogSink receives the combined output of step attempts. The Postgres store
// implements it; the interface lives here, with its only consumer.
//
// AppendLog must be idempotent on (key, offset): the runner resends a chunk
// after a failed call and after a worker restart. A resent chunk always has
// the same offset and bytes as the original, so a sink may simply keep the
// first chunk stored at an offset.
type LogSink interface {
	AppendLog(ctx context.Context, key activities.LogKey, offset int64, data []byte) error
}

const (
	truncatedLine = "\n[atelier] log truncated\n"
	tailBytes     = 4 << 10
)

// logStream is the log of one attempt: a local file plus an ordered,
// offset-addressed stream shipped to the LogSink by a background flusher,
// so a slow or failing database never blocks the step's output pipe.
//
// Because the sink keeps the first chunk stored at an offset, chunk
// boundaries must never change once a chunk may have been sent: a failed
// chunk is retried as is, and every chunk is recorded in an index file next
// to the log before it is sent, so that a restarted attempt on the same
// machine can resend exactly the chunks its predecessor may have shipped.
type logStream struct {
	key      activities.LogKey
	sink     LogSink
	logger   *zap.Logger
	limit    int64
	chunk    int
	interval time.Duration
	deadline time.Duration
	// sinkCtx outlives the activity context: the output of a cancelled step
	// (what it printed on SIGTERM) is the part users most want to read.
	sinkCtx context.Context

	mu        sync.Mutex
	file      *os.File
	index     *os.File // "<offset> <size>" per chunk, written before sending it
	fileErr   bool
	shipped   int64  // offset the sink has confirmed
	pending   []byte // bytes from shipped onwards, not yet confirmed
	fixed     []int  // sizes of the chunks at the head of pending that may have been sent
	truncated bool
	last      byte   // last byte of the stream, 0 if unknown or empty
	tail      []byte // last process output, for failure messages
	sinkFails int

	kick    chan struct{}
	closing chan struct{}
	done    chan struct{}
}

// openLogStream opens an attempt's log. A fresh attempt starts empty. A
// restarted one continues the stream at the offset its predecessor's last
// heartbeat reported as shipped, after resending what the local file holds
// beyond it (shipped after that heartbeat, or never): the chunks listed in
// the index exactly as they were, then the rest. If the local file does not
// reach the offset (the attempt moved to another machine), the stream
// continues at the offset and the local file holds only this machine's part;
// chunks the other machine shipped after its last heartbeat then shadow
// ours at the same offsets, which can hide part of the log.
func openLogStream(ctx context.Context, r *Runner, key activities.LogKey, path string, restarted bool, base int64, logger *zap.Logger) (*logStream, error) {
	flags := os.O_RDWR | os.O_CREATE | os.O_APPEND
	if !restarted {
		flags |= os.O_TRUNC
		base = 0
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open step log: %w", err)
	}
	idx, err := os.OpenFile(path+".index", flags, 0o600)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open step log index: %w", err)
	}
	s := &logStream{
		key:      key,
		sink:     r.logs,
		logger:   logger,
		limit:    r.logLimit,
		chunk:    r.chunkSize,
		interval: r.flushInterval,
		deadline: r.flushDeadline,
		sinkCtx:  context.WithoutCancel(ctx),
		file:     f,
		index:    idx,
		shipped:  max(base, 0),
		kick:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	if restarted {
		if err := s.recover(); err != nil {
			logger.Warn("cannot resend the local log of the previous execution", zap.Error(err))
		}
	}
	if s.end() >= s.limit {
		s.truncated = true
	}
	go s.flushLoop()
	return s, nil
}

// recover queues the local log beyond s.shipped for resending.
func (s *logStream) recover() error {
	fi, err := s.file.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size <= s.shipped {
		return nil
	}
	data := make([]byte, size-s.shipped)
	if _, err := s.file.ReadAt(data, s.shipped); err != nil && err != io.EOF {
		return err
	}
	if _, err := s.index.Seek(0, io.SeekStart); err != nil {
		return err
	}
	// Chunks recorded from s.shipped on, as long as they tile the file.
	next := s.shipped
	sc := bufio.NewScanner(s.index)
	for sc.Scan() {
		var off, n int64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &off, &n); err != nil || n <= 0 {
			break // torn by the crash: that chunk was never sent
		}
		if off < next {
			continue
		}
		if off != next || off+n > size {
			break
		}
		s.fixed = append(s.fixed, int(n))
		next += n
	}
	s.pending = data
	s.last = data[len(data)-1]
	return nil
}

// Write accepts process output. It never fails, so the pipe reader keeps
// draining the pipe (a blocked pipe would stall the step) even past the cap.
func (s *logStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tail = append(s.tail, p...)
	if len(s.tail) > tailBytes {
		s.tail = append(s.tail[:0:0], s.tail[len(s.tail)-tailBytes:]...)
	}
	if s.truncated {
		return len(p), nil
	}
	room := max(s.limit-s.end(), 0)
	if int64(len(p)) <= room {
		s.appendLocked(p)
		return len(p), nil
	}
	s.appendLocked(p[:room])
	s.appendLocked([]byte(truncatedLine))
	s.truncated = true
	return len(p), nil
}

// note writes a runtime line. Runtime lines bypass the cap: they explain
// what happened to the step and are few.
func (s *logStream) note(format string, args ...any) {
	line := "[atelier] " + fmt.Sprintf(format, args...) + "\n"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != 0 && s.last != '\n' {
		line = "\n" + line
	}
	s.appendLocked([]byte(line))
}

func (s *logStream) end() int64 { return s.shipped + int64(len(s.pending)) }

func (s *logStream) appendLocked(p []byte) {
	if len(p) == 0 {
		return
	}
	if _, err := s.file.Write(p); err != nil && !s.fileErr {
		s.fileErr = true
		s.logger.Warn("cannot write local step log; still shipping it", zap.Error(err))
	}
	s.pending = append(s.pending, p...)
	s.last = p[len(p)-1]
	if len(s.pending) >= s.chunk {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// primeTail fills the tail that failure messages quote from the end of
// the local log, for a worker that adopted a running step: what it printed
// before the adoption counts too.
func (s *logStream) primeTail() {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := s.file.Stat()
	if err != nil {
		return
	}
	start := max(fi.Size()-tailBytes, 0)
	b := make([]byte, fi.Size()-start)
	if n, err := s.file.ReadAt(b, start); err == nil || err == io.EOF {
		s.tail = b[:n]
	}
}

// Shipped is the offset up to which the sink holds the log. Heartbeats carry
// it so that a restarted attempt continues the same stream.
func (s *logStream) Shipped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shipped
}

// LastLines returns up to n trailing lines of process output.
func (s *logStream) LastLines(n int) []string {
	s.mu.Lock()
	t := bytes.TrimRight(s.tail, "\n")
	s.mu.Unlock()
	if len(t) == 0 {
		return nil
	}
	lines := bytes.Split(t, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = string(bytes.TrimRight(l, "\r"))
	}
	return out
}

func (s *logStream) flushLoop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.kick:
		case <-s.closing:
			return
		}
		_ = s.flush()
	}
}

// flush ships pending bytes in chunks of at most s.chunk (except resent
// chunks, which keep their size). On error the chunk stays at the head of
// pending, fixed, and the next flush resends it.
func (s *logStream) flush() error {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return nil
		}
		off := s.shipped
		var n int
		if len(s.fixed) > 0 {
			n = s.fixed[0]
		} else {
			n = min(len(s.pending), s.chunk)
			s.fixed = append(s.fixed, n)
			if _, err := fmt.Fprintf(s.index, "%d %d\n", off, n); err != nil && !s.fileErr {
				s.fileErr = true
				s.logger.Warn("cannot write local step log index", zap.Error(err))
			}
		}
		data := bytes.Clone(s.pending[:n])
		s.mu.Unlock()

		ctx, cancel := context.WithTimeout(s.sinkCtx, 10*time.Second)
		err := s.sink.AppendLog(ctx, s.key, off, data)
		cancel()

		s.mu.Lock()
		if err != nil {
			s.sinkFails++
			fails := s.sinkFails
			s.mu.Unlock()
			// The first failure of a streak, then every 20th, so a
			// database outage does not flood the worker log.
			if fails == 1 || fails%20 == 0 {
				s.logger.Warn("cannot ship step log; will retry",
					zap.Int64("offset", off), zap.Int("failures", fails), zap.Error(err))
			}
			return err
		}
		s.sinkFails = 0
		s.fixed = s.fixed[1:]
		s.pending = s.pending[n:]
		if len(s.pending) == 0 {
			s.pending = nil // let a large buffer go
		}
		s.shipped += int64(n)
		s.mu.Unlock()
	}
}

// Close stops the flusher and ships what is left, retrying for a bounded
// time: the step's result must not wait on a database outage.
func (s *logStream) Close() {
	close(s.closing)
	<-s.done
	deadline := time.Now().Add(s.deadline)
	backoff := 100 * time.Millisecond
	for {
		before := s.Shipped()
		err := s.flush()
		if err == nil {
			break
		}
		if s.Shipped() > before {
			// The sink is answering, just not always: keep going.
			backoff = 100 * time.Millisecond
			continue
		}
		if time.Now().Add(backoff).After(deadline) {
			s.mu.Lock()
			lost := len(s.pending)
			s.mu.Unlock()
			s.logger.Error("giving up shipping step log; the local log file still has it",
				zap.Int("bytes", lost), zap.String("file", s.file.Name()), zap.Error(err))
			break
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
	for _, f := range []*os.File{s.file, s.index} {
		if err := f.Close(); err != nil {
			s.logger.Warn("closing local step log", zap.Error(err))
		}
	}
}
