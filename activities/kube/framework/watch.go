package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ErrClosed is returned by waits that the backend's shutdown interrupted;
// the work they waited for goes on, and a retry on a live backend resumes.
var ErrClosed = errors.New("the backend was closed")

// JobNameLabel is the label the Job controller puts on a Job's pods.
const JobNameLabel = "batch.kubernetes.io/job-name"

// Informers runs a backend's shared informers: at most one per resource
// kind (plus one for step pods), each started on first use and then kept
// for the backend's lifetime. Every waiting activity subscribes to the
// object it waits for; events are routed to subscribers by key, so a
// thousand concurrent steps cost one watch per kind on the API server.
//
// The informers are filtered by LabelManagedBy on the server side, so they
// only ever transfer and cache Atelier's objects.
type Informers struct {
	ctx       context.Context // lifetime of every informer
	namespace string          // "" = all namespaces
	logger    *zap.Logger

	mu      sync.Mutex
	watches map[string]*Watch
}

// NewInformers returns informers over namespace ("" for all namespaces)
// that run until ctx ends.
func NewInformers(ctx context.Context, namespace string, logger *zap.Logger) *Informers {
	return &Informers{ctx: ctx, namespace: namespace, logger: logger, watches: map[string]*Watch{}}
}

// Done is closed when the informers stop (the backend was closed): waiters
// will receive no more events.
func (in *Informers) Done() <-chan struct{} { return in.ctx.Done() }

// Started lists the watches whose informer has been started.
func (in *Informers) Started() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for name, w := range in.watches {
		if w.started.Load() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// For returns the shared watch of r's managed objects, keyed by
// "<namespace>/<name>".
func (in *Informers) For(r Resource) *Watch {
	return in.watch(r.Kind(), r.NewObject(), ManagedSelector,
		func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, ns, o)
		},
		func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return r.Watch(ctx, ns, o)
		},
		func(o metav1.Object) string { return o.GetNamespace() + "/" + o.GetName() })
}

// Pods returns the shared watch of managed Job pods, keyed by
// "<namespace>/<job name>".
func (in *Informers) Pods(kube kubernetes.Interface) *Watch {
	return in.watch("Pod", &corev1.Pod{}, ManagedSelector+","+JobNameLabel,
		func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return kube.CoreV1().Pods(ns).List(ctx, o)
		},
		func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return kube.CoreV1().Pods(ns).Watch(ctx, o)
		},
		func(o metav1.Object) string {
			if j := o.GetLabels()[JobNameLabel]; j != "" {
				return o.GetNamespace() + "/" + j
			}
			return ""
		})
}

const keyIndex = "atelier-key"

func (in *Informers) watch(name string, example Object, selector string,
	list func(context.Context, string, metav1.ListOptions) (runtime.Object, error),
	wat func(context.Context, string, metav1.ListOptions) (watch.Interface, error),
	key func(metav1.Object) string,
) *Watch {
	in.mu.Lock()
	defer in.mu.Unlock()
	if w, ok := in.watches[name]; ok {
		return w
	}
	ns := in.namespace
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return list(ctx, ns, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return wat(ctx, ns, o)
		},
	}
	keyOf := func(obj any) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if o, ok := obj.(metav1.Object); ok {
			return key(o)
		}
		return ""
	}
	// Plain list-then-watch, not WatchList (streaming lists, on by default
	// since client-go 1.35): the lists are small (label-filtered to
	// Atelier's objects), and clients that cannot stream — fake clientsets
	// of operators, older servers behind proxies — would otherwise wait
	// for a bookmark that never comes.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}), example, 0, cache.Indexers{
		keyIndex: func(obj any) ([]string, error) {
			if k := keyOf(obj); k != "" {
				return []string{k}, nil
			}
			return nil, nil
		},
	})
	// Managed fields are the bulk of a stored object and nothing here reads
	// them; with a thousand steps in flight that is most of the cache.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
		return obj, nil
	})
	logger := in.logger.With(zap.String("watch", name))
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		// The reflector relists and rewatches by itself; this only says
		// why events may be late.
		logger.Warn("watch interrupted; re-establishing", zap.Error(err))
	})
	w := &Watch{
		name:     name,
		ctx:      in.ctx,
		informer: inf,
		keyOf:    keyOf,
		synced:   make(chan struct{}),
		waiters:  map[string]map[*Waiter]struct{}{},
		logger:   logger,
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.notify(obj, false) },
		UpdateFunc: func(_, obj any) { w.notify(obj, false) },
		DeleteFunc: func(obj any) { w.notify(obj, true) },
	})
	in.watches[name] = w
	return w
}

// Watch is one shared informer and the waiters subscribed to its objects.
type Watch struct {
	name     string
	ctx      context.Context
	informer cache.SharedIndexInformer
	keyOf    func(any) string
	logger   *zap.Logger

	startOnce sync.Once
	started   atomic.Bool
	synced    chan struct{}

	mu      sync.Mutex
	waiters map[string]map[*Waiter]struct{}
}

// Start starts the informer on first use and waits until its cache has
// synced (or ctx ends). Later calls return at once.
func (w *Watch) Start(ctx context.Context) error {
	w.startOnce.Do(func() {
		w.started.Store(true)
		go w.informer.RunWithContext(w.ctx)
		go func() {
			if cache.WaitForCacheSync(w.ctx.Done(), w.informer.HasSynced) {
				close(w.synced)
			}
		}()
	})
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.ctx.Done():
		return fmt.Errorf("%s watch stopped: %w", w.name, ErrClosed)
	}
}

// Subscribe registers interest in key. Subscribe before reading the key's
// state (Get, List): an event after the read then cannot be missed.
func (w *Watch) Subscribe(key string) *Waiter {
	c := make(chan struct{}, 1)
	s := &Waiter{C: c, c: c, w: w, key: key}
	w.mu.Lock()
	m := w.waiters[key]
	if m == nil {
		m = map[*Waiter]struct{}{}
		w.waiters[key] = m
	}
	m[s] = struct{}{}
	w.mu.Unlock()
	return s
}

// Get returns the cached object with key "<namespace>/<name>".
func (w *Watch) Get(key string) (Object, bool) {
	obj, ok, err := w.informer.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	o, ok := obj.(Object)
	return o, ok
}

// List returns the cached objects with key (for pods: a Job's pods).
func (w *Watch) List(key string) []Object {
	objs, err := w.informer.GetIndexer().ByIndex(keyIndex, key)
	if err != nil {
		return nil
	}
	out := make([]Object, 0, len(objs))
	for _, o := range objs {
		if obj, ok := o.(Object); ok {
			out = append(out, obj)
		}
	}
	return out
}

// notify routes one event to the waiters of its key. It only pokes them:
// a waiter reads the current state from the cache, so bursts coalesce and
// a slow waiter never holds up the informer.
func (w *Watch) notify(obj any, deleted bool) {
	key := w.keyOf(obj)
	if key == "" {
		return
	}
	var uid types.UID
	if deleted {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if o, ok := obj.(metav1.Object); ok {
			uid = o.GetUID()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.waiters[key] {
		if deleted {
			s.markDeleted(uid)
		}
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

// Waiter receives a poke on C whenever an object with its key changes.
type Waiter struct {
	// C receives (coalesced) change notifications.
	C <-chan struct{}
	c chan struct{}

	w   *Watch
	key string

	mu      sync.Mutex
	deleted map[types.UID]bool
}

func (s *Waiter) markDeleted(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted == nil {
		s.deleted = map[types.UID]bool{}
	}
	s.deleted[uid] = true
}

// Deleted reports whether a delete event was seen for the object with uid
// since Subscribe: it may have come and gone before the cache showed it.
func (s *Waiter) Deleted(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleted[uid]
}

// Close unsubscribes.
func (s *Waiter) Close() {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if m := s.w.waiters[s.key]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(s.w.waiters, s.key)
		}
	}
}

// noWatchList opts informers out of WatchList semantics.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }
