package kube

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// LogSink stores step attempt logs, which the gateway serves (GET
// .../steps/{step}/logs). The Postgres store implements it. AppendLog must
// be idempotent on (key, offset): a retried activity stores the same bytes
// at the same offsets again. LogEnd is where the stored log ends: a
// follower that resumes (its activity retried) appends from there.
type LogSink interface {
	AppendLog(ctx context.Context, key activities.LogKey, offset int64, data []byte) error
	LogEnd(ctx context.Context, key activities.LogKey) (int64, error)
}

// WithLogSink makes the backend store the log of a step's output container
// (a Job's step container, a Spark driver, a RayJob's submitter, which
// follows the Ray job's log) in sink, so that the log is read the same way
// as a local step's: through REST and the CLI, live, and after the pod and
// its node are gone. A Job's container (not a wide step's item) is
// followed while it runs (follower.go), the others are copied when the
// step ends, successfully or not. Up to limit bytes (<= 0:
// DefaultLogLimit) are stored, the rest cut with a marker line; the
// attempt's secrets are redacted, line by line. A log that cannot be read
// (the pod's node does not serve logs) is skipped, and the step's outcome
// stands.
func WithLogSink(sink LogSink, limit int64) Option {
	return func(b *Backend) {
		b.logSink = sink
		b.logLimit = limit
		if b.logLimit <= 0 {
			b.logLimit = DefaultLogLimit
		}
	}
}

// DefaultLogLimit is what one attempt's log may hold, as on the local
// runtime.
const DefaultLogLimit = 8 << 20

// logChunk is the size of the chunks stored: fixed, so a retried copy
// stores the very same chunks.
const logChunk = 256 << 10

// truncatedLine ends a log cut at the limit.
const truncatedLine = "\n[atelier] log truncated\n"

// copyLog stores the log of container ("" = the first) of the pod that
// ended as term, once the attempt is over: what a follower of that pod
// did not store, else the whole log after what is stored already. Best effort: failures are
// logged, not returned.
func (r *stepRun) copyLog(ctx context.Context, term framework.Termination, container string) {
	b := r.b
	pod := term.Pod
	if b.logSink == nil || pod == "" {
		return
	}
	// Not the activity's context: a step that just ended still has its
	// log read when its activity is being cancelled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	from := int64(-1) // where to store from; -1: where the stored log ends
	if f := r.follower; f != nil && f.pod == pod {
		// The container has ended, so its stream ends shortly. The log
		// is read once more even so: a stream can end early (a broken
		// connection reads as its end), and what it stored is then
		// only skipped.
		f.wait(ctx)
		from = f.written()
	}
	if !b.nodeServesLogs(ctx, term.Node) {
		return
	}
	key := r.logKey()
	if from < 0 {
		end, err := b.logSink.LogEnd(ctx, key)
		if err != nil {
			r.logger.Warn("cannot read where the step's stored log ends", zap.Error(err))
			return
		}
		from = end
	}
	opts := &corev1.PodLogOptions{Container: container, LimitBytes: ptrTo(b.logLimit + 1)}
	stream, err := b.clients.Kube.CoreV1().Pods(r.ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		level := r.logger.Warn
		if apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) {
			level = r.logger.Debug // e.g. kwok's fake nodes serve no logs
		}
		level("cannot read the step's log", zap.String("pod", pod), zap.Error(err))
		return
	}
	data, err := io.ReadAll(io.LimitReader(stream, b.logLimit+1))
	_ = stream.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		r.logger.Warn("reading the step's log", zap.String("pod", pod), zap.Error(err))
		return
	}
	cut := int64(len(data)) > b.logLimit
	if cut {
		data = data[:b.logLimit]
	}
	data = r.lineRedactor().lines(data)
	if cut {
		data = append(data, truncatedLine...)
	}
	if from >= int64(len(data)) {
		return // stored already (an earlier execution of the activity)
	}
	data = data[from:]
	for off := 0; off < len(data); off += logChunk {
		end := min(off+logChunk, len(data))
		if err := b.logSink.AppendLog(ctx, key, from+int64(off), data[off:end]); err != nil {
			r.logger.Warn("storing the step's log", zap.Error(err))
			return
		}
	}
	r.logger.Debug("step log stored", zap.String("pod", pod), zap.Int64("from", from), zap.Int("bytes", len(data)))
}

// logKey is the attempt's log.
func (r *stepRun) logKey() activities.LogKey {
	item := -1
	if r.req.Item != nil {
		item = *r.req.Item
	}
	return activities.LogKey{RunID: r.req.RunID, Step: r.req.Step, Item: item, Attempt: r.req.Attempt}
}

// lineRedactor hides the attempt's secret values, line by line, so that a
// log stored as it is read (follower.go) and one copied whole read alike.
type lineRedactor struct{ r *redact.Redactor }

func (r *stepRun) lineRedactor() lineRedactor { return lineRedactor{r.redactor()} }

// lines redacts data, whole lines and a last partial one each on its own.
func (l lineRedactor) lines(data []byte) []byte {
	if l.r == nil {
		return data
	}
	var out []byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n') + 1
		if i == 0 {
			i = len(data)
		}
		out = append(out, l.r.String(string(data[:i]))...)
		data = data[i:]
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// nodeServesLogs reports whether the node runs a kubelet API that the API
// server can read logs from: a node whose kubelet endpoint port is 0
// (kwok's fake nodes, some virtual kubelets) has none, and asking would
// cost a request per step for a 404. The answer is cached per node name.
func (b *Backend) nodeServesLogs(ctx context.Context, node string) bool {
	if node == "" {
		return false
	}
	if v, ok := b.logNodes.Load(node); ok {
		return v.(bool)
	}
	n, err := b.clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return true // cannot tell (no permission to read nodes?): try the log
	}
	serves := n.Status.DaemonEndpoints.KubeletEndpoint.Port != 0
	b.logNodes.Store(node, serves)
	return serves
}
