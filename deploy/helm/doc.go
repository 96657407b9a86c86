// Package helm holds Atelier's Helm chart (atelier/) and its test: `helm
// lint`, `helm template` for the default values and the multi-cluster
// example, checks of what the rendered objects say (security contexts,
// probes, secrets, one Deployment per cluster worker, RBAC rules equal to
// deploy/kubernetes/rbac.yaml), and a server-side dry-run apply of every
// rendered object on a real kube-apiserver (internal/stack/kubetest).
//
// The helm binary is built once from the Go module proxy
// (devstack.EnsureHelm, `make ensure-helm`); helm is not a dependency of
// the project's go.mod. See atelier/README.md.
package helm
