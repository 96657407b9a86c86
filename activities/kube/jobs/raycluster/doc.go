// Package raycluster manages KubeRay RayClusters: a run's shared clusters
// (spec.SharedRayCluster, created by EnsureRayCluster and used by the ray
// steps that name them), and the cluster spec a RayJob embeds when it brings
// its own cluster (Spec, used by package rayjob).
package raycluster
