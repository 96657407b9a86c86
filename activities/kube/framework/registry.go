package framework

import (
	sparkclientset "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"
	rayclientset "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/activities"
)

// Clients are the typed clientsets of one cluster. Ray and Spark may be nil
// when the cluster runs no KubeRay or spark-operator: steps of that kind
// then fail as InvalidStep, saying so.
type Clients struct {
	Kube  kubernetes.Interface
	Ray   rayclientset.Interface
	Spark sparkclientset.Interface
	// Dynamic reads kinds Atelier has no typed client for (Kueue's
	// Workloads); nil where none is needed.
	Dynamic dynamic.Interface
	// Gateway writes inference endpoints' HTTPRoutes (Gateway API); nil
	// where the worker has no client for it.
	Gateway gatewayclient.Interface
}

// Integration registers one step kind with the backend. Each integration
// package exports one (job.Integration, rayjob.Integration, ...), and the
// backend's list of them (kube.Integrations) is the only place the kinds
// are enumerated: adding a kind is one package and one line there.
type Integration struct {
	// StepKind is the contract's name for the kind (KubeStepRequest.Kind).
	StepKind activities.KubeKind
	// Requires says what the cluster must run for the kind, for the error
	// a step gets when the worker has no client for it: "KubeRay".
	Requires string
	// New returns the kind over the cluster's clients, and the other
	// resources its steps create (a RayJob's shared RayClusters), which
	// run cleanup deletes after the kind's own objects. ok is false when
	// clients lack what the kind needs.
	New func(c Clients) (k Kind, companions []Resource, ok bool)
}
