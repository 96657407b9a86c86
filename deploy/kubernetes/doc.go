// Package kubernetes holds the manifests that run Atelier's worker for one
// Kubernetes cluster (`atelier worker --cluster NAME`): its Namespace,
// ServiceAccount, least-privilege ClusterRole and binding, and Deployment,
// tied together by kustomization.yaml. See README.md.
//
// The package has no code; it exists so that `go test ./...` checks that
// every manifest parses and that the RBAC rules stay exactly what the
// Kubernetes backends and the capacity reporter use.
package kubernetes
