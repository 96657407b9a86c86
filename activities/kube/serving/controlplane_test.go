package serving_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/serving"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// Tests on the real control plane (kubetest.StartControlPlane): the
// Deployment, ReplicaSet, scheduler, EndpointSlice and garbage-collector
// controllers act on what the activities write; kwok plays the kubelet of
// two fake H100×8 nodes, so scheduled pods become Running and Ready (no
// probe runs: kwok marks them Ready at once).

func TestMain(m *testing.M) { kubetest.Main(m) }

var (
	nodesOnce sync.Once
	nodesErr  error
)

// env starts (or reuses) the control plane, the GPU nodes (once per
// binary: nodes are cluster-scoped) and a namespace for the test, which
// the Serving's namespace template names.
func env(t *testing.T) (*kubetest.Cluster, kubernetes.Interface, string) {
	t.Helper()
	c := kubetest.StartControlPlane(t)
	nodesOnce.Do(func() {
		nodesErr = kubetest.CreateNodes(context.Background(), c.Clientset(), []*corev1.Node{
			kubetest.MakeNode("serving-h100-0").GPUs(kubetest.H100, 8).Obj(),
			kubetest.MakeNode("serving-h100-1").GPUs(kubetest.H100, 8).Obj(),
		})
	})
	require.NoError(t, nodesErr)
	return c, c.Clientset(), c.Namespace(t)
}

func spec(gpus int) inference.EndpointSpec {
	return inference.EndpointSpec{
		Backend:   inference.BackendVLLM,
		Model:     inference.Model{URI: "s3://models/llama-3.1-8b", Name: "llama"},
		Image:     "vllm/vllm-openai:v0.9.1",
		Resources: inference.Resources{GPUType: kubetest.H100, GPUs: gpus, CPU: "4", Memory: "32Gi"},
	}
}

func rev(endpoint string, n int) activities.ServingRevisionRef {
	return activities.ServingRevisionRef{Project: "proj", Endpoint: endpoint, Revision: n}
}

// waitObserved observes a revision until ok accepts it.
func waitObserved(t *testing.T, s *serving.Serving, ref activities.ServingRevisionRef, what string, ok func(activities.ObserveServingRevisionResult) bool) activities.ObserveServingRevisionResult {
	t.Helper()
	var last activities.ObserveServingRevisionResult
	require.Eventually(t, func() bool {
		var err error
		last, err = s.ObserveRevision(context.Background(), activities.ObserveServingRevisionRequest{ServingRevisionRef: ref})
		require.NoError(t, err)
		return ok(last)
	}, 60*time.Second, 100*time.Millisecond, "revision %d never %s; last observation: %+v", ref.Revision, what, last)
	return last
}

func readyCount(n int) func(activities.ObserveServingRevisionResult) bool {
	return func(o activities.ObserveServingRevisionResult) bool {
		return o.Ready == n && len(o.Replicas) == n && o.Terminating == 0
	}
}

func TestRevisionsTrafficAndCleanup(t *testing.T) {
	c, kube, ns := env(t)
	ctx := context.Background()
	s := serving.New(serving.Clients{Kube: kube}, serving.WithNamespaceTemplate(ns))

	// Revision 1 with two replicas: pods scheduled on the H100 nodes, run
	// and ready; the startup phases are read from their status.
	apply := activities.ApplyServingRevisionRequest{ServingRevisionRef: rev("llama", 1), Spec: spec(4), Replicas: 2}
	res, err := s.ApplyRevision(ctx, apply)
	require.NoError(t, err)
	assert.True(t, res.Changed)
	obs := waitObserved(t, s, rev("llama", 1), "had 2 ready replicas", readyCount(2))
	assert.True(t, obs.Exists)
	assert.Equal(t, 2, obs.Desired)
	for _, r := range obs.Replicas {
		assert.True(t, strings.HasPrefix(r.Node, "serving-h100-"), "replica %s on node %q", r.Replica, r.Node)
		assert.False(t, r.Scheduled.IsZero() || r.ImagePulled.IsZero() || r.EngineReady.IsZero(), "phases of %s: %+v", r.Replica, r.ReplicaStartup)
		assert.False(t, r.Scheduled.Before(r.Created.Truncate(time.Second)), "scheduled before created: %+v", r.ReplicaStartup)
	}
	rep := inference.CheckStartup(obs.ObservedAt, inference.WithDefaults(spec(4)).Rollout.Startup, obs.Startup())
	assert.Equal(t, 2, rep.Ready)
	assert.Empty(t, rep.Overdue)

	// Applying the same revision again writes nothing: the live object,
	// defaulted by the API server, compares equal to the desired one.
	res, err = s.ApplyRevision(ctx, apply)
	require.NoError(t, err)
	assert.False(t, res.Changed, "a second apply of the same revision changed the Deployment")

	// Scaling up and down.
	_, err = s.ScaleRevision(ctx, activities.ScaleServingRevisionRequest{ServingRevisionRef: rev("llama", 1), Replicas: 3})
	require.NoError(t, err)
	waitObserved(t, s, rev("llama", 1), "had 3 ready replicas", readyCount(3))
	_, err = s.ScaleRevision(ctx, activities.ScaleServingRevisionRequest{ServingRevisionRef: rev("llama", 1), Replicas: 1})
	require.NoError(t, err)
	waitObserved(t, s, rev("llama", 1), "scaled down to 1", readyCount(1))

	// Revision 2 beside it, and a 70/30 split. Without Gateway API the
	// stable Service selects both revisions' pods.
	_, err = s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: rev("llama", 2), Spec: spec(2), Replicas: 1})
	require.NoError(t, err)
	waitObserved(t, s, rev("llama", 2), "had 1 ready replica", readyCount(1))
	traffic := activities.ApplyServingTrafficRequest{Project: "proj", Endpoint: "llama", Backend: inference.BackendVLLM,
		Weights: []inference.RevisionWeight{{Revision: 1, Weight: 70}, {Revision: 2, Weight: 30}}}
	tr, err := s.ApplyTraffic(ctx, traffic)
	require.NoError(t, err)
	assert.Equal(t, activities.TrafficReplicaRatio, tr.Mode)
	assert.Equal(t, []int{1, 2}, tr.Selected)
	assert.Equal(t, "llama", tr.Service)
	waitEndpoints(t, kube, ns, "llama", 2)
	waitEndpoints(t, kube, ns, serving.RevisionName("proj", "llama", 2), 1)
	tr, err = s.ApplyTraffic(ctx, traffic)
	require.NoError(t, err)
	assert.False(t, tr.Changed, "a second ApplyTraffic changed a Service")

	// With Gateway API installed and a Gateway named, the split is an
	// HTTPRoute's weights.
	require.NoError(t, kubetest.InstallGatewayAPICRDs(ctx, c.RESTConfig()))
	gw, err := gatewayclient.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	gs := serving.New(serving.Clients{Kube: kube, Gateway: gw}, serving.WithNamespaceTemplate(ns),
		serving.WithGateway(gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("infra")), Name: "inference"}))
	tr, err = gs.ApplyTraffic(ctx, traffic)
	require.NoError(t, err)
	assert.Equal(t, activities.TrafficGatewayAPI, tr.Mode, tr.ModeReason)
	route, err := gw.GatewayV1().HTTPRoutes(ns).Get(ctx, "llama", metav1.GetOptions{})
	require.NoError(t, err)
	var weights []string
	for _, b := range route.Spec.Rules[0].BackendRefs {
		weights = append(weights, fmt.Sprintf("%s=%d", b.Name, *b.Weight))
	}
	assert.Equal(t, []string{serving.RevisionName("proj", "llama", 1) + "=70", serving.RevisionName("proj", "llama", 2) + "=30"}, weights)
	tr, err = gs.ApplyTraffic(ctx, traffic)
	require.NoError(t, err)
	assert.False(t, tr.Changed, "a second ApplyTraffic changed the HTTPRoute (a CRD default not spelled out?)")

	// Scraping the pods derives their metrics URLs; kwok pods have no
	// server behind their IPs, so each scrape fails, per target.
	sc, err := gs.ScrapeMetrics(ctx, activities.ScrapeServingMetricsRequest{ServingRevisionRef: rev("llama", 1),
		Backend: inference.BackendVLLM, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, sc.Scrapes, 1)
	assert.Regexp(t, `^http://[0-9.]+:8000/metrics$`, sc.Scrapes[0].Target)
	assert.Equal(t, obsName(t, s, rev("llama", 1)), sc.Scrapes[0].Replica)
	assert.NotEmpty(t, sc.Scrapes[0].Error)

	// Revision 2 out of traffic: the stable Service selects revision 1
	// alone, the route sends it everything.
	traffic.Weights = []inference.RevisionWeight{{Revision: 1, Weight: 100}}
	tr, err = gs.ApplyTraffic(ctx, traffic)
	require.NoError(t, err)
	assert.Equal(t, []int{1}, tr.Selected)
	waitEndpoints(t, kube, ns, "llama", 1)
	route, err = gw.GatewayV1().HTTPRoutes(ns).Get(ctx, "llama", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, route.Spec.Rules[0].BackendRefs, 1)
	assert.Equal(t, int32(100), *route.Spec.Rules[0].BackendRefs[0].Weight)

	// Cleanup: the revision, then the endpoint; both idempotent.
	del, err := gs.DeleteRevision(ctx, rev("llama", 2))
	require.NoError(t, err)
	assert.Len(t, del.Deleted, 2)
	waitObserved(t, gs, rev("llama", 2), "went away", func(o activities.ObserveServingRevisionResult) bool {
		return !o.Exists && len(o.Replicas) == 0 && o.Terminating == 0
	})
	del, err = gs.DeleteEndpoint(ctx, activities.DeleteServingEndpointRequest{Project: "proj", Endpoint: "llama"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"httproute/llama", "service/llama", "service/" + serving.RevisionName("proj", "llama", 1),
		"deployment/" + serving.RevisionName("proj", "llama", 1)}, del.Deleted)
	del, err = gs.DeleteEndpoint(ctx, activities.DeleteServingEndpointRequest{Project: "proj", Endpoint: "llama"})
	require.NoError(t, err)
	assert.Empty(t, del.Deleted)
	waitObserved(t, gs, rev("llama", 1), "went away", func(o activities.ObserveServingRevisionResult) bool {
		return !o.Exists && len(o.Replicas) == 0 && o.Terminating == 0
	})
	sel := metav1.ListOptions{LabelSelector: "atelier.dev/endpoint=llama"}
	svcs, err := kube.CoreV1().Services(ns).List(ctx, sel)
	require.NoError(t, err)
	assert.Empty(t, svcs.Items)
	rs, err := kube.AppsV1().ReplicaSets(ns).List(ctx, sel)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rs, err = kube.AppsV1().ReplicaSets(ns).List(ctx, sel)
		return err == nil && len(rs.Items) == 0
	}, 30*time.Second, 100*time.Millisecond, "ReplicaSets left: %d", len(rs.Items))
}

// obsName is the name of a revision's only replica.
func obsName(t *testing.T, s *serving.Serving, ref activities.ServingRevisionRef) string {
	t.Helper()
	o, err := s.ObserveRevision(context.Background(), activities.ObserveServingRevisionRequest{ServingRevisionRef: ref})
	require.NoError(t, err)
	require.Len(t, o.Replicas, 1)
	return o.Replicas[0].Replica
}

// waitEndpoints waits until the Service's EndpointSlices hold n ready
// endpoints: the Service selects those pods.
func waitEndpoints(t *testing.T, kube kubernetes.Interface, ns, svc string, n int) {
	t.Helper()
	got := -1
	require.Eventually(t, func() bool {
		slices, err := kube.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return false
		}
		got = 0
		for _, sl := range slices.Items {
			for _, e := range sl.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					got++
				}
			}
		}
		return got == n
	}, 30*time.Second, 100*time.Millisecond, "Service %s: %d ready endpoints, want %d", svc, got, n)
}

func TestUnschedulableRevisionShowsTheSchedulersReason(t *testing.T) {
	_, kube, ns := env(t)
	s := serving.New(serving.Clients{Kube: kube}, serving.WithNamespaceTemplate(ns))
	// No node has 16 GPUs.
	_, err := s.ApplyRevision(context.Background(), activities.ApplyServingRevisionRequest{ServingRevisionRef: rev("huge", 1), Spec: spec(16), Replicas: 1})
	require.NoError(t, err)
	obs := waitObserved(t, s, rev("huge", 1), "reported unschedulable", func(o activities.ObserveServingRevisionResult) bool {
		return o.Unschedulable != nil
	})
	assert.Contains(t, obs.Unschedulable.Message, "Insufficient nvidia.com/gpu")
	assert.Equal(t, "Unschedulable", obs.Unschedulable.Reason)
	require.Len(t, obs.Replicas, 1)
	r := obs.Replicas[0]
	assert.Equal(t, obs.Unschedulable.Pod, r.Replica)
	assert.Equal(t, "Unschedulable", r.Waiting)
	assert.True(t, r.Scheduled.IsZero() && r.EngineReady.IsZero(), "phases %+v", r.ReplicaStartup)
	assert.Zero(t, obs.Ready)
	// The workflow's Scheduled deadline is what catches it.
	late := inference.CheckStartup(r.Created.Add(11*time.Minute), inference.WithDefaults(spec(16)).Rollout.Startup, obs.Startup())
	require.Len(t, late.Overdue, 1)
	assert.Equal(t, inference.PhaseScheduled, late.Overdue[0].Phase)
}

func TestApplyRefusesUnmanagedObjects(t *testing.T) {
	_, kube, ns := env(t)
	ctx := context.Background()
	name := serving.RevisionName("proj", "taken", 1)
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "theirs"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "theirs:1"}}},
			},
		},
	}
	_, err := kube.AppsV1().Deployments(ns).Create(ctx, theirs, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "theirs"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	s := serving.New(serving.Clients{Kube: kube}, serving.WithNamespaceTemplate(ns))
	_, err = s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: rev("taken", 1), Spec: spec(1), Replicas: 1})
	requireInvalid(t, err, "not managed by Atelier")
	_, err = s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "proj", Endpoint: "taken", Backend: inference.BackendVLLM,
		Weights: []inference.RevisionWeight{{Revision: 1, Weight: 100}}})
	requireInvalid(t, err, "not managed by Atelier")
	_, err = s.ScaleRevision(ctx, activities.ScaleServingRevisionRequest{ServingRevisionRef: rev("taken", 1), Replicas: 3})
	requireInvalid(t, err, "refusing")
	_, err = s.DeleteRevision(ctx, rev("taken", 1))
	requireInvalid(t, err, "refusing")

	got, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(0), *got.Spec.Replicas)
	assert.Equal(t, "theirs:1", got.Spec.Template.Spec.Containers[0].Image)
	svc, err := kube.CoreV1().Services(ns).Get(ctx, "taken", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"app": "theirs"}, svc.Spec.Selector)
	// Cleanup by endpoint selects by label: their objects are not seen.
	del, err := s.DeleteEndpoint(ctx, activities.DeleteServingEndpointRequest{Project: "proj", Endpoint: "taken"})
	require.NoError(t, err)
	assert.NotContains(t, del.Deleted, "service/taken")
	_, err = kube.CoreV1().Services(ns).Get(ctx, "taken", metav1.GetOptions{})
	assert.False(t, apierrors.IsNotFound(err))
}

func requireInvalid(t *testing.T, err error, contains string) {
	t.Helper()
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "err = %v, want an application error", err)
	assert.Equal(t, activities.ErrTypeInvalidStep, app.Type())
	assert.True(t, app.NonRetryable())
	assert.Contains(t, err.Error(), contains)
}
