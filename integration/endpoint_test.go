package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// An inference endpoint driven through REST on the real control plane:
// created on a registered cluster, its revision's Deployment gets L4 pods
// from the real controllers and scheduler that kwok makes ready, and
// revision 1 is promoted; an image change rolls revision 2 out and deletes
// revision 1's Deployment; a bad update is refused with every problem; a
// delete removes everything. (Traffic gates are off in the spec: pods on
// kwok serve no metrics; the gates themselves are tested in inference/ and
// on the workflow with a fake runtime.)
func TestEndpointOnKubernetes(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{Never: true} }, true)
	ctx := context.Background()
	spec := func(image string) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": image,
			"resources": map[string]any{"gpuType": kubetest.L4, "gpus": 1}, "replicas": map[string]any{"min": 1, "max": 2},
			"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}
	}
	bad, err := e.client().CreateEndpointWithResponse(ctx, e.project, gen.EndpointCreate{Name: "chat", Cluster: &e.cluster, Spec: endpointSpec(t, spec(""))})
	require.NoError(t, err)
	require.Equal(t, 422, bad.StatusCode(), "%s", bad.Body)
	require.NotNil(t, bad.ApplicationproblemJSON422)

	ep := e.createEndpoint(t, e.cluster, spec("vllm/vllm-openai:v0.9.1"))
	require.Equal(t, 1, ep.Current)
	waitEndpoint := func(what string, cond func(gen.Endpoint) bool) gen.Endpoint {
		t.Helper()
		return e.waitEndpoint(t, 90*time.Second, what, cond)
	}
	ready := func(rev int) func(gen.Endpoint) bool {
		return func(v gen.Endpoint) bool {
			if v.Stable != rev || v.Rollout != nil {
				return false
			}
			for _, o := range v.Observed {
				if o.Revision == rev && o.Ready >= 1 {
					return true
				}
			}
			return false
		}
	}
	v := waitEndpoint("served revision 1", ready(1))
	require.NotNil(t, v.TrafficMode)
	t.Logf("revision 1 serving, traffic mode %s, events: %d", *v.TrafficMode, len(v.Events))
	deps, err := e.kube.AppsV1().Deployments(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
	require.NoError(t, err)
	require.Len(t, deps.Items, 1)
	pods, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items)
	for _, p := range pods.Items {
		require.NotEmpty(t, p.Spec.NodeName, "pod %s not scheduled", p.Name)
	}

	// An invalid update is refused with every problem; a valid one rolls out.
	invalid := spec("vllm/vllm-openai:v0.9.2")
	invalid["replicas"] = map[string]any{"min": 3, "max": 1}
	refused, err := e.client().UpdateEndpointWithResponse(ctx, e.project, "chat", endpointSpec(t, invalid))
	require.NoError(t, err)
	require.Equal(t, 422, refused.StatusCode(), "%s", refused.Body)
	require.NotNil(t, refused.ApplicationproblemJSON422)
	ep = e.updateEndpoint(t, spec("vllm/vllm-openai:v0.9.2"))
	require.Equal(t, 2, ep.Current)
	waitEndpoint("promoted revision 2", ready(2))
	require.Eventually(t, func() bool {
		deps, err := e.kube.AppsV1().Deployments(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
		return err == nil && len(deps.Items) == 1 && deps.Items[0].Labels["atelier.dev/revision"] == "2"
	}, 60*time.Second, 200*time.Millisecond, "revision 1's Deployment was not deleted")

	e.deleteEndpoint(t)
	require.Eventually(t, func() bool {
		deps, err := e.kube.AppsV1().Deployments(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
		svcs, err2 := e.kube.CoreV1().Services(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=chat"})
		return err == nil && err2 == nil && len(deps.Items) == 0 && len(svcs.Items) == 0
	}, 60*time.Second, 200*time.Millisecond, "the endpoint's objects were not deleted")
}
