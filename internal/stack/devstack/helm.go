package devstack

import "context"

// HelmVersion is the helm release the chart tests (deploy/helm) run. It is
// built from the Go module proxy like the temporal CLI, never added to the
// project's go.mod.
const HelmVersion = "v3.22.0"

// helmKubeMinor is the Kubernetes minor version helm v3.22.0 was released
// with (its go.mod requires client-go v0.37.0). Upstream's Makefile stamps
// it into the binary; without it `helm template` and `helm lint` would
// assume Kubernetes 1.20 for .Capabilities.KubeVersion and deprecations.
const helmKubeMinor = "37"

// EnvHelm names the environment variable that points at an existing helm
// binary, skipping the pinned build.
const EnvHelm = "ATELIER_HELM"

var helmTool = goTool{
	name:    "helm",
	exe:     "helm",
	dir:     "helm-" + HelmVersion,
	pkg:     "helm.sh/helm/v3/cmd/helm",
	version: HelmVersion,
	// What upstream's Makefile stamps into a release build: the version
	// (the source says only "v3.22"), an empty metadata (not "unreleased"),
	// and the Kubernetes version the client libraries are from. -s -w as
	// upstream, for a smaller binary.
	ldflags: "-s -w" +
		" -X helm.sh/helm/v3/internal/version.version=" + HelmVersion +
		" -X helm.sh/helm/v3/internal/version.metadata=" +
		" -X helm.sh/helm/v3/internal/version.gitTreeState=clean" +
		" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1" +
		" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=" + helmKubeMinor +
		" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1" +
		" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=" + helmKubeMinor,
	// Measured here: 11 min wall clock on 2 cores shared with other
	// builds (load ~15), 3m50s of CPU: a few minutes on an idle machine.
	estimate: "3-11 min on 2 cores",
	env:      EnvHelm,
}

// HelmPath returns where the pinned helm lives (or will live once built),
// without building it.
func HelmPath() (string, error) { return helmTool.path() }

// EnsureHelm returns the path of a helm binary: $ATELIER_HELM if set (must
// exist), else <CacheDir>/helm-<HelmVersion>/helm, built with `go install`
// on first use with progress sent to log (may be nil), as EnsureTemporalCLI.
func EnsureHelm(ctx context.Context, log func(string, ...any)) (string, error) {
	return helmTool.ensure(ctx, log)
}
