package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// An inference endpoint on a real node: each revision is a Deployment
// whose pods run the model server image (examples/modelserver speaking
// vLLM's API) behind real kubelet readiness probes, with the cluster's pod
// defaults (the node's toleration and selector) from the worker's
// --pod-defaults; the gateway's proxy reaches a revision through its
// Service's cluster IP (kube-proxy's rules on the host, no cluster DNS);
// a new spec rolls out a second revision, which then answers, its engine
// given a project secret from a Secret of the revision's. Then the
// endpoint serves a registered model, following its alias: each
// revision's init container fetches the version's bytes with the
// launcher (a grant of the revision's, URLs from the gateway), the engine
// loads them (its X-Model-Weights, through the proxy, is the version's
// digest), and moving the alias rolls out a revision serving the next
// version.
func TestEndpointOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	defaults := fmt.Sprintf("nodeSelector: {%[1]s: \"true\"}\ntolerations: [{key: %[1]s, operator: Exists, effect: NoSchedule}]\n", kubetest.RealNodeLabel)
	// The node's pods reach the gateway (the launcher fetching a model).
	e := newKubeEnv(t, outputsScript, true, stackOptions{podDefaults: defaults, listenAddr: "0.0.0.0:0"})
	e.kc.RealNode(t)

	spec := func(rev string) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": kubetest.ModelServerImage,
			"args": []string{"--startup-delay", "500ms", "--revision", rev},
			// The engine listens on every address of its pod (the fake's
			// default is loopback; vLLM's is every address).
			"env":      []map[string]any{{"name": "ATELIER_FAKE_ADDR", "value": "0.0.0.0:8000"}},
			"replicas": map[string]any{"min": 1, "max": 1},
			// The endpoint's own pod settings, under the cluster's
			// defaults: a label and a scratch volume the kubelet mounts.
			"pod": map[string]any{"labels": map[string]any{"team": "serving"},
				"volumes": []map[string]any{{"name": "scratch", "mountPath": "/scratch", "emptyDir": map[string]any{"sizeLimit": "64Mi"}}}},
			"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}
	}
	start := time.Now()
	e.createEndpoint(t, e.cluster, spec("one"))
	e.cleanupEndpoint(t)
	e.waitEndpoint(t, 2*time.Minute, "revision 1 ready on the real node", revisionServes(1))
	t.Logf("revision 1 ready on the real node %s after the create", time.Since(start).Round(time.Millisecond))

	pods, err := e.kube.CoreV1().Pods(e.namespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	onNode := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == kubetest.RealNodeName && strings.Contains(p.Name, "chat") {
			onNode++
			require.NotEmpty(t, p.Status.ContainerStatuses)
			assert.True(t, p.Status.ContainerStatuses[0].Ready, "the kubelet's readiness probe passed")
			assert.Equal(t, "serving", p.Labels["team"], "the endpoint's pod settings")
			assert.True(t, slices.ContainsFunc(p.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/scratch" }),
				"the endpoint's volume is mounted: %+v", p.Spec.Containers[0].VolumeMounts)
		}
	}
	assert.Equal(t, 1, onNode, "the revision's pod runs on the real node")

	var code int
	var rev, body string
	require.Eventually(t, func() bool {
		code, rev, body = e.complete(context.Background())
		return code == 200
	}, 30*time.Second, 200*time.Millisecond, "a completion through the gateway's proxy: %d %s", code, body)
	assert.Equal(t, "1", rev)
	assert.Contains(t, body, "one", "the model server of revision 1 answered")

	// Revision 2's engine needs a project secret (-require-env: it exits
	// without it), which reaches it from a Secret of the revision's.
	value := fmt.Sprintf("hf_%d_Zr8Kp3", time.Now().UnixNano())
	sb, _ := json.Marshal(map[string]string{"value": value})
	code, raw := e.raw("PUT", e.path("/secrets/hf-token"), sb)
	require.Equal(t, 201, code, "%s", raw)
	two := spec("two")
	two["args"] = []string{"--startup-delay", "500ms", "--revision", "two", "--require-env", "HF_TOKEN"}
	two["secrets"] = []map[string]any{{"name": "hf-token", "env": "HF_TOKEN"}}
	e.updateEndpoint(t, two)
	e.waitEndpoint(t, 2*time.Minute, "revision 2 promoted", revisionServes(2))
	require.Eventually(t, func() bool {
		code, rev, body = e.complete(context.Background())
		return code == 200 && rev == "2"
	}, 30*time.Second, 200*time.Millisecond, "revision 2 answers: %d %s %s", code, rev, body)
	assert.Contains(t, body, "two")
	code, raw = e.raw("GET", e.path("/endpoints/chat"), nil)
	require.Equal(t, 200, code)
	assert.NotContains(t, string(raw), value, "the secret's value is not in REST")
	deps, err := e.kube.AppsV1().Deployments(e.namespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	db, _ := json.Marshal(deps)
	assert.NotContains(t, string(db), value, "nor in the Deployments: the engine reads it from the revision's Secret")

	// A registered model: two versions trained on the local runtime.
	digests := e.registerSentimentVersions(t)
	code, raw = e.raw("PUT", e.path("/models/sentiment/aliases/champion"), []byte(`{"version": 1}`))
	require.Equal(t, 200, code, "%s", raw)

	registered := spec("three")
	registered["model"] = map[string]any{"ref": "sentiment@champion", "follow": true}
	e.updateEndpoint(t, registered)
	e.waitEndpoint(t, 2*time.Minute, "revision 3 (sentiment version 1) promoted", revisionServes(3))
	require.Eventually(t, func() bool { return e.servedWeightsOf(t, "sentiment") == digests[1] }, 30*time.Second, 200*time.Millisecond,
		"the engine loaded version 1's bytes, fetched into its pod: %s", e.servedWeightsOf(t, "sentiment"))

	code, raw = e.raw("PUT", e.path("/models/sentiment/aliases/champion"), []byte(`{"version": 2}`))
	require.Equal(t, 200, code, "%s", raw)
	e.waitEndpoint(t, 2*time.Minute, "revision 4 (sentiment version 2) promoted", revisionServes(4))
	require.Eventually(t, func() bool { return e.servedWeightsOf(t, "sentiment") == digests[2] }, 30*time.Second, 200*time.Millisecond,
		"after the alias moved, version 2's bytes: %s", e.servedWeightsOf(t, "sentiment"))
	secrets, err := e.kube.CoreV1().Secrets(e.namespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, sec := range secrets.Items {
		if strings.HasSuffix(sec.Name, "-secrets") {
			assert.NotEmpty(t, sec.OwnerReferences, "a revision's grant goes with its Deployment: %s", sec.Name)
		}
	}
}

// Scale from zero and rollback on a real node: an endpoint with no
// minimum goes to zero pods once idle; a request through the gateway's
// proxy is held while the real kubelet starts a pod and its readiness
// probe passes, then answered by it; a second revision rolls out, and a
// rollback to the first makes a revision that serves the first's spec
// again from new pods.
func TestEndpointScaleFromZeroAndRollbackOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	defaults := fmt.Sprintf("nodeSelector: {%[1]s: \"true\"}\ntolerations: [{key: %[1]s, operator: Exists, effect: NoSchedule}]\n", kubetest.RealNodeLabel)
	e := newKubeEnv(t, outputsScript, true, stackOptions{podDefaults: defaults})
	e.kc.RealNode(t)
	ctx := context.Background()
	spec := func(rev string, minReplicas int) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": kubetest.ModelServerImage,
			"args":        []string{"--startup-delay", "500ms", "--revision", rev},
			"env":         []map[string]any{{"name": "ATELIER_FAKE_ADDR", "value": "0.0.0.0:8000"}},
			"replicas":    map[string]any{"min": minReplicas, "max": 1},
			"autoscaling": map[string]any{"idleTimeout": "30s", "scaleDownDelay": "0s", "stableWindow": "6s"},
			"rollout":     map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}
	}
	e.createEndpoint(t, e.cluster, spec("one", 0))
	e.cleanupEndpoint(t)
	e.waitEndpoint(t, 2*time.Minute, "revision 1 served", servedBy(1))
	e.waitEndpoint(t, 3*time.Minute, "scaled to zero while idle", readyReplicas(func(n, replicas int) bool { return n == 0 && replicas == 0 }))
	require.Eventually(t, func() bool {
		pods, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
		require.NoError(t, err)
		return len(pods.Items) == 0
	}, time.Minute, 500*time.Millisecond, "no pod left at zero")

	// A request at zero is held, not refused, until a pod is ready.
	start := time.Now()
	code, rev, body := e.complete(ctx)
	coldStart := time.Since(start)
	require.Equal(t, 200, code, "%s", body)
	assert.Equal(t, "1", rev)
	assert.Contains(t, body, "one")
	t.Logf("0→1 on the real node: the held request was answered after %s", coldStart.Round(time.Millisecond))
	pods, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items)
	assert.Equal(t, kubetest.RealNodeName, pods.Items[0].Spec.NodeName)

	// Revision 2, then a rollback to revision 1: revision 3 serves its spec.
	e.updateEndpoint(t, spec("two", 1))
	e.waitEndpoint(t, 2*time.Minute, "revision 2 promoted", revisionServes(2))
	require.Eventually(t, func() bool {
		code, rev, body = e.complete(ctx)
		return code == 200 && rev == "2"
	}, 30*time.Second, 200*time.Millisecond, "revision 2 answers: %d %s %s", code, rev, body)
	code, raw := e.raw("POST", e.path("/endpoints/chat/rollback"), []byte(`{"revision": 1}`))
	require.Equal(t, 200, code, "%s", raw)
	v := e.waitEndpoint(t, 2*time.Minute, "the rollback (revision 3) promoted", servedBy(3))
	for _, r := range v.Revisions {
		if r.Number == 3 {
			assert.Equal(t, 1, val(r.RollbackOf), "revision 3 rolls back to 1")
		}
	}
	require.Eventually(t, func() bool {
		code, rev, body = e.complete(ctx)
		return code == 200 && rev == "3"
	}, 30*time.Second, 200*time.Millisecond, "revision 3 answers: %d %s %s", code, rev, body)
	assert.Contains(t, body, "one", "revision 3 runs revision 1's spec")
}
