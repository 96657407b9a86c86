package kube

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
)

// A Job step's container log is followed while the container runs and
// stored as it comes, so `atelier logs -f`, REST and the web UI show it
// live, and a log outlives its pod and node whatever ends the attempt
// (argo-workflows#1005). The stored log is the container's output,
// redacted line by line, at the offsets the whole log would have: a
// follower that starts again (its activity retried on another worker, the
// stream broken) reads the log from its start and skips what the sink
// already holds (LogSink.LogEnd), and copyLog, when the attempt ends,
// stores only what the follower did not.

// Bounds of a follower's writes: a chatty container costs a write per
// followChunk or per followFlush, not per line.
const (
	followChunk = 64 << 10
	followFlush = time.Second
)

// follower is one pod's log being followed into the sink.
type follower struct {
	pod  string
	done chan struct{}

	mu     sync.Mutex
	stored int64 // bytes of the redacted log the sink holds
}

// written is how much of the log is stored.
func (f *follower) written() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stored
}

// wait waits for the follower to end (or ctx).
func (f *follower) wait(ctx context.Context) {
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

// maybeFollow starts following the step's output container once one of
// its pods runs it on a node that serves logs: Jobs only (their pods are
// watched), not a wide step's items (a stream per item would be
// thousands of connections), one pod per attempt.
func (r *stepRun) maybeFollow(ctx context.Context, pods []*corev1.Pod, container string) {
	b := r.b
	if b.logSink == nil || r.follower != nil || r.req.DeleteAfter > 0 {
		return
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" || !containerStarted(p, container) {
			continue
		}
		if !b.nodeServesLogs(ctx, p.Spec.NodeName) {
			return
		}
		f := &follower{pod: p.Name, done: make(chan struct{})}
		r.follower = f
		// Not the activity's context alone: the log of a step that is
		// being cancelled is what its user most wants; stopFollowing
		// ends it with the attempt.
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r.stopFollowing = cancel
		go r.follow(fctx, f, container)
		return
	}
}

// containerStarted reports whether the pod's container ("" = the first)
// runs or has run.
func containerStarted(p *corev1.Pod, container string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if container != "" && cs.Name != container {
			continue
		}
		return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
	}
	return false
}

// follow streams f's pod log into the sink until the stream ends.
func (r *stepRun) follow(ctx context.Context, f *follower, container string) {
	defer close(f.done)
	b, key := r.b, r.logKey()
	skip, err := b.logSink.LogEnd(ctx, key)
	if err != nil {
		r.logger.Warn("cannot read where the step's stored log ends; it is copied when the step ends", zap.Error(err))
		return
	}
	f.mu.Lock()
	f.stored = skip
	f.mu.Unlock()
	opts := &corev1.PodLogOptions{Container: container, Follow: true, LimitBytes: ptrTo(b.logLimit + 1)}
	stream, err := b.clients.Kube.CoreV1().Pods(r.ns).GetLogs(f.pod, opts).Stream(ctx)
	if err != nil {
		r.logger.Info("cannot follow the step's log; it is copied when the step ends", zap.String("pod", f.pod), zap.Error(err))
		return
	}
	defer stream.Close()

	red := r.lineRedactor()
	var (
		pos     int64  // bytes of the redacted log produced so far
		raw     int64  // bytes read from the container's log
		pending []byte // produced, not stored yet
		last    = time.Now()
	)
	flush := func() bool {
		if len(pending) == 0 {
			return true
		}
		f.mu.Lock()
		at := f.stored
		f.mu.Unlock()
		// Stored even as the follower stops: the lines a cancelled
		// step printed last are kept.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := b.logSink.AppendLog(wctx, key, at, pending); err != nil {
			r.logger.Warn("storing the followed log; the rest is copied when the step ends", zap.Error(err))
			return false
		}
		f.mu.Lock()
		f.stored += int64(len(pending))
		f.mu.Unlock()
		pending, last = nil, time.Now()
		return true
	}
	// produce adds redacted bytes, past what the sink holds already.
	produce := func(data []byte) {
		if end := pos + int64(len(data)); end > skip {
			from := max(skip-pos, 0)
			pending = append(pending, data[from:]...)
		}
		pos += int64(len(data))
	}
	// Lines are read on their own goroutine so that a quiet container's
	// last lines are stored within followFlush, not at its next line.
	type read struct {
		line []byte
		err  error
	}
	reads := make(chan read, 16)
	go func() {
		defer close(reads)
		lines := bufio.NewReaderSize(stream, 64<<10)
		for {
			line, err := lines.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				err = nil // a line longer than the buffer: stored in parts
			}
			select {
			case reads <- read{append([]byte(nil), line...), err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(followFlush)
	defer tick.Stop()
	for {
		var rd read
		var ok bool
		select {
		case rd, ok = <-reads:
			if !ok { // ctx done
				flush()
				return
			}
		case <-tick.C:
			if time.Since(last) >= followFlush && !flush() {
				return
			}
			continue
		}
		if len(rd.line) > 0 {
			keep := rd.line
			if left := b.logLimit - raw; int64(len(keep)) > left {
				keep = keep[:max(left, 0)]
			}
			raw += int64(len(rd.line))
			produce(red.lines(keep))
			if raw > b.logLimit {
				produce([]byte(truncatedLine))
				flush()
				return
			}
		}
		if rd.err != nil {
			if !errors.Is(rd.err, io.EOF) && ctx.Err() == nil {
				r.logger.Info("following the step's log ended; the rest is copied when the step ends", zap.Error(rd.err))
			}
			flush()
			return
		}
		if len(pending) >= followChunk && !flush() {
			return
		}
	}
}
