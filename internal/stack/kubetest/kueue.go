package kubetest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// Kueue's module and version, for its CRDs. Atelier does not import Kueue
// (it reads Workloads through the dynamic client), so the version is
// pinned here rather than in go.mod; sigs.k8s.io/kueue v0.14.0 is served
// by the module proxy.
const (
	KueueModule  = "sigs.k8s.io/kueue"
	KueueVersion = "v0.14.0"
)

// kueueCRDFiles are the Kueue CRDs the tests need: Workloads, where Kueue
// explains its decisions. Kueue's controller does not run in the tests
// (see the package doc); the test plays it.
var kueueCRDFiles = []string{"config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"}

var (
	kueueMu        sync.Mutex
	kueueInstalled = map[string]bool{} // by API server host
)

// InstallKueueCRDs installs Kueue's Workload CRD on the cluster of cfg,
// once per API server.
func InstallKueueCRDs(ctx context.Context, cfg *rest.Config) error {
	kueueMu.Lock()
	defer kueueMu.Unlock()
	if kueueInstalled[cfg.Host] {
		return nil
	}
	dirs, err := moduleDirs(ctx, KueueModule+"@"+KueueVersion)
	if err != nil {
		return err
	}
	var paths []string
	for _, f := range kueueCRDFiles {
		paths = append(paths, filepath.Join(dirs[KueueModule], filepath.FromSlash(f)))
	}
	if err := installCRDs(ctx, cfg, paths); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install Kueue CRDs: %w", err)
	}
	kueueInstalled[cfg.Host] = true
	return nil
}

// KueueWorkload plays Kueue's controller making the Workload of a job
// (labelled with the job's UID, as Kueue does) with the given conditions
// (type → [status, reason, message]).
func KueueWorkload(ctx context.Context, dyn dynamic.Interface, ns, name, queue string, jobUID types.UID, conds [][4]string) error {
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta1",
		"kind":       "Workload",
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{framework.LabelKueueJobUID: string(jobUID)},
		},
		"spec": map[string]any{
			"queueName": queue,
			"podSets": []any{map[string]any{
				"name": "main", "count": int64(1),
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}},
			}},
		},
	}}
	created, err := dyn.Resource(framework.KueueWorkloads).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	return SetKueueConditions(ctx, dyn, created, conds)
}

// SetKueueConditions replaces a Workload's status conditions.
func SetKueueConditions(ctx context.Context, dyn dynamic.Interface, w *unstructured.Unstructured, conds [][4]string) error {
	cur, err := dyn.Resource(framework.KueueWorkloads).Namespace(w.GetNamespace()).Get(ctx, w.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now().UTC().Format("2006-01-02T15:04:05Z")
	var list []any
	for _, c := range conds {
		list = append(list, map[string]any{"type": c[0], "status": c[1], "reason": c[2], "message": c[3], "lastTransitionTime": now})
	}
	if err := unstructured.SetNestedSlice(cur.Object, list, "status", "conditions"); err != nil {
		return err
	}
	_, err = dyn.Resource(framework.KueueWorkloads).Namespace(w.GetNamespace()).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}
