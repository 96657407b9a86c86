package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Modules whose CRD manifests are installed. Their versions come from the
// main go.mod (the same versions whose typed clientsets the tests use), so a
// `go get` of a new KubeRay or Spark operator also moves the CRDs.
const (
	KubeRayModule       = "github.com/ray-project/kuberay/ray-operator"
	SparkOperatorModule = "github.com/kubeflow/spark-operator/v2"
)

// crdFiles lists the installed manifests, relative to their module. These are
// the generated CRDs the operators' own Helm charts and kustomizations ship.
//
// Each CRD costs about a second of startup on 2 cores (their schemas embed
// whole pod templates), so only the kinds Atelier drives are installed:
// RayService and RayCronJob (KubeRay) and SparkConnect are not. Adding one is
// a line here and in CRDs.
var crdFiles = map[string][]string{
	KubeRayModule: {
		"config/crd/bases/ray.io_rayclusters.yaml",
		"config/crd/bases/ray.io_rayjobs.yaml",
	},
	SparkOperatorModule: {
		"config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml",
		"config/crd/bases/sparkoperator.k8s.io_scheduledsparkapplications.yaml",
	},
}

// CRDs names the CustomResourceDefinitions every Cluster has established.
var CRDs = []string{
	"rayclusters.ray.io",
	"rayjobs.ray.io",
	"sparkapplications.sparkoperator.k8s.io",
	"scheduledsparkapplications.sparkoperator.k8s.io",
}

// controlPlaneCRDFiles are installed too when the KubeRay operator runs: it
// watches RayServices and will not start without their CRD.
var controlPlaneCRDFiles = map[string][]string{
	KubeRayModule: {"config/crd/bases/ray.io_rayservices.yaml"},
}

// crdManifests returns the absolute paths of the CRD manifests in the module
// cache, failing early (before any server starts) if one is missing.
func crdManifests(ctx context.Context, controlPlane bool) ([]string, error) {
	dirs, err := moduleDirs(ctx, KubeRayModule, SparkOperatorModule)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, mod := range []string{KubeRayModule, SparkOperatorModule} {
		files := crdFiles[mod]
		if controlPlane {
			files = append(slices.Clone(files), controlPlaneCRDFiles[mod]...)
		}
		for _, f := range files {
			p := filepath.Join(dirs[mod], filepath.FromSlash(f))
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("CRD manifest of %s: %w", mod, err)
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// installCRDs creates the CRDs, waits until each is Established (served),
// lists each once, and then waits out the API server's "just created"
// window, so that the first test can use them at full speed:
//
//   - kube-apiserver builds a CRD's request handler (structural schema,
//     validators, CEL programs) lazily on its first request; the list pays
//     for that here, once.
//   - A create of a custom resource within 2 s of its CRD becoming
//     Established sleeps 2 s (apiextensions-apiserver guards HA peers that
//     have not seen the CRD yet), which would otherwise land in whichever
//     test goes first, against its deadline.
//
// The CRDs are created back to back and then awaited together: establishing
// is CPU-bound work inside the server, and overlapping the waits is faster
// than one CRD at a time, while fully concurrent creates were slower still.
func installCRDs(ctx context.Context, cfg *rest.Config, paths []string) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return fmt.Errorf("parse %s: %w", p, err)
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create CRD %s from %s: %w", crd.Name, p, err)
		}
		crds = append(crds, crd)
	}
	var establishedAt time.Time
	for _, crd := range crds {
		at, err := waitEstablished(ctx, client, crd.Name)
		if err != nil {
			return err
		}
		if at.After(establishedAt) {
			establishedAt = at
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				return fmt.Errorf("list %s after establishing it: %w", gvr, err)
			}
		}
	}
	// The server compares against the condition's LastTransitionTime, which
	// has 1 s resolution (rounded down), on the same clock as ours.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(establishedAt.Add(justCreatedWindow + 50*time.Millisecond))):
	}
	return nil
}

// justCreatedWindow mirrors the delay in apiextensions-apiserver's
// crdHandler.serveResource for creates right after a CRD is established.
const justCreatedWindow = 2 * time.Second

// waitEstablished polls until the CRD is Established and returns when the
// server says that happened.
func waitEstablished(ctx context.Context, client apiextensionsclient.Interface, name string) (time.Time, error) {
	for {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, fmt.Errorf("get CRD %s: %w", name, err)
		}
		if c := crdCondition(crd, apiextensionsv1.NamesAccepted); c != nil && c.Status == apiextensionsv1.ConditionFalse {
			return time.Time{}, fmt.Errorf("CRD %s: names not accepted: %s", name, c.Message)
		}
		if c := crdCondition(crd, apiextensionsv1.Established); c != nil && c.Status == apiextensionsv1.ConditionTrue {
			return c.LastTransitionTime.Time, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) *apiextensionsv1.CustomResourceDefinitionCondition {
	for i := range crd.Status.Conditions {
		if crd.Status.Conditions[i].Type == t {
			return &crd.Status.Conditions[i]
		}
	}
	return nil
}
