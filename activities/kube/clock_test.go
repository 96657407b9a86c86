package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// The step loop's timers run on the injected clock: these tests move a
// FakeClock past an attempt's timeout and an image-pull grace instead of
// waiting for them.

// runInBackground starts RunKubeStep and returns its outcome channel.
func runInBackground(ctx context.Context, b *Backend, req activities.KubeStepRequest) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := b.RunKubeStep(ctx, req)
		done <- err
	}()
	return done
}

// waitForTimer returns once the step loop has armed a timer on fc.
func waitForTimer(t *testing.T, fc *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !fc.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the step loop never armed a timer on the injected clock")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func appErrorType(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type()
	}
	return ""
}

func TestTimeoutOnInjectedClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	clients := fakeClients()
	b := fakeBackend(t, clients, WithClock(fc))
	req := rayRequest("train")
	req.Timeout = 6 * time.Hour

	done := runInBackground(ctx, b, req)
	waitForTimer(t, fc)
	fc.Step(6*time.Hour - time.Second)
	select {
	case err := <-done:
		t.Fatalf("step ended before its timeout: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	fc.Step(time.Second)

	err := <-done
	if appErrorType(err) != activities.ErrTypeStepTimeout || !strings.Contains(err.Error(), "timed out after 6h0m0s") {
		t.Fatalf("err = %v, want StepTimeout after 6h", err)
	}
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 47)
	if _, err := clients.Ray.RayV1().RayJobs("atelier-vision").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("RayJob after timeout: err = %v, want NotFound (deleted)", err)
	}
}

// An image that is not on the node, with pull policy Never, can never
// come: the step fails at once, without waiting out the grace (the fake
// clock never moves here).
func TestImageNeverPullFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	clients := fakeClients()
	b := fakeBackend(t, clients, WithClock(fc), WithImagePullGrace(10*time.Minute))
	req := jobRequest("fit")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	ns := "atelier-vision"

	done := runInBackground(ctx, b, req)
	var labels map[string]string
	for labels == nil {
		if j, err := clients.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			labels = j.Spec.Template.Labels
			labels[framework.JobNameLabel] = name
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := clients.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-abcde", Namespace: ns, Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "step",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull",
				Message: `Container image "localhost/x:1" is not present with pull policy of Never`}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = <-done
	if appErrorType(err) != activities.ErrTypeStepFailed || !strings.Contains(err.Error(), "ErrImageNeverPull") || !strings.Contains(err.Error(), "localhost/x:1") {
		t.Fatalf("err = %v, want StepFailed naming ErrImageNeverPull and the image", err)
	}
	if _, err := clients.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Job is left: %v", err)
	}
}

func TestImagePullGraceOnInjectedClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	clients := fakeClients()
	b := fakeBackend(t, clients, WithClock(fc), WithImagePullGrace(10*time.Minute))
	req := jobRequest("fit")
	name := framework.ObjectName(req.RunID, req.Step, nil, 1, 63)
	ns := "atelier-vision"

	done := runInBackground(ctx, b, req)
	var labels map[string]string
	for labels == nil {
		if j, err := clients.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			// What the Job controller would give its pod.
			labels = j.Spec.Template.Labels
			labels[framework.JobNameLabel] = name
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := clients.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-abcde", Namespace: ns, Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name:  "step",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "pull access denied for python:3.1.2"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitForTimer(t, fc)
	fc.Step(10 * time.Minute)

	err = <-done
	if appErrorType(err) != activities.ErrTypeStepFailed || !strings.Contains(err.Error(), "ErrImagePull") {
		t.Fatalf("err = %v, want StepFailed naming ErrImagePull", err)
	}
}
