package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// Atelier installed on the cluster by its own Helm chart, as an operator
// would: the gateway, the local-runtime worker and a cluster worker run as
// real pods of the Atelier image on the real node; `helm test` passes (its
// pod pings the gateway through the Service); a pipeline started through
// the in-cluster gateway (reached at its Service's cluster IP) runs a Job
// step on the same cluster; and a `helm upgrade` that rolls every
// Atelier pod while a step runs keeps the run going to its end.
//
// How the test wires it: Postgres, Temporal and the API server of the
// tests listen on the host's loopback, which pods cannot reach, so each is
// forwarded to the node's address (kubetest.ForwardToPods); the chart's
// Secret carries those addresses, and the cluster worker reaches the API
// server with a kubeconfig (the chart's kubeconfigSecret) naming the
// forwarded address (the node has no cluster DNS and its pods cannot use
// the in-cluster `kubernetes` Service, whose endpoint is loopback). The
// in-process gateway of the test stack shares the database and Temporal
// namespace (its token works on the in-cluster one); no worker runs
// outside the cluster.
func TestHelmChartOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane, a real node and helm")
	}
	e := newKubeEnv(t, outputsScript, false, stackOptions{noWorker: true})
	node := e.kc.RealNode(t)
	ctx := context.Background()
	require.NoError(t, node.ImportAtelierImage(ctx))
	helm, err := devstack.EnsureHelm(ctx, func(format string, args ...any) { t.Logf(format, args...) })
	require.NoError(t, err)

	// What the pods reach, forwarded from the host's loopback.
	db, err := url.Parse(e.cfg.DatabaseURL)
	require.NoError(t, err)
	db.Host = kubetest.ForwardToPods(t, db.Host)
	temporalAddr := kubetest.ForwardToPods(t, e.cfg.TemporalHostPort)
	kc, err := clientcmd.LoadFromFile(e.kc.Kubeconfig())
	require.NoError(t, err)
	apiAddr := kubetest.ForwardToPods(t, strings.TrimPrefix(e.kc.Host(), "https://"))
	for _, c := range kc.Clusters {
		c.Server = "https://" + apiAddr
		c.TLSServerName = "kubernetes.default.svc" // a name of the API server's certificate (not the node's address)
	}
	kubeconfig, err := clientcmd.Write(*kc)
	require.NoError(t, err)

	ns := e.kc.Namespace(t)
	_, err = e.kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "atelier"},
		StringData: map[string]string{"database-url": db.String(), "temporal": temporalAddr}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubeconfig"},
		Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})
	require.NoError(t, err)

	onNode := map[string]any{
		"nodeSelector": map[string]string{kubetest.RealNodeLabel: "true"},
		"tolerations":  []map[string]string{{"key": kubetest.RealNodeLabel, "operator": "Exists", "effect": "NoSchedule"}},
	}
	values := map[string]any{
		"existingSecret": "atelier",
		"image":          map[string]any{"repository": strings.Split(kubetest.AtelierImage, ":")[0], "tag": "dev", "pullPolicy": "Never"},
		"config":         map[string]any{"namespace": e.cfg.Namespace, "taskQueue": e.cfg.TaskQueue, "logLevel": "info", "shutdownTimeout": "10s"},
		"nodeSelector":   onNode["nodeSelector"],
		"tolerations":    onNode["tolerations"],
		"clusterWorkers": []map[string]any{{
			"name": e.cluster, "kubeconfigSecret": "kubeconfig", "kubeNamespaceTemplate": e.namespace,
			// The steps' pods go to the real node too.
			"podDefaults": onNode,
		}},
	}
	vb, err := yaml.Marshal(values)
	require.NoError(t, err)
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, vb, 0o600))
	chart, err := filepath.Abs("../deploy/helm/atelier")
	require.NoError(t, err)
	home := t.TempDir()
	runHelm := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, helm, append(args, "-n", ns, "--kubeconfig", e.kc.Kubeconfig())...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("helm %s: %s", args[0], time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out.String(), e.podsReport(ctx, ns))
		}
		return out.String()
	}
	runHelm("install", "atelier", chart, "-f", valuesFile, "--wait", "--timeout", "5m")
	t.Cleanup(func() { runHelm("uninstall", "atelier", "--wait", "--timeout", "2m") })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Atelier's pods:\n%s", e.podsReport(context.Background(), ns))
		}
	})
	e.waitRegistered(t)

	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=atelier"})
	require.NoError(t, err)
	components := map[string]bool{}
	for _, p := range pods.Items {
		assert.Equal(t, kubetest.RealNodeName, p.Spec.NodeName, "%s runs on the real node", p.Name)
		components[p.Labels["app.kubernetes.io/component"]] = true
	}
	assert.Equal(t, map[string]bool{"gateway": true, "worker": true, "cluster-worker": true}, components)

	out := runHelm("test", "atelier", "--logs", "--timeout", "3m")
	assert.Contains(t, out, "is ready", "helm test's pod pinged the gateway")

	// The in-cluster gateway, at its Service's cluster IP (kube-proxy's
	// rules on the host).
	svc, err := e.kube.CoreV1().Services(ns).Get(ctx, "atelier-gateway", metav1.GetOptions{})
	require.NoError(t, err)
	inCluster := *e.stack
	inCluster.url = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
	inCluster.createPipeline("in-cluster", fmt.Sprintf(`
steps:
  - name: hello
    placement: {cluster: %s}
    container:
      image: %s
      command: ["sh", "-c", "echo from the cluster; sleep 20; echo '{\"ok\": true}' > \"$ATELIER_OUTPUTS\""]
`, e.cluster, kubetest.StepImage))
	id := inCluster.start("in-cluster", nil)
	inCluster.waitRun(id, 2*time.Minute, "the step's Job running on the real node", func(r gen.Run) bool {
		list, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		require.NoError(t, err)
		for _, p := range list.Items {
			if p.Spec.NodeName == kubetest.RealNodeName && p.Status.Phase == corev1.PodRunning {
				return true
			}
		}
		return false
	})

	// An upgrade rolls the gateway, the worker and the cluster worker
	// while the step runs; the run goes on to its end. A client reads the
	// run through the Service all along: a stopping gateway drains
	// (gateway.drainDelay) while kube-proxy drops it, so no request is
	// refused or lost to a pod that is gone.
	reader := inCluster.client()
	var reads, failed atomic.Int32
	var failures sync.Map
	var stop atomic.Bool
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for !stop.Load() {
			// Each read has its own bound: a connection black-holed at
			// the Service's IP (a pod that is gone) times out and counts.
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			res, err := reader.GetRunWithResponse(rctx, inCluster.project, id)
			cancel()
			switch {
			case err != nil:
				failed.Add(1)
				failures.Store(err.Error(), true)
			case res.StatusCode() != 200:
				failed.Add(1)
				failures.Store(fmt.Sprintf("%d %s", res.StatusCode(), res.Body), true)
			}
			reads.Add(1)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	runHelm("upgrade", "atelier", chart, "-f", valuesFile, "--set-string", "gateway.podAnnotations.rev=2",
		"--set-string", "worker.podAnnotations.rev=2", "--set-string", "clusterWorkerDefaults.podAnnotations.rev=2", "--wait", "--timeout", "5m")
	// The old gateways drain for 5 s after --wait returns.
	time.Sleep(6 * time.Second)
	stop.Store(true)
	<-readerDone
	var seen []string
	failures.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
	t.Logf("reads through the Service during the upgrade: %d, failed %d", reads.Load(), failed.Load())
	assert.Zero(t, failed.Load(), "requests lost during the upgrade: %v", seen)
	assert.Greater(t, reads.Load(), int32(50), "the reader kept reading through the upgrade")
	r := inCluster.waitTerminal(id, 3*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, map[string]any{"ok": true}, stepByName(r, "hello").Outputs)
	log := inCluster.stepLog(id, "hello", nil)
	assert.Contains(t, log, "from the cluster")
}

// podsReport lists a namespace's pods with their phase and waiting
// reasons, for a failure message.
func (e *kubeEnv) podsReport(ctx context.Context, ns string) string {
	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil {
				fmt.Fprintf(&b, " %s: %s %s", c.Name, w.Reason, w.Message)
			}
			if x := c.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " %s last exit %d: %s", c.Name, x.ExitCode, x.Message)
			}
		}
		b.WriteString("\n")
		tail := int64(30)
		if logs, err := e.kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx); err == nil {
			fmt.Fprintf(&b, "%s\n", logs)
		}
	}
	return b.String()
}
