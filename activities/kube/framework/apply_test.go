package framework_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/temporal"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// deployments is a long-lived kind over the generic typed helper, as an
// inference integration would declare it.
func deployments(kube *fake.Clientset) framework.Typed[*appsv1.Deployment, *appsv1.DeploymentList] {
	return framework.NewTyped("Deployment", "deployment", func(ns string) framework.Client[*appsv1.Deployment, *appsv1.DeploymentList] {
		return kube.AppsV1().Deployments(ns)
	})
}

func deployment(replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "llama-r1", Namespace: "atelier-serving",
			Labels: map[string]string{framework.LabelManagedBy: framework.ManagedByValue}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
	}
}

// mergeReplicas owns replicas only.
func mergeReplicas(cur, desired framework.Object) bool {
	c, d := cur.(*appsv1.Deployment), desired.(*appsv1.Deployment)
	if cmp.Equal(c.Spec.Replicas, d.Spec.Replicas) {
		return false
	}
	c.Spec.Replicas = d.Spec.Replicas
	return true
}

func TestApplyCreatesUpdatesAndLeavesAlone(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	r := deployments(kube)

	obj, changed, err := framework.Apply(ctx, r, deployment(1), mergeReplicas)
	if err != nil || !changed || *obj.(*appsv1.Deployment).Spec.Replicas != 1 {
		t.Fatalf("create: changed=%v err=%v", changed, err)
	}
	// Same desired state: nothing written.
	if _, changed, err := framework.Apply(ctx, r, deployment(1), mergeReplicas); err != nil || changed {
		t.Fatalf("no-op apply: changed=%v err=%v", changed, err)
	}
	// A field Atelier does not own (set by someone else) survives an update.
	live, _ := kube.AppsV1().Deployments("atelier-serving").Get(ctx, "llama-r1", metav1.GetOptions{})
	live.Spec.MinReadySeconds = 30
	if _, err := kube.AppsV1().Deployments("atelier-serving").Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := framework.Apply(ctx, r, deployment(3), mergeReplicas); err != nil || !changed {
		t.Fatalf("update: changed=%v err=%v", changed, err)
	}
	got, _ := kube.AppsV1().Deployments("atelier-serving").Get(ctx, "llama-r1", metav1.GetOptions{})
	want := appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), MinReadySeconds: 30}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("spec after update (-want +got):\n%s", diff)
	}
}

func TestApplyRefusesUnmanagedObjects(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "llama-r1", Namespace: "atelier-serving"}})
	_, _, err := framework.Apply(ctx, deployments(kube), deployment(2), mergeReplicas)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable InvalidStep", err)
	}
	got, _ := kube.AppsV1().Deployments("atelier-serving").Get(ctx, "llama-r1", metav1.GetOptions{})
	if got.Spec.Replicas != nil {
		t.Errorf("unmanaged Deployment modified: replicas %d", *got.Spec.Replicas)
	}
}

func TestTypedNewObjectAndWrongType(t *testing.T) {
	r := deployments(fake.NewClientset())
	if _, ok := r.NewObject().(*appsv1.Deployment); !ok {
		t.Errorf("NewObject() = %T, want *appsv1.Deployment", r.NewObject())
	}
	if r.Kind() != "Deployment" || r.Short() != "deployment" {
		t.Errorf("Kind/Short = %q/%q", r.Kind(), r.Short())
	}
	// Handing a Deployment resource another kind is an error, not a panic.
	if _, err := r.Create(context.Background(), &appsv1.StatefulSet{}); err == nil {
		t.Error("Create(StatefulSet) on a Deployment resource succeeded")
	}
}

func TestApplyRefusesAnotherIdentitysObject(t *testing.T) {
	ctx := context.Background()
	theirs := deployment(1)
	theirs.Labels[framework.LabelEndpoint] = "mistral"
	kube := fake.NewClientset(theirs)
	mine := deployment(2)
	mine.Labels[framework.LabelEndpoint] = "llama"
	_, _, err := framework.Apply(ctx, deployments(kube), mine, mergeReplicas)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable InvalidStep", err)
	}
	got, _ := kube.AppsV1().Deployments("atelier-serving").Get(ctx, "llama-r1", metav1.GetOptions{})
	if *got.Spec.Replicas != 1 {
		t.Errorf("another endpoint's Deployment modified: replicas %d", *got.Spec.Replicas)
	}
}
