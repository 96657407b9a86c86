package kubetest_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestOperatorPlaysControllersAndGC(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t)
	op, err := kubetest.NewOperator(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op.Run(ctx)
	labels := map[string]string{"atelier.dev/managed-by": "atelier", "atelier.dev/run": "r1", "atelier.dev/step": "s", "atelier.dev/attempt": "1"}

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j1", Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		}}},
	}
	if _, err := c.Clientset().BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "job complete", func() bool {
		j, err := c.Clientset().BatchV1().Jobs(ns).Get(ctx, "j1", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	pod, err := c.Clientset().CoreV1().Pods(ns).Get(ctx, "j1-x7k2p", metav1.GetOptions{})
	if err != nil || pod.Status.ContainerStatuses[0].State.Terminated.Message != `{"ok":true}` {
		t.Fatalf("output pod: %v %+v", err, pod.Status)
	}

	rc := rayclient.NewForConfigOrDie(c.RESTConfig())
	rj := &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: "rj1", Namespace: ns, Labels: labels}, Spec: rayv1.RayJobSpec{Entrypoint: "python x.py"}}
	if _, err := rc.RayV1().RayJobs(ns).Create(ctx, rj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rayjob complete", func() bool {
		j, err := rc.RayV1().RayJobs(ns).Get(ctx, "rj1", metav1.GetOptions{})
		return err == nil && j.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete && j.Status.JobStatus == rayv1.JobStatusSucceeded
	})

	fg := metav1.DeletePropagationForeground
	if err := rc.RayV1().RayJobs(ns).Delete(ctx, "rj1", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rayjob gone (foreground deletion finished by the simulated GC)", func() bool {
		_, err := rc.RayV1().RayJobs(ns).Get(ctx, "rj1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if n := op.ObjectsPerAttempt()["r1/s//1"]; n != 2 {
		t.Fatalf("objects for attempt r1/s//1 = %d, want 2 (job + rayjob)", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
