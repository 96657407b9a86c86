package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/raycluster"
)

// EnsureRayCluster creates (or adopts) a run's shared RayCluster and waits,
// by watch, until KubeRay reports it ready (status.state "ready"),
// heartbeating meanwhile. The cluster's name is derived from the run and
// the cluster's name in the spec, so retries and re-executions find the
// same cluster.
//
// Cancellation leaves the cluster alone: shared clusters belong to the run
// and CleanupRunObjects deletes them when the run ends, however it ends.
func (b *Backend) EnsureRayCluster(ctx context.Context, req activities.EnsureRayClusterRequest) (activities.EnsureRayClusterResult, error) {
	if b.rayClusters == nil {
		return activities.EnsureRayClusterResult{}, framework.Invalid("cluster %s cannot run Ray clusters: the worker has no KubeRay client", b.cluster)
	}
	switch {
	case req.Project == "", req.RunID == "":
		return activities.EnsureRayClusterResult{}, framework.Invalid("request needs a project and a run ID")
	case req.Cluster.Name == "":
		return activities.EnsureRayClusterResult{}, framework.Invalid("a shared Ray cluster needs a name")
	}
	ns, err := b.namespace(req.Project)
	if err != nil {
		return activities.EnsureRayClusterResult{}, err
	}
	id := framework.Identity{Project: req.Project, Run: req.RunID, RayCluster: req.Cluster.Name}
	metaData := metav1.ObjectMeta{
		Name:        framework.ClusterName(req.RunID, req.Cluster.Name, raycluster.MaxNameLength),
		Namespace:   ns,
		Labels:      id.Labels(),
		Annotations: id.Annotations(),
	}
	desired, err := raycluster.Build(metaData, req.Cluster, framework.RunEnv(req.Project, req.RunID), b.podPolicy.Defaults)
	if err != nil {
		return activities.EnsureRayClusterResult{}, framework.Invalid("%v", err)
	}
	framework.PinGPUPods(&desired.Spec.HeadGroupSpec.Template.Spec, req.Nodes)
	for i := range desired.Spec.WorkerGroupSpecs {
		framework.PinGPUPods(&desired.Spec.WorkerGroupSpecs[i].Template.Spec, req.Nodes)
	}
	if b.mutate != nil {
		b.mutate(desired)
	}
	if err := b.podPolicy.CheckTemplates("rayClusters["+req.Cluster.Name+"] ", raycluster.PodTemplates(&desired.Spec)); err != nil {
		return activities.EnsureRayClusterResult{}, err
	}
	logger := b.logger.With(zap.String("run", req.RunID), zap.String("object", "RayCluster "+ns+"/"+metaData.Name))
	out := activities.EnsureRayClusterResult{Namespace: ns, Name: metaData.Name}

	if err := b.ensureNamespace(ctx, ns, req.Project); err != nil {
		return out, err
	}
	obj, adopted, err := framework.CreateOrAdopt(ctx, b.rayClusters, desired)
	if errors.Is(err, framework.ErrMissingNamespace) {
		b.namespaces.Delete(ns)
		if err := b.ensureNamespace(ctx, ns, req.Project); err != nil {
			return out, err
		}
		obj, adopted, err = framework.CreateOrAdopt(ctx, b.rayClusters, desired)
	}
	if err != nil {
		return out, err
	}
	uid := obj.GetUID()
	logger.Info("ray cluster", zap.Bool("adopted", adopted), zap.String("uid", string(uid)))
	if obj.GetDeletionTimestamp() != nil {
		// A retry comes after the deletion ends and creates it afresh.
		return out, fmt.Errorf("RayCluster %s/%s is being deleted; cannot use it", ns, metaData.Name)
	}

	key := ns + "/" + metaData.Name
	w := b.informers.For(b.rayClusters)
	sub := w.Subscribe(key)
	defer sub.Close()
	hb := b.startHeartbeat(ctx, Heartbeat{Namespace: ns, Name: metaData.Name, UID: string(uid)})
	defer hb.Stop()
	if err := w.Start(ctx); err != nil {
		return out, err
	}
	stop := workerStop(ctx)
	seen := false
	for {
		cur := obj.(*rayv1.RayCluster)
		if o, ok := w.Get(key); ok && o.GetUID() == uid {
			cur, seen = o.(*rayv1.RayCluster), true
		} else if seen || sub.Deleted(uid) {
			return out, framework.StepFailed(fmt.Sprintf("RayCluster %s was deleted while starting", metaData.Name), nil)
		}
		st := raycluster.ReadState(cur)
		out.Links = st.Links
		switch {
		case st.Ready:
			logger.Info("ray cluster ready")
			return out, nil
		case st.Failed:
			return out, framework.StepFailed(failureMessage("RayCluster", metaData.Name, "Failed", st.Reason), nil)
		}
		select {
		case <-sub.C:
		case <-stop:
			return out, fmt.Errorf("worker is stopping: a retry of this activity resumes waiting for RayCluster %s", metaData.Name)
		case <-b.informers.Done():
			return out, errBackendClosed
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// CleanupRunObjects deletes every object of a run — RayJobs, RayClusters,
// SparkApplications, Jobs labelled atelier.dev/run=<run> in the project's
// namespace — with foreground propagation, then waits, bounded, until they
// are gone. Objects still being deleted at the bound count as deleted: the
// garbage collector finishes them. It is idempotent: a retry deletes what
// is left and lists it again.
func (b *Backend) CleanupRunObjects(ctx context.Context, req activities.CleanupRunObjectsRequest) (activities.CleanupRunObjectsResult, error) {
	if req.Project == "" || req.RunID == "" {
		return activities.CleanupRunObjectsResult{}, framework.Invalid("request needs a project and a run ID")
	}
	ns, err := b.namespace(req.Project)
	if err != nil {
		return activities.CleanupRunObjectsResult{}, err
	}
	logger := b.logger.With(zap.String("run", req.RunID), zap.String("namespace", ns))
	selector := framework.RunSelector(req.RunID)

	type victim struct {
		res  framework.Resource
		name string
		uid  types.UID
	}
	var victims []victim
	var errs []error
	for _, res := range b.cleanup {
		list, err := res.List(ctx, ns, metav1.ListOptions{LabelSelector: selector})
		if apierrors.IsNotFound(err) {
			continue // the kind is not served on this cluster
		}
		if err != nil {
			return activities.CleanupRunObjectsResult{}, framework.WrapAPI(err, "list %s objects of run %s", res.Kind(), req.RunID)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return activities.CleanupRunObjectsResult{}, err
		}
		for _, it := range items {
			o, ok := it.(framework.Object)
			if !ok {
				continue
			}
			if deleteObject(ctx, res, ns, o.GetName(), o.GetUID(), logger) {
				victims = append(victims, victim{res, o.GetName(), o.GetUID()})
			} else {
				errs = append(errs, fmt.Errorf("delete %s %s/%s failed", res.Kind(), ns, o.GetName()))
			}
		}
	}
	if len(errs) > 0 {
		// Retryable: a retry lists and deletes what is left.
		return activities.CleanupRunObjectsResult{}, errors.Join(errs...)
	}

	var out activities.CleanupRunObjectsResult
	for _, v := range victims {
		out.Deleted = append(out.Deleted, objectRef(v.res, v.name))
	}
	slices.Sort(out.Deleted)
	if n := len(out.Deleted); n > activities.MaxListedDeleted {
		out.Deleted, out.More = out.Deleted[:activities.MaxListedDeleted], n-activities.MaxListedDeleted
	}
	if len(victims) == 0 {
		return out, nil
	}
	hb := b.startHeartbeat(ctx, Heartbeat{Namespace: ns})
	defer hb.Stop()
	wctx, cancel := context.WithTimeout(ctx, b.cleanupWait)
	defer cancel()
	for _, v := range victims {
		if !b.waitGone(wctx, v.res, ns, v.name, v.uid) {
			logger.Info("objects still being deleted; not waiting longer", zap.Duration("waited", b.cleanupWait))
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	logger.Info("run objects deleted", zap.Strings("deleted", out.Deleted), zap.Int("more", out.More))
	return out, nil
}

// waitGone waits until the object with uid has left the informer's cache;
// false when ctx ended first.
func (b *Backend) waitGone(ctx context.Context, res framework.Resource, ns, name string, uid types.UID) bool {
	w := b.informers.For(res)
	key := ns + "/" + name
	sub := w.Subscribe(key)
	defer sub.Close()
	if err := w.Start(ctx); err != nil {
		return false
	}
	for {
		if o, ok := w.Get(key); !ok || o.GetUID() != uid || sub.Deleted(uid) {
			return true
		}
		select {
		case <-sub.C:
		case <-ctx.Done():
			return false
		case <-b.informers.Done():
			return false
		}
	}
}
