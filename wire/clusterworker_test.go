package wire

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/placement"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/internal/stack/temporaltest"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// TestInitClusterWorker runs the cluster worker as `atelier worker --cluster`
// builds it, against a real kube-apiserver, Temporal dev server and
// Postgres: it registers the cluster with its labels, reports capacity,
// polls the cluster's task queue, and the local worker's Selector then
// places a GPU step on it. Skipped with -short.
func TestInitClusterWorker(t *testing.T) {
	kc := kubetest.Start(t)
	ctx := t.Context()
	n, err := kc.Clientset().CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "smoke", Labels: map[string]string{placement.GPUProductLabel: "NVIDIA-H100"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("8Gi"), placement.GPUResource: resource.MustParse("8")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := kc.Clientset().CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ts := temporaltest.Server(t)
	// TestMain is kubetest's, so stop the shared Temporal server here (the
	// only test of this package that uses it).
	t.Cleanup(func() { _ = ts.Stop() })
	cfg := config.Default()
	cfg.DatabaseURL = storetest.NewDatabase(t)
	cfg.TemporalHostPort = ts.HostPort()
	cfg.Namespace = ts.ClientOptions().Namespace
	cfg.Cluster, cfg.Kubeconfig, cfg.ClusterLabels = "smoke", kc.Kubeconfig(), map[string]string{"env": "test"}
	if err := cfg.ValidateCluster(); err != nil {
		t.Fatal(err)
	}
	w, cleanup, err := InitClusterWorker(ctx, cfg, telemetry.New(telemetry.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()

	s, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := s.GetCluster(ctx, "smoke")
		if err == nil && c.Capacity != nil {
			if c.Labels["env"] != "test" || c.Capacity.GPUs["NVIDIA-H100"].Free != 8 {
				t.Fatalf("%+v", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no capacity: %v %+v", err, c)
		}
		time.Sleep(200 * time.Millisecond)
	}
	tc, err := client.DialContext(ctx, ts.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// Pollers show up once the first long poll reaches the server.
	for {
		d, err := tc.DescribeTaskQueue(ctx, activities.TaskQueueForCluster("smoke"), enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err == nil && len(d.Pollers) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no activity pollers on the cluster queue: %v %+v", err, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d, err := tc.DescribeTaskQueue(ctx, activities.TaskQueueForCluster("smoke"), enumspb.TASK_QUEUE_TYPE_WORKFLOW); err != nil || len(d.Pollers) != 0 {
		t.Fatalf("workflow pollers on the cluster queue: %v %+v", err, d)
	}
	res, err := placement.New(s, nil, nil).SelectCluster(ctx, activities.SelectClusterRequest{Step: "x", GPUs: 1, GPUType: "NVIDIA-H100"})
	if err != nil || res.Cluster != "smoke" {
		t.Fatalf("%+v %v", res, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
