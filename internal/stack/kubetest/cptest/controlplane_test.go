package cptest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

var nodesOnce sync.Once

// start returns the control plane with a small mixed fleet (created once
// per binary: nodes are cluster-scoped).
func start(t *testing.T) (*kubetest.Cluster, kubernetes.Interface, string) {
	t.Helper()
	c := kubetest.StartControlPlane(t)
	var err error
	nodesOnce.Do(func() {
		err = kubetest.CreateNodes(context.Background(), c.Clientset(), kubetest.MixedGPUNodes("fleet", 10, kubetest.DefaultMix))
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, c.Clientset(), c.Namespace(t)
}

// waitFor polls cond until it holds; the bound only keeps a broken
// control plane from hanging the test.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctx() context.Context { return context.Background() }

func TestFakeNodesBecomeReadyWithGPULabels(t *testing.T) {
	_, kube, _ := start(t)
	waitFor(t, "10 Ready nodes", func() (bool, error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx(), metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= 10, nil
	})
	n, err := kube.CoreV1().Nodes().Get(ctx(), "fleet-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[kubetest.LabelGPUProduct] != kubetest.H100 || n.Status.Allocatable.Name(kubetest.ResourceGPU, "").Value() != 8 {
		t.Errorf("fleet-0 labels %v allocatable %v", n.Labels, n.Status.Allocatable)
	}
}

func TestJobRunsToCompletionOnAFakeNode(t *testing.T) {
	_, kube, ns := start(t)
	job, err := kube.BatchV1().Jobs(ns).Create(ctx(), kubetest.MakeJob("train", ns, 300*time.Millisecond).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Job Complete", func() (bool, error) {
		j, err := kube.BatchV1().Jobs(ns).Get(ctx(), job.Name, metav1.GetOptions{})
		return err == nil && hasCondition(j, batchv1.JobComplete), err
	})
	pods, err := kube.CoreV1().Pods(ns).List(ctx(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=train"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	p := pods.Items[0]
	if !strings.HasPrefix(p.Spec.NodeName, "fleet-") || p.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod on %q in phase %s", p.Spec.NodeName, p.Status.Phase)
	}
}

func hasCondition(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func TestPodExitCodeAndTerminationMessageFromAnnotations(t *testing.T) {
	_, kube, ns := start(t)
	if _, err := kube.CoreV1().Pods(ns).Create(ctx(), kubetest.MakePod("fails", ns).ExitsWith(3, 0, `{"why":"boom"}`).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx(), kubetest.MakePod("server", ns).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	waitFor(t, "pod Failed", func() (bool, error) {
		var err error
		p, err = kube.CoreV1().Pods(ns).Get(ctx(), "fails", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed, err
	})
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 3 || term.Message != `{"why":"boom"}` || term.Reason != "Error" {
		t.Errorf("terminated = %+v", term)
	}
	// A pod without the annotations reaches Running and stays there. The
	// two pods are scheduled independently, so the server pod may still be
	// Pending when the other one has failed: wait for Running, then check
	// that it has not terminated a moment later.
	waitFor(t, "server pod Running", func() (bool, error) {
		s, err := kube.CoreV1().Pods(ns).Get(ctx(), "server", metav1.GetOptions{})
		return err == nil && s.Status.Phase == corev1.PodRunning, err
	})
	time.Sleep(500 * time.Millisecond)
	s, err := kube.CoreV1().Pods(ns).Get(ctx(), "server", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.Phase != corev1.PodRunning || s.Status.ContainerStatuses[0].State.Terminated != nil {
		t.Errorf("server pod phase %s (%+v), want Running", s.Status.Phase, s.Status.ContainerStatuses)
	}
}

func TestSchedulerPlacesGPUAndMIGPodsAndExplainsWhatDoesNotFit(t *testing.T) {
	_, kube, ns := start(t)
	for _, p := range []*corev1.Pod{
		kubetest.MakePod("h100", ns).GPUs(8).NodeSelector(kubetest.LabelGPUProduct, kubetest.H100).Obj(),
		kubetest.MakePod("mig", ns).Request("nvidia.com/mig-1g.10gb", "1").Obj(),
		kubetest.MakePod("too-big", ns).GPUs(16).Obj(),
	} {
		if _, err := kube.CoreV1().Pods(ns).Create(ctx(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node := func(pod string) *corev1.Node {
		var p *corev1.Pod
		waitFor(t, pod+" running", func() (bool, error) {
			var err error
			p, err = kube.CoreV1().Pods(ns).Get(ctx(), pod, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
		n, err := kube.CoreV1().Nodes().Get(ctx(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := node("h100"); n.Labels[kubetest.LabelGPUProduct] != kubetest.H100 {
		t.Errorf("h100 pod on %s (%v)", n.Name, n.Labels)
	}
	if n := node("mig"); n.Labels["nvidia.com/mig.strategy"] != "mixed" {
		t.Errorf("mig pod on %s (%v)", n.Name, n.Labels)
	}
	var cond corev1.PodCondition
	waitFor(t, "too-big Unschedulable", func() (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx(), "too-big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				cond = c
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(cond.Message, "Insufficient nvidia.com/gpu") {
		t.Errorf("scheduler message %q", cond.Message)
	}
	t.Logf("scheduler: %s", cond.Message)
}

func TestDeploymentRollsOutAndForegroundDeletionCascades(t *testing.T) {
	_, kube, ns := start(t)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1"}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	available := func(image string) func() (bool, error) {
		return func() (bool, error) {
			d, err := kube.AppsV1().Deployments(ns).Get(ctx(), "web", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 3 &&
				d.Status.AvailableReplicas == 3 && d.Status.Replicas == 3 && d.Spec.Template.Spec.Containers[0].Image == image, nil
		}
	}
	waitFor(t, "3 available replicas", available("nginx:1"))
	d, err := kube.AppsV1().Deployments(ns).Get(ctx(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	if _, err := kube.AppsV1().Deployments(ns).Update(ctx(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rolled out to nginx:2", available("nginx:2"))
	rss, err := kube.AppsV1().ReplicaSets(ns).List(ctx(), metav1.ListOptions{})
	if err != nil || len(rss.Items) != 2 {
		t.Fatalf("want the old and the new ReplicaSet, got %v (%v)", rss, err)
	}

	fg := metav1.DeletePropagationForeground
	if err := kube.AppsV1().Deployments(ns).Delete(ctx(), "web", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deployment, replica sets and pods gone", func() (bool, error) {
		_, err := kube.AppsV1().Deployments(ns).Get(ctx(), "web", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		pods, err := kube.CoreV1().Pods(ns).List(ctx(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
}

func TestRayJobRunsOnTheRealOperatorAndFakeDashboard(t *testing.T) {
	c, kube, ns := start(t)
	ray := rayclient.NewForConfigOrDie(c.RESTConfig())
	for _, tc := range []struct {
		name   string
		code   int
		status rayv1.JobDeploymentStatus
	}{
		{"ok", 0, rayv1.JobDeploymentStatusComplete},
		{"fails", 1, rayv1.JobDeploymentStatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rj := kubetest.MakeRayJob("rj-"+tc.name, ns).WorkerGroup("gpu", 2, 1).SubmitterExitsWith(tc.code, 200*time.Millisecond, `{"ok":true}`).Obj()
			if _, err := ray.RayV1().RayJobs(ns).Create(ctx(), rj, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var got *rayv1.RayJob
			waitFor(t, "RayJob "+string(tc.status), func() (bool, error) {
				var err error
				got, err = ray.RayV1().RayJobs(ns).Get(ctx(), rj.Name, metav1.GetOptions{})
				return err == nil && (got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete ||
					got.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusFailed), err
			})
			if got.Status.JobDeploymentStatus != tc.status {
				t.Fatalf("status %+v", got.Status)
			}
			t.Logf("%s: %s/%s reason %q message %q", rj.Name, got.Status.JobDeploymentStatus, got.Status.JobStatus, got.Status.Reason, got.Status.Message)
			// shutdownAfterJobFinishes: KubeRay deletes the job's cluster.
			waitFor(t, "the RayJob's RayCluster deleted", func() (bool, error) {
				_, err := ray.RayV1().RayClusters(ns).Get(ctx(), got.Status.RayClusterName, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
		})
	}
	if c.Dashboard().Requests() == 0 {
		t.Error("the operator never called the fake dashboard")
	}
	_ = kube
}
