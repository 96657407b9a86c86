package app

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	cat "github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

type fakePoller struct {
	mu               sync.Mutex
	started, stopped bool
	startErr         error
}

func (p *fakePoller) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	return p.startErr
}

func (p *fakePoller) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
}

type fakeRegistry struct {
	mu        sync.Mutex
	upserts   []cat.Cluster
	reports   []cat.ClusterCapacity
	upsertErr error
	reportErr error
	reported  chan struct{}
}

func (r *fakeRegistry) UpsertCluster(_ context.Context, c cat.Cluster) (cat.Cluster, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.upsertErr != nil {
		return cat.Cluster{}, false, r.upsertErr
	}
	r.upserts = append(r.upserts, c)
	return c, len(r.upserts) == 1, nil
}

func (r *fakeRegistry) ReportClusterCapacity(_ context.Context, name string, c cat.ClusterCapacity, _ time.Time) error {
	r.mu.Lock()
	r.reports = append(r.reports, c)
	err := r.reportErr
	r.mu.Unlock()
	select {
	case r.reported <- struct{}{}:
	default:
	}
	return err
}

func gpuNode() *corev1.Node {
	return kubetest.MakeNode("n1").CPU("8").Memory("32Gi").GPUs(kubetest.L4, 2).Ready(true).Obj()
}

func TestClusterWorkerRegistersAndReports(t *testing.T) {
	reg := &fakeRegistry{reported: make(chan struct{}, 10)}
	p := &fakePoller{}
	cfg := config.Default()
	cfg.Cluster = "gpu-east"
	w := newClusterWorker(p, cfg, fake.NewClientset(gpuNode()), reg, zap.NewNop())
	w.interval = 10 * time.Millisecond

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for range 3 { // the first report at start, then on ticks
		select {
		case <-reg.reported:
		case <-time.After(5 * time.Second):
			t.Fatal("no capacity report")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	reg.mu.Lock()
	defer reg.mu.Unlock()
	if len(reg.upserts) != 1 || reg.upserts[0].Name != "gpu-east" || reg.upserts[0].TaskQueue != "atelier-k8s-gpu-east" || reg.upserts[0].Labels != nil {
		t.Fatalf("registration %+v (nil labels must keep the registered ones)", reg.upserts)
	}
	if c := reg.reports[0]; c.Nodes != 1 || c.GPUs["NVIDIA-L4"].Free != 2 || c.CPUMillis.Total != 8000 {
		t.Fatalf("report %+v", c)
	}
	if !p.started || !p.stopped {
		t.Fatalf("poller started=%v stopped=%v", p.started, p.stopped)
	}
}

func TestClusterWorkerLabelsFromConfig(t *testing.T) {
	reg := &fakeRegistry{reported: make(chan struct{}, 1)}
	cfg := config.Default()
	cfg.Cluster, cfg.ClusterLabels = "east", map[string]string{"tier": "gpu"}
	w := newClusterWorker(&fakePoller{}, cfg, fake.NewClientset(), reg, zap.NewNop())
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // register, report once, stop
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if reg.upserts[0].Labels["tier"] != "gpu" {
		t.Fatalf("%+v", reg.upserts)
	}
}

// Capacity failures are logged and retried; they never stop the worker.
func TestClusterWorkerCapacityErrorsAreNotFatal(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	reg := &fakeRegistry{reported: make(chan struct{}, 10), reportErr: cat.ErrNotFound}
	kube := fake.NewClientset(gpuNode())
	var calls int
	var mu sync.Mutex
	kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return true, nil, errors.New(`nodes is forbidden: User "system:serviceaccount:atelier:atelier-worker" cannot list resource "nodes"`)
		}
		return false, nil, nil
	})
	cfg := config.Default()
	cfg.Cluster = "east"
	w := newClusterWorker(&fakePoller{}, cfg, kube, reg, zap.New(core))
	w.interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-reg.reported: // the second attempt measured and tried to store
	case <-time.After(5 * time.Second):
		t.Fatal("no report after a failed measurement")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessageSnippet("cannot measure cluster capacity").Len() == 0 {
		t.Error("measurement failure not logged")
	}
	if logs.FilterMessageSnippet("no longer registered").Len() == 0 {
		t.Error("deleted cluster not logged")
	}
}

func TestClusterWorkerRegistrationFailureIsFatal(t *testing.T) {
	p := &fakePoller{}
	cfg := config.Default()
	cfg.Cluster = "east"
	w := newClusterWorker(p, cfg, fake.NewClientset(), &fakeRegistry{upsertErr: errors.New("db down")}, zap.NewNop())
	if err := w.Run(t.Context()); err == nil || p.started {
		t.Fatalf("err %v, started %v", err, p.started)
	}
}
