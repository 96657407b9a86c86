package kubetest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// GatewayAPIModule is the Gateway API module whose CRDs are installed, at
// the version the main go.mod requires (the typed clientset Atelier uses).
const GatewayAPIModule = "sigs.k8s.io/gateway-api"

// gatewayAPICRDFiles are the Gateway API CRDs the tests need: HTTPRoutes,
// which inference serving writes (from the standard channel). Gateways
// themselves are not needed: a route's parentRefs are not checked by the
// API server, and no gateway controller runs here.
var gatewayAPICRDFiles = []string{"config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"}

var (
	gatewayMu        sync.Mutex
	gatewayInstalled = map[string]bool{} // by API server host
)

// InstallGatewayAPICRDs installs the Gateway API HTTPRoute CRD on the
// cluster of cfg, once per API server. CRDs are cluster-scoped: every test
// of the binary sees them from then on.
func InstallGatewayAPICRDs(ctx context.Context, cfg *rest.Config) error {
	gatewayMu.Lock()
	defer gatewayMu.Unlock()
	if gatewayInstalled[cfg.Host] {
		return nil
	}
	dirs, err := moduleDirs(ctx, GatewayAPIModule)
	if err != nil {
		return err
	}
	var paths []string
	for _, f := range gatewayAPICRDFiles {
		paths = append(paths, filepath.Join(dirs[GatewayAPIModule], filepath.FromSlash(f)))
	}
	if err := installCRDs(ctx, cfg, paths); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install Gateway API CRDs: %w", err)
	}
	gatewayInstalled[cfg.Host] = true
	return nil
}
