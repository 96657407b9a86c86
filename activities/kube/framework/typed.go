package framework

import (
	"context"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Client is the part of a client-go generated typed client (one kind, one
// namespace: BatchV1().Jobs(ns), RayV1().RayJobs(ns), ...) that the
// framework uses. Every client-gen client satisfies it, so an integration
// never writes the Create/Get/Delete/List/Watch plumbing itself.
type Client[T Object, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Typed implements Resource (and Updater) for one kind over its typed
// client. Integrations embed it:
//
//	type Kind struct{ framework.Typed[*batchv1.Job, *batchv1.JobList] }
//
//	func New(kube kubernetes.Interface) *Kind {
//		return &Kind{framework.NewTyped("Job", "job", func(ns string) framework.Client[*batchv1.Job, *batchv1.JobList] {
//			return kube.BatchV1().Jobs(ns)
//		})}
//	}
type Typed[T Object, L runtime.Object] struct {
	kind, short string
	client      func(namespace string) Client[T, L]
}

var (
	_ Resource = Typed[Object, runtime.Object]{}
	_ Updater  = Typed[Object, runtime.Object]{}
)

// NewTyped returns the Resource of a kind: its Kubernetes kind ("RayJob",
// for messages), its kubectl resource name ("rayjob", for object
// references) and its typed client per namespace.
func NewTyped[T Object, L runtime.Object](kind, short string, client func(namespace string) Client[T, L]) Typed[T, L] {
	return Typed[T, L]{kind: kind, short: short, client: client}
}

// Kind implements Resource.
func (t Typed[T, L]) Kind() string { return t.kind }

// Short implements Resource.
func (t Typed[T, L]) Short() string { return t.short }

// NewObject implements Resource: a new, empty T.
func (t Typed[T, L]) NewObject() Object {
	return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
}

// Create implements Resource.
func (t Typed[T, L]) Create(ctx context.Context, obj Object) (Object, error) {
	o, err := t.typed(obj)
	if err != nil {
		return nil, err
	}
	return t.client(obj.GetNamespace()).Create(ctx, o, metav1.CreateOptions{})
}

// Update implements Updater.
func (t Typed[T, L]) Update(ctx context.Context, obj Object) (Object, error) {
	o, err := t.typed(obj)
	if err != nil {
		return nil, err
	}
	return t.client(obj.GetNamespace()).Update(ctx, o, metav1.UpdateOptions{})
}

// Get implements Resource.
func (t Typed[T, L]) Get(ctx context.Context, ns, name string) (Object, error) {
	return t.client(ns).Get(ctx, name, metav1.GetOptions{})
}

// Delete implements Resource.
func (t Typed[T, L]) Delete(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	return t.client(ns).Delete(ctx, name, opts)
}

// List implements Resource.
func (t Typed[T, L]) List(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error) {
	return t.client(ns).List(ctx, opts)
}

// Watch implements Resource.
func (t Typed[T, L]) Watch(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	return t.client(ns).Watch(ctx, opts)
}

// typed checks that obj is of the kind: an integration handing the wrong
// type is a programming error, reported rather than panicking a worker.
func (t Typed[T, L]) typed(obj Object) (T, error) {
	o, ok := obj.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("%s resource given a %T", t.kind, obj)
	}
	return o, nil
}
