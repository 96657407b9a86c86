package serving

import (
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/temporal"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/examples/modelserver"
	"github.com/atelier-ml/atelier/inference"
)

var ctx = context.Background()

func ref(rev int) activities.ServingRevisionRef {
	return activities.ServingRevisionRef{Project: "p", Endpoint: "llama", Revision: rev}
}

func wantInvalid(t *testing.T, err error, contains string) {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable InvalidStep", err)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Errorf("err = %q, want it to mention %q", err, contains)
	}
}

func TestApplyAndScaleRevision(t *testing.T) {
	kube := fake.NewClientset()
	s := New(Clients{Kube: kube})
	req := activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(1), Spec: vllmSpec(), Replicas: 1}
	res, err := s.ApplyRevision(ctx, req)
	if err != nil || !res.Changed {
		t.Fatalf("create: %+v, %v", res, err)
	}
	name := RevisionName("p", "llama", 1)
	if diff := cmp.Diff(activities.ServingObjectResult{Namespace: "atelier-p", Object: "deployment/" + name, Changed: true}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "atelier-p", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace not created: %v", err)
	}
	if res, err := s.ApplyRevision(ctx, req); err != nil || res.Changed {
		t.Errorf("second apply: %+v, %v; want no change", res, err)
	}
	if res, err := s.ScaleRevision(ctx, activities.ScaleServingRevisionRequest{ServingRevisionRef: ref(1), Replicas: 3}); err != nil || !res.Changed {
		t.Errorf("scale: %+v, %v", res, err)
	}
	d, _ := kube.AppsV1().Deployments("atelier-p").Get(ctx, name, metav1.GetOptions{})
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d after scale", *d.Spec.Replicas)
	}
	// Missing revisions scale to zero trivially, and to more not at all.
	if _, err := s.ScaleRevision(ctx, activities.ScaleServingRevisionRequest{ServingRevisionRef: ref(9), Replicas: 0}); err != nil {
		t.Errorf("scale missing to 0: %v", err)
	}
	_, err = s.ScaleRevision(ctx, activities.ScaleServingRevisionRequest{ServingRevisionRef: ref(9), Replicas: 2})
	wantInvalid(t, err, "apply the revision first")

	// Invalid requests never reach the cluster.
	bad := req
	bad.Spec.Image = ""
	_, err = s.ApplyRevision(ctx, bad)
	wantInvalid(t, err, "image")
	_, err = s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(0), Spec: vllmSpec()})
	wantInvalid(t, err, "revision must be 1 or more")
}

func TestApplyRevisionRefusesOthersObjects(t *testing.T) {
	name := RevisionName("p", "llama", 1)
	other := RevisionLabels("p", "mistral", 4)
	kube := fake.NewClientset(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "atelier-p"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: RevisionName("p", "llama", 2), Namespace: "atelier-p", Labels: other}},
	)
	s := New(Clients{Kube: kube})
	_, err := s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(1), Spec: vllmSpec(), Replicas: 1})
	wantInvalid(t, err, "not managed by Atelier")
	_, err = s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(2), Spec: vllmSpec(), Replicas: 1})
	wantInvalid(t, err, "belongs to something else")
	_, err = s.DeleteRevision(ctx, ref(1))
	wantInvalid(t, err, "refusing")
	if _, err := kube.AppsV1().Deployments("atelier-p").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("unmanaged Deployment deleted: %v", err)
	}
}

// gatewayClients returns clients of a cluster that serves HTTPRoutes when
// served is true.
func gatewayClients(served bool) (*fake.Clientset, *gatewayfake.Clientset) {
	kube := fake.NewClientset()
	if served {
		kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
			GroupVersion: gatewayv1.GroupVersion.String(),
			APIResources: []metav1.APIResource{{Name: "httproutes", Kind: "HTTPRoute", Namespaced: true}},
		}}
	}
	return kube, gatewayfake.NewSimpleClientset()
}

var gateway = gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("infra")), Name: "inference"}

func TestApplyTrafficModes(t *testing.T) {
	weights := []inference.RevisionWeight{{Revision: 2, Weight: 10}, {Revision: 1, Weight: 90}}
	req := activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "llama", Backend: inference.BackendVLLM, Weights: weights}
	for _, tc := range []struct {
		name     string
		served   bool
		gateway  bool
		noClient bool
		want     string
		reason   string
	}{
		{name: "gateway API", served: true, gateway: true, want: activities.TrafficGatewayAPI, reason: "infra/inference"},
		{name: "no HTTPRoute CRD", served: false, gateway: true, want: activities.TrafficReplicaRatio, reason: "does not serve"},
		{name: "no Gateway configured", served: true, want: activities.TrafficReplicaRatio, reason: "names no Gateway"},
		{name: "no Gateway API client", served: true, gateway: true, noClient: true, want: activities.TrafficReplicaRatio, reason: "no Gateway API client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, gw := gatewayClients(tc.served)
			c := Clients{Kube: kube, Gateway: gw}
			if tc.noClient {
				c.Gateway = nil
			}
			var opts []Option
			if tc.gateway {
				opts = append(opts, WithGateway(gateway))
			}
			s := New(c, opts...)
			res, err := s.ApplyTraffic(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Mode != tc.want || !strings.Contains(res.ModeReason, tc.reason) {
				t.Errorf("mode %q (%s), want %q (…%s…)", res.Mode, res.ModeReason, tc.want, tc.reason)
			}
			wantObjects := []string{"service/" + RevisionName("p", "llama", 1), "service/" + RevisionName("p", "llama", 2), "service/llama"}
			if tc.want == activities.TrafficGatewayAPI {
				wantObjects = append(wantObjects, "httproute/llama")
			}
			if diff := cmp.Diff(wantObjects, res.Objects); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]int{1, 2}, res.Selected); diff != "" {
				t.Errorf("selected (-want +got):\n%s", diff)
			}
			stable, err := kube.CoreV1().Services("atelier-p").Get(ctx, "llama", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(EndpointLabels("p", "llama"), stable.Spec.Selector); diff != "" {
				t.Errorf("stable selector (-want +got):\n%s", diff)
			}
			if tc.want != activities.TrafficGatewayAPI {
				return
			}
			route, err := gw.GatewayV1().HTTPRoutes("atelier-p").Get(ctx, "llama", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, b := range route.Spec.Rules[0].BackendRefs {
				got = append(got, string(b.Name)+"="+strconv.Itoa(int(*b.Weight)))
			}
			want := []string{RevisionName("p", "llama", 1) + "=90", RevisionName("p", "llama", 2) + "=10"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("backendRefs (-want +got):\n%s", diff)
			}
			if res, err := s.ApplyTraffic(ctx, req); err != nil || res.Changed {
				t.Errorf("second apply: changed=%v err=%v", res.Changed, err)
			}
		})
	}
}

func TestApplyTrafficSelectsTheOnlyWeightedRevision(t *testing.T) {
	kube, gw := gatewayClients(true)
	s := New(Clients{Kube: kube, Gateway: gw}, WithGateway(gateway))
	// Blue-green preview at 0%: the stable Service must not reach it.
	res, err := s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "llama", Backend: inference.BackendVLLM,
		Weights: []inference.RevisionWeight{{Revision: 1, Weight: 100}, {Revision: 2, Weight: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	stable, _ := kube.CoreV1().Services("atelier-p").Get(ctx, "llama", metav1.GetOptions{})
	if diff := cmp.Diff(RevisionLabels("p", "llama", 1), stable.Spec.Selector); diff != "" || !cmp.Equal(res.Selected, []int{1}) {
		t.Errorf("selected %v, selector (-want +got):\n%s", res.Selected, diff)
	}
	// No weights: nothing serves.
	res, err = s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "llama", Backend: inference.BackendVLLM})
	if err != nil {
		t.Fatal(err)
	}
	stable, _ = kube.CoreV1().Services("atelier-p").Get(ctx, "llama", metav1.GetOptions{})
	route, _ := gw.GatewayV1().HTTPRoutes("atelier-p").Get(ctx, "llama", metav1.GetOptions{})
	if stable.Spec.Selector[framework.LabelRevision] != noRevision || len(res.Selected) != 0 || len(route.Spec.Rules[0].BackendRefs) != 0 {
		t.Errorf("no traffic: selector %v, selected %v, backends %v", stable.Spec.Selector, res.Selected, route.Spec.Rules[0].BackendRefs)
	}
	// The same worker without a Gateway deletes its old route.
	s2 := New(Clients{Kube: kube, Gateway: gw})
	if res, err := s2.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "llama", Backend: inference.BackendVLLM,
		Weights: []inference.RevisionWeight{{Revision: 1, Weight: 100}}}); err != nil || res.Mode != activities.TrafficReplicaRatio {
		t.Fatalf("%+v, %v", res, err)
	}
	if _, err := gw.GatewayV1().HTTPRoutes("atelier-p").Get(ctx, "llama", metav1.GetOptions{}); err == nil {
		t.Error("stale HTTPRoute kept in replica-ratio mode")
	}
}

func TestApplyTrafficRejectsBadWeights(t *testing.T) {
	s := New(Clients{Kube: fake.NewClientset()})
	for _, tc := range []struct {
		weights []inference.RevisionWeight
		want    string
	}{
		{[]inference.RevisionWeight{{Revision: 1, Weight: 50}}, "sum to 50"},
		{[]inference.RevisionWeight{{Revision: 1, Weight: 50}, {Revision: 1, Weight: 50}}, "listed twice"},
		{[]inference.RevisionWeight{{Revision: 0, Weight: 100}}, "numbered from 1"},
		{[]inference.RevisionWeight{{Revision: 1, Weight: 120}, {Revision: 2, Weight: -20}}, "not within 0..100"},
	} {
		_, err := s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "e", Backend: inference.BackendVLLM, Weights: tc.weights})
		wantInvalid(t, err, tc.want)
	}
	_, err := s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "e", Backend: "tgi"})
	wantInvalid(t, err, "unknown backend")
}

func TestRouteDiscoveryIsCached(t *testing.T) {
	kube, gw := gatewayClients(false)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := New(Clients{Kube: kube, Gateway: gw}, WithGateway(gateway), WithClock(clk))
	req := activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "e", Backend: inference.BackendTriton,
		Weights: []inference.RevisionWeight{{Revision: 1, Weight: 100}}}
	apply := func() string {
		t.Helper()
		res, err := s.ApplyTraffic(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Mode
	}
	if m := apply(); m != activities.TrafficReplicaRatio {
		t.Fatalf("mode %s", m)
	}
	// Gateway API installed: seen after the recheck period, not before.
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: gatewayv1.GroupVersion.String(), APIResources: []metav1.APIResource{{Name: "httproutes"}},
	}}
	if m := apply(); m != activities.TrafficReplicaRatio {
		t.Errorf("mode %s within the cache period", m)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if m := apply(); m != activities.TrafficGatewayAPI {
		t.Errorf("mode %s after the cache period", m)
	}
}

func TestDeleteEndpoint(t *testing.T) {
	kube, gw := gatewayClients(true)
	s := New(Clients{Kube: kube, Gateway: gw}, WithGateway(gateway))
	for rev := 1; rev <= 2; rev++ {
		if _, err := s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(rev), Spec: vllmSpec(), Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Another endpoint's objects stay.
	if _, err := s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{
		ServingRevisionRef: activities.ServingRevisionRef{Project: "p", Endpoint: "other", Revision: 1}, Spec: vllmSpec(), Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: "p", Endpoint: "llama", Backend: inference.BackendVLLM,
		Weights: []inference.RevisionWeight{{Revision: 1, Weight: 50}, {Revision: 2, Weight: 50}}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.DeleteRevision(ctx, ref(2))
	if err != nil || len(res.Deleted) != 2 {
		t.Fatalf("delete revision: %+v, %v", res, err)
	}
	res, err = s.DeleteEndpoint(ctx, activities.DeleteServingEndpointRequest{Project: "p", Endpoint: "llama"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"httproute/llama", "service/llama", "service/" + RevisionName("p", "llama", 1), "deployment/" + RevisionName("p", "llama", 1)}
	if diff := cmp.Diff(want, res.Deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	if res, err := s.DeleteEndpoint(ctx, activities.DeleteServingEndpointRequest{Project: "p", Endpoint: "llama"}); err != nil || len(res.Deleted) != 0 {
		t.Errorf("second delete: %+v, %v", res, err)
	}
	if res, err := s.DeleteRevision(ctx, ref(2)); err != nil || len(res.Deleted) != 0 {
		t.Errorf("delete a deleted revision: %+v, %v", res, err)
	}
	if _, err := kube.AppsV1().Deployments("atelier-p").Get(ctx, RevisionName("p", "other", 1), metav1.GetOptions{}); err != nil {
		t.Errorf("another endpoint's Deployment deleted: %v", err)
	}
}

func TestObserve(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	pod := func(name string, conds []corev1.PodCondition, cs ...corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(0)},
			Spec:       corev1.PodSpec{NodeName: map[bool]string{true: "gpu-1"}[len(cs) > 0]},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds, ContainerStatuses: cs},
		}
	}
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(time.Second)}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at(3 * time.Minute)}
	running := corev1.ContainerStatus{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(time.Minute)}}}
	crashing := corev1.ContainerStatus{Name: ContainerName, RestartCount: 4, ImageID: "sha256:x",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, StartedAt: at(2 * time.Minute), Message: "CUDA out of memory"}}}
	pending := pod("c-pending", []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}})
	pending.Status.Phase = corev1.PodPending
	gone := pod("d-old", []corev1.PodCondition{scheduled, ready}, running)
	gone.DeletionTimestamp = ptr.To(at(time.Hour))
	pods := []corev1.Pod{pending, pod("b-crash", []corev1.PodCondition{scheduled}, crashing), pod("a-ready", []corev1.PodCondition{scheduled, ready}, running), gone}
	dep := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}}

	got := observe(t0.Add(time.Hour), dep, pods, 0)
	want := activities.ObserveServingRevisionResult{
		ObservedAt: t0.Add(time.Hour), Exists: true, Desired: 3, Ready: 1, CrashLooping: 1, Terminating: 1,
		Replicas: []activities.ServingReplicaObservation{{
			ReplicaStartup: inference.ReplicaStartup{Replica: "a-ready", Created: t0, Scheduled: t0.Add(time.Second),
				ImagePulled: t0.Add(time.Minute), EngineReady: t0.Add(3 * time.Minute)},
			Node: "gpu-1", Ready: true,
		}, {
			ReplicaStartup: inference.ReplicaStartup{Replica: "b-crash", Created: t0, Scheduled: t0.Add(time.Second), ImagePulled: t0.Add(2 * time.Minute)},
			Node:           "gpu-1", Restarts: 4, CrashLooping: true, Waiting: "CrashLoopBackOff", Message: "CUDA out of memory",
		}, {
			ReplicaStartup: inference.ReplicaStartup{Replica: "c-pending", Created: t0},
			Waiting:        "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
		}},
		Unschedulable: &activities.ServingPodProblem{Pod: "c-pending", Reason: "Unschedulable", Message: "pod c-pending: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("observe (-want +got):\n%s", diff)
	}
	st := got.Status()
	if st.Ready != 1 || st.CrashLooping != 1 || len(st.Startup) != 3 {
		t.Errorf("status %+v", st)
	}
	// A restart threshold counts restarts without a back-off too.
	crashing.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(5 * time.Minute)}}
	if got := observe(t0, nil, []corev1.Pod{pod("x", []corev1.PodCondition{scheduled}, crashing)}, 3); got.CrashLooping != 1 || got.Exists {
		t.Errorf("restart threshold: %+v", got)
	}
}

func TestScrapeModelServer(t *testing.T) {
	for _, tc := range []struct {
		backend modelserver.Backend
		ib      inference.Backend
		want    []string
	}{
		{modelserver.BackendVLLM, inference.BackendVLLM, []string{"vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting"}},
		{modelserver.BackendTriton, inference.BackendTriton, []string{"nv_inference_pending_request_count"}},
	} {
		t.Run(string(tc.backend), func(t *testing.T) {
			fakeServer := modelserver.New(modelserver.Config{Backend: tc.backend, Model: "m"})
			defer fakeServer.Close()
			ts := httptest.NewServer(fakeServer)
			defer ts.Close()
			s := New(Clients{Kube: fake.NewClientset()})
			res, err := s.ScrapeMetrics(ctx, activities.ScrapeServingMetricsRequest{ServingRevisionRef: ref(1), Backend: tc.ib,
				Targets: []string{ts.URL + "/metrics", ts.URL + "/missing"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Scrapes) != 2 || res.Scrapes[0].Error != "" || !strings.Contains(res.Scrapes[1].Error, "404") {
				t.Fatalf("scrapes %+v", res.Scrapes)
			}
			var names []string
			for _, smp := range res.Scrapes[0].Samples {
				names = append(names, smp.Name)
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("default families (-want +got):\n%s", diff)
			}
			if sig := inference.Signal(tc.ib, res.Scrapes[0].Samples); !sig.Known {
				t.Errorf("signal from the scrape is unknown: %+v", sig)
			}
		})
	}
	_, err := New(Clients{Kube: fake.NewClientset()}).ScrapeMetrics(ctx, activities.ScrapeServingMetricsRequest{
		ServingRevisionRef: ref(1), Backend: inference.BackendVLLM, Targets: []string{"10.0.0.1:8000"}})
	wantInvalid(t, err, "not an http(s) URL")
}
