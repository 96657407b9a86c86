package serving

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/pipeline"

	appsv1 "k8s.io/api/apps/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/inference"
)

// ContainerName is the serving container's name in a revision's pods.
const ContainerName = "server"

// Port names of the serving container and the Services.
const (
	PortHTTP    = "http"
	PortGRPC    = "grpc"
	PortMetrics = "metrics"
)

// AnnotationTemplateHash holds the hash of the pod template Atelier last
// applied to a Deployment (see mergeDeployment).
const AnnotationTemplateHash = "atelier.dev/template-hash"

// Probe timings. The readiness probe decides which pods get traffic, so
// it is frequent; the startup probe only stops a container that never
// becomes ready, so it is generous (see startupProbe).
const (
	readinessPeriod  = 5 * time.Second
	readinessTimeout = 3 * time.Second
	readinessFailure = 3
	startupPeriod    = 10 * time.Second
	// minStartupBudget is the startup probe's floor: loading a 70B model
	// from a cold cache takes tens of minutes.
	minStartupBudget = 30 * time.Minute
)

// maxName bounds every object name: Service names are DNS-1035 labels
// (63), and a Deployment's name goes into its pods' names and labels.
const maxName = 63

// EndpointName is the name of an endpoint's stable Service and HTTPRoute:
// the endpoint's name itself when it is a valid DNS-1035 label (so that
// in-cluster clients call http://<endpoint>.<namespace>.svc), otherwise a
// label derived from it with a hash of (project, endpoint).
func EndpointName(project, endpoint string) string {
	if len(validation.IsDNS1035Label(endpoint)) == 0 {
		return endpoint
	}
	return framework.HashedName(endpoint, "", "endpoint\x00"+project+"\x00"+endpoint, maxName)
}

// RevisionName is the name of a revision's Deployment and Service:
// "<endpoint>-r<revision>-<10 hex of sha256(project, endpoint, revision)>",
// the endpoint part truncated to fit 63 characters. The hash keeps it
// distinct from every endpoint's stable name and from other endpoints'
// revisions after truncation; it is deterministic, so a retried apply
// finds the object an earlier attempt created.
func RevisionName(project, endpoint string, revision int) string {
	return framework.HashedName(endpoint, "-r"+strconv.Itoa(revision),
		"revision\x00"+project+"\x00"+endpoint+"\x00"+strconv.Itoa(revision), maxName)
}

// EndpointLabels are the labels of an endpoint's objects and pods.
func EndpointLabels(project, endpoint string) map[string]string {
	return map[string]string{
		framework.LabelManagedBy: framework.ManagedByValue,
		framework.LabelProject:   framework.LabelValue(project),
		framework.LabelEndpoint:  framework.LabelValue(endpoint),
	}
}

// RevisionLabels are EndpointLabels plus the revision's number.
func RevisionLabels(project, endpoint string, revision int) map[string]string {
	l := EndpointLabels(project, endpoint)
	l[framework.LabelRevision] = strconv.Itoa(revision)
	return l
}

// selectorString renders labels as a label selector.
func selectorString(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

// buildDeployment returns a revision's desired Deployment.
func buildDeployment(ns, project, endpoint string, revision int, s inference.EndpointSpec, replicas int) (*appsv1.Deployment, error) {
	info, ok := inference.Info(s.Backend)
	if !ok {
		return nil, fmt.Errorf("spec.backend: unknown backend %q", s.Backend)
	}
	res, nodeSelector, err := requirements(s.Resources)
	if err != nil {
		return nil, err
	}
	labels := RevisionLabels(project, endpoint, revision)
	var env []corev1.EnvVar
	for _, e := range s.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	probe := func(period, timeout time.Duration, failures int32) *corev1.Probe {
		// Every field the API server would default is spelled out, so
		// that the merge can compare the live template with this one.
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: info.ReadinessPath, Port: intstr.FromString(PortHTTP), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    int32(period.Seconds()),
			TimeoutSeconds:   int32(timeout.Seconds()),
			SuccessThreshold: 1,
			FailureThreshold: failures,
		}
	}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
		Spec: corev1.PodSpec{
			NodeSelector: nodeSelector,
			// Kubernetes would otherwise inject <SERVICE>_PORT variables
			// for every Service of the namespace, and vLLM reads
			// VLLM_PORT: a Service named "vllm" crashes it.
			EnableServiceLinks: ptr.To(false),
			Containers: []corev1.Container{{
				Name:      ContainerName,
				Image:     s.Image,
				Args:      inference.ContainerArgs(s),
				Env:       env,
				Ports:     containerPorts(info),
				Resources: res,
				// A kubelet probe can only check the status code. For
				// Triton, /v2/health/ready is 200 only once the model is
				// loaded (strict readiness). For vLLM, /v1/models is the
				// best a probe can do: a 200 there normally lists the
				// model, but only reading the body (inference.ModelListed)
				// proves it; the workflow may check that itself.
				ReadinessProbe: probe(readinessPeriod, readinessTimeout, readinessFailure),
				StartupProbe:   startupProbe(probe, s.Rollout.Startup),
				// A crashing engine's last log lines land in the pod's
				// status, where ObserveRevision reads them.
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				ImagePullPolicy:          corev1.PullIfNotPresent,
			}},
		},
	}
	// The user's pod settings before the model's init container and the
	// secrets' variables are added: a patch cannot take those away.
	if err := framework.ApplyPod(&template, ContainerName, s.Pod); err != nil {
		return nil, fmt.Errorf("spec.pod: %v", err)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:        RevisionName(project, endpoint, revision),
			Namespace:   ns,
			Labels:      labels,
			Annotations: map[string]string{AnnotationTemplateHash: templateHash(template)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			// Immutable, and the same for every apply: the name is
			// derived from the same identity.
			Selector: &metav1.LabelSelector{MatchLabels: maps.Clone(labels)},
			Template: template,
			// A revision's template changes only when Atelier builds it
			// differently (an upgrade). Replace replicas one at a time
			// without surging, so that such a change never needs GPUs
			// beyond the revision's own.
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge:       ptr.To(intstr.FromInt32(0)),
					MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				},
			},
			// Rolling back is a new revision, not an old ReplicaSet.
			RevisionHistoryLimit: ptr.To[int32](0),
		},
	}
	return d, nil
}

// startupProbe allows twice the revision's EngineReady budget (at least
// minStartupBudget) for the engine to become ready. The workflow's
// per-phase deadlines are the real bound: it rolls back a replica that
// misses them. The probe is the backstop for when no workflow is watching
// (a wedged engine restarts instead of holding its GPUs forever), so it
// must never fire first.
func startupProbe(probe func(period, timeout time.Duration, failures int32) *corev1.Probe, d inference.StartupDeadlines) *corev1.Probe {
	budget := max(2*d.EngineReady.D(), minStartupBudget)
	failures := int32(math.Ceil(budget.Seconds() / startupPeriod.Seconds()))
	return probe(startupPeriod, readinessTimeout, failures)
}

func containerPorts(info inference.BackendInfo) []corev1.ContainerPort {
	ports := []corev1.ContainerPort{{Name: PortHTTP, ContainerPort: int32(info.HTTPPort), Protocol: corev1.ProtocolTCP}}
	if info.GRPCPort > 0 {
		ports = append(ports, corev1.ContainerPort{Name: PortGRPC, ContainerPort: int32(info.GRPCPort), Protocol: corev1.ProtocolTCP})
	}
	if info.MetricsPort > 0 && info.MetricsPort != info.HTTPPort {
		ports = append(ports, corev1.ContainerPort{Name: PortMetrics, ContainerPort: int32(info.MetricsPort), Protocol: corev1.ProtocolTCP})
	}
	return ports
}

// requirements turns a replica's resources into container requirements
// and a node selector. CPU and memory go through the framework (requests
// equal limits, as for steps). Whole GPUs are nvidia.com/gpu limits on
// nodes labelled nvidia.com/gpu.product=<type>; a MIG profile
// ("nvidia.com/mig-1g.10gb") is its own extended resource, which only
// nodes offering it have, so it needs no selector.
func requirements(r inference.Resources) (corev1.ResourceRequirements, map[string]string, error) {
	req, _, err := framework.Requirements(&pipeline.Resources{CPU: r.CPU, Memory: r.Memory}, "spec.resources")
	if err != nil {
		return req, nil, err
	}
	if r.GPUs < 0 {
		return req, nil, fmt.Errorf("spec.resources.gpus: must not be negative, got %d", r.GPUs)
	}
	if r.GPUs == 0 {
		return req, nil, nil
	}
	name := framework.GPUResource
	var selector map[string]string
	if strings.HasPrefix(string(r.GPUType), gpu.ResourceMIGPrefix) {
		name = corev1.ResourceName(r.GPUType)
	} else {
		selector = framework.GPUNodeSelector(string(r.GPUType))
	}
	if req.Limits == nil {
		req.Limits = corev1.ResourceList{}
	}
	// Extended resources: the request defaults to the limit.
	req.Limits[name] = *resource.NewQuantity(int64(r.GPUs), resource.DecimalSI)
	return req, selector, nil
}

// templateHash is a digest of a pod template as Atelier builds it.
func templateHash(t corev1.PodTemplateSpec) string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err) // a PodTemplateSpec always encodes
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// mergeOwnedMeta adds Atelier's labels and annotations to the live
// object's, keeping others' (kubectl annotations, policy labels).
func mergeOwnedMeta(cur, desired framework.Object) bool {
	changed := false
	for _, m := range []struct {
		get func() map[string]string
		set func(map[string]string)
		d   map[string]string
	}{
		{cur.GetLabels, cur.SetLabels, desired.GetLabels()},
		{cur.GetAnnotations, cur.SetAnnotations, desired.GetAnnotations()},
	} {
		live := m.get()
		for k, v := range m.d {
			if got, ok := live[k]; !ok || got != v {
				m.set(framework.MergeLabels(live, m.d))
				changed = true
				break
			}
		}
	}
	return changed
}

// mergeDeployment is the Merge of revision Deployments. Atelier owns the
// replica count (the workflow is its only writer: there is no HPA), the
// pod template, the strategy and the history limit, and its labels and
// annotations. The selector is immutable and derived from the same
// identity. Everything else stays: status, and fields the API server or
// other controllers set.
//
// The template is replaced when Atelier's template changed (its hash
// annotation differs, which catches removed fields) or when the live one
// drifted from it (a field Atelier sets has another value; fields Atelier
// leaves empty, which the API server defaults, are not compared).
func mergeDeployment(cur, desired framework.Object) bool {
	c, d := cur.(*appsv1.Deployment), desired.(*appsv1.Deployment)
	changed := false
	if c.GetAnnotations()[AnnotationTemplateHash] != d.GetAnnotations()[AnnotationTemplateHash] ||
		!equality.Semantic.DeepDerivative(d.Spec.Template, c.Spec.Template) {
		c.Spec.Template = *d.Spec.Template.DeepCopy()
		changed = true
	}
	if mergeOwnedMeta(c, d) {
		changed = true
	}
	if !ptr.Equal(c.Spec.Replicas, d.Spec.Replicas) {
		c.Spec.Replicas = ptr.To(*d.Spec.Replicas)
		changed = true
	}
	if !equality.Semantic.DeepDerivative(d.Spec.Strategy, c.Spec.Strategy) {
		c.Spec.Strategy = *d.Spec.Strategy.DeepCopy()
		changed = true
	}
	if !ptr.Equal(c.Spec.RevisionHistoryLimit, d.Spec.RevisionHistoryLimit) {
		c.Spec.RevisionHistoryLimit = ptr.To(*d.Spec.RevisionHistoryLimit)
		changed = true
	}
	return changed
}

// buildService returns a ClusterIP Service over the pods matching
// selector, with the backend's ports.
func buildService(ns, name string, labels, selector map[string]string, info inference.BackendInfo) *corev1.Service {
	var ports []corev1.ServicePort
	for _, p := range containerPorts(info) {
		ports = append(ports, corev1.ServicePort{
			Name: p.Name, Protocol: corev1.ProtocolTCP, Port: p.ContainerPort, TargetPort: intstr.FromString(p.Name),
		})
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selector,
			Ports:    ports,
		},
	}
}

// mergeService is the Merge of Services: Atelier owns the type, the
// selector and the ports (name, protocol, port, target); the cluster IP,
// IP families, session affinity and the like stay as the API server set
// them.
func mergeService(cur, desired framework.Object) bool {
	c, d := cur.(*corev1.Service), desired.(*corev1.Service)
	changed := mergeOwnedMeta(c, d)
	if c.Spec.Type != d.Spec.Type {
		c.Spec.Type = d.Spec.Type
		changed = true
	}
	if !maps.Equal(c.Spec.Selector, d.Spec.Selector) {
		c.Spec.Selector = maps.Clone(d.Spec.Selector)
		changed = true
	}
	type port struct {
		name     string
		protocol corev1.Protocol
		port     int32
		target   intstr.IntOrString
	}
	project := func(ps []corev1.ServicePort) []port {
		out := make([]port, len(ps))
		for i, p := range ps {
			out[i] = port{p.Name, p.Protocol, p.Port, p.TargetPort}
		}
		return out
	}
	if !slices.Equal(project(c.Spec.Ports), project(d.Spec.Ports)) {
		c.Spec.Ports = slices.Clone(d.Spec.Ports)
		changed = true
	}
	return changed
}

// buildRoute returns the endpoint's HTTPRoute: one rule matching every
// path, with one backendRef per revision (its Service, weighted).
// Weight-0 revisions stay listed so that the route shows them; a route
// without weights has no backends (the gateway answers 500: nothing
// serves).
func buildRoute(ns, name, project, endpoint string, labels map[string]string, parents []gatewayv1.ParentReference,
	hostnames []string, weights []inference.RevisionWeight, info inference.BackendInfo) *gatewayv1.HTTPRoute {
	ws := slices.Clone(weights)
	slices.SortFunc(ws, func(a, b inference.RevisionWeight) int { return cmp.Compare(a.Revision, b.Revision) })
	var refs []gatewayv1.HTTPBackendRef
	for _, w := range ws {
		refs = append(refs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			// Defaults spelled out (group "", kind Service) so that the
			// live spec compares equal to this one.
			BackendObjectReference: gatewayv1.BackendObjectReference{
				Group: ptr.To(gatewayv1.Group("")),
				Kind:  ptr.To(gatewayv1.Kind("Service")),
				Name:  gatewayv1.ObjectName(RevisionName(project, endpoint, w.Revision)),
				Port:  ptr.To(gatewayv1.PortNumber(info.HTTPPort)),
			},
			Weight: ptr.To(int32(w.Weight)),
		}})
	}
	hs := make([]gatewayv1.Hostname, len(hostnames))
	for i, h := range hostnames {
		hs[i] = gatewayv1.Hostname(h)
	}
	if len(hs) == 0 {
		hs = nil
	}
	ps := make([]gatewayv1.ParentReference, len(parents))
	for i, p := range parents {
		ps[i] = *p.DeepCopy()
		if ps[i].Group == nil {
			ps[i].Group = ptr.To(gatewayv1.Group(gatewayv1.GroupName))
		}
		if ps[i].Kind == nil {
			ps[i].Kind = ptr.To(gatewayv1.Kind("Gateway"))
		}
	}
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: ps},
			Hostnames:       hs,
			Rules: []gatewayv1.HTTPRouteRule{{
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{
					Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To("/"),
				}}},
				BackendRefs: refs,
			}},
		},
	}
}

// mergeRoute is the Merge of HTTPRoutes: Atelier owns the whole spec; the
// status belongs to the gateway controllers.
func mergeRoute(cur, desired framework.Object) bool {
	c, d := cur.(*gatewayv1.HTTPRoute), desired.(*gatewayv1.HTTPRoute)
	changed := mergeOwnedMeta(c, d)
	if !equality.Semantic.DeepEqual(c.Spec, d.Spec) {
		c.Spec = *d.Spec.DeepCopy()
		changed = true
	}
	return changed
}
