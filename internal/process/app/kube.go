package app

import (
	"fmt"
	"os"
	"path/filepath"

	sparkclient "github.com/kubeflow/spark-operator/v2/pkg/client/clientset/versioned"
	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/activities/kube"
	"github.com/atelier-ml/atelier/internal/process/config"
)

// NewKubeRESTConfig builds the API server connection of a cluster worker.
// In a pod (KUBERNETES_SERVICE_HOST set) with no kubeconfig or context
// given, it uses the pod's service account; otherwise it loads the
// kubeconfig like kubectl does (cfg.Kubeconfig, which may be a
// KUBECONFIG-style list, else ~/.kube/config) with cfg.KubeContext.
func NewKubeRESTConfig(cfg config.Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig == "" && cfg.KubeContext == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster Kubernetes config: %w", err)
		}
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if paths := filepath.SplitList(cfg.Kubeconfig); len(paths) == 1 {
			rules.ExplicitPath = paths[0] // a missing file is an error, not a fallback
		} else if len(paths) > 1 {
			rules.Precedence = paths
		}
		overrides := &clientcmd.ConfigOverrides{CurrentContext: cfg.KubeContext}
		if rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubeconfig %q (context %q): %w", cfg.Kubeconfig, cfg.KubeContext, err)
		}
	}
	rc.QPS, rc.Burst = cfg.KubeQPS, cfg.KubeBurst
	rc.UserAgent = "atelier-worker/" + cfg.Cluster
	return rc, nil
}

// NewKubeClients builds the clientsets of the Kubernetes backends: core
// (Jobs, pods, nodes, namespaces), KubeRay and the Spark operator. They
// share rc, hence its rate limits per clientset.
func NewKubeClients(rc *rest.Config) (kube.Clients, error) {
	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return kube.Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	r, err := rayclient.NewForConfig(rc)
	if err != nil {
		return kube.Clients{}, fmt.Errorf("KubeRay client: %w", err)
	}
	s, err := sparkclient.NewForConfig(rc)
	if err != nil {
		return kube.Clients{}, fmt.Errorf("spark-operator client: %w", err)
	}
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		return kube.Clients{}, fmt.Errorf("dynamic client: %w", err)
	}
	g, err := gatewayclient.NewForConfig(rc)
	if err != nil {
		return kube.Clients{}, fmt.Errorf("gateway API client: %w", err)
	}
	return kube.Clients{Kube: k, Ray: r, Spark: s, Dynamic: d, Gateway: g}, nil
}
