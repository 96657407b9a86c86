package serving

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
)

// noRevision is the revision label value of the stable Service's selector
// when no revision has traffic: it matches no pod.
const noRevision = "none"

// ApplyTraffic splits the endpoint's traffic between revisions:
//
//   - a Service per weighted revision ("<revision name>", selecting that
//     revision's pods), which the HTTPRoute's backendRefs point at;
//   - the endpoint's stable Service ("<endpoint>"), selecting the only
//     revision with weight when there is one, else every revision of the
//     endpoint (a Service selector cannot name a set of revisions);
//   - in gateway-api mode, the endpoint's HTTPRoute, attached to the
//     worker's Gateway, with one weighted backendRef per revision.
//
// The mode is gateway-api when the worker has a Gateway API client and a
// Gateway (WithGateway) and the cluster serves HTTPRoutes (discovery,
// cached for a minute); otherwise replica-ratio, where the stable Service
// balances over the ready pods it selects, so revisions share traffic in
// proportion to their ready replicas: the caller sizes replicas to the
// weights. The result says which, and why. A route left from an earlier
// gateway-api mode is deleted in replica-ratio mode.
//
// Weights must name distinct revisions (≥ 1), each 0..100, summing to
// 100; or be empty, and then nothing serves (the stable Service selects
// no pod, the route has no backend).
func (s *Serving) ApplyTraffic(ctx context.Context, req activities.ApplyServingTrafficRequest) (activities.ApplyServingTrafficResult, error) {
	if err := checkEndpoint(req.Project, req.Endpoint); err != nil {
		return activities.ApplyServingTrafficResult{}, err
	}
	info, ok := inference.Info(req.Backend)
	if !ok {
		return activities.ApplyServingTrafficResult{}, framework.Invalid("unknown backend %q; use triton or vllm", req.Backend)
	}
	weights, err := checkWeights(req.Weights)
	if err != nil {
		return activities.ApplyServingTrafficResult{}, err
	}
	ns, err := s.namespace(req.Project)
	if err != nil {
		return activities.ApplyServingTrafficResult{}, err
	}
	mode, reason, routesServed, err := s.trafficMode(ctx)
	if err != nil {
		return activities.ApplyServingTrafficResult{}, err
	}
	res := activities.ApplyServingTrafficResult{Namespace: ns, Mode: mode, ModeReason: reason, Service: EndpointName(req.Project, req.Endpoint)}

	// Revision Services first: the route must never point at a missing one.
	for _, w := range weights {
		l := RevisionLabels(req.Project, req.Endpoint, w.Revision)
		svc := buildService(ns, RevisionName(req.Project, req.Endpoint, w.Revision), l, l, info)
		if err := s.applyTo(ctx, &res, s.res.Services, svc, mergeService, req.Project); err != nil {
			return activities.ApplyServingTrafficResult{}, err
		}
	}

	endpointLabels := EndpointLabels(req.Project, req.Endpoint)
	selector := EndpointLabels(req.Project, req.Endpoint)
	var selected []int
	for _, w := range weights {
		if w.Weight > 0 {
			selected = append(selected, w.Revision)
		}
	}
	switch len(selected) {
	case 0:
		selector[framework.LabelRevision] = noRevision
	case 1:
		selector[framework.LabelRevision] = fmt.Sprint(selected[0])
	default:
		// Every revision of the endpoint, weight-0 ones included.
		selected = nil
		for _, w := range weights {
			selected = append(selected, w.Revision)
		}
	}
	res.Selected = selected
	stable := buildService(ns, res.Service, endpointLabels, selector, info)
	if err := s.applyTo(ctx, &res, s.res.Services, stable, mergeService, req.Project); err != nil {
		return activities.ApplyServingTrafficResult{}, err
	}

	switch {
	case mode == activities.TrafficGatewayAPI:
		route := buildRoute(ns, res.Service, req.Project, req.Endpoint, endpointLabels, s.parents, req.Hostnames, weights, info)
		if err := s.applyTo(ctx, &res, *s.res.Routes, route, mergeRoute, req.Project); err != nil {
			return activities.ApplyServingTrafficResult{}, err
		}
		res.Route = route.Name
	case routesServed:
		// A route from when this worker had a Gateway would keep
		// routing by its old weights.
		deleted, err := deleteOwned(ctx, *s.res.Routes, ns, res.Service, endpointLabels)
		if err != nil {
			return activities.ApplyServingTrafficResult{}, err
		}
		res.Changed = res.Changed || deleted
	}
	return res, nil
}

// applyTo applies desired and records it in res.
func (s *Serving) applyTo(ctx context.Context, res *activities.ApplyServingTrafficResult, r framework.Updater, desired framework.Object, merge framework.Merge, project string) error {
	_, changed, err := s.apply(ctx, r, desired, merge, project)
	if err != nil {
		return err
	}
	res.Objects = append(res.Objects, objectRef(r, desired.GetName()))
	res.Changed = res.Changed || changed
	return nil
}

// checkWeights validates weights and returns them sorted by revision.
func checkWeights(in []inference.RevisionWeight) ([]inference.RevisionWeight, error) {
	ws := slices.Clone(in)
	slices.SortFunc(ws, func(a, b inference.RevisionWeight) int { return cmp.Compare(a.Revision, b.Revision) })
	sum := 0
	var problems []string
	for i, w := range ws {
		switch {
		case w.Revision < 1:
			problems = append(problems, fmt.Sprintf("revision %d: revisions are numbered from 1", w.Revision))
		case i > 0 && ws[i-1].Revision == w.Revision:
			problems = append(problems, fmt.Sprintf("revision %d is listed twice", w.Revision))
		}
		if w.Weight < 0 || w.Weight > 100 {
			problems = append(problems, fmt.Sprintf("revision %d: weight %d is not within 0..100", w.Revision, w.Weight))
		}
		sum += w.Weight
	}
	if len(ws) > 0 && sum != 100 {
		problems = append(problems, fmt.Sprintf("weights sum to %d, not 100", sum))
	}
	if len(problems) > 0 {
		return nil, framework.Invalid("traffic weights: %s", strings.Join(problems, "; "))
	}
	return ws, nil
}

// trafficMode decides how traffic is split; routesServed reports whether
// the cluster serves HTTPRoutes (and the worker can write them).
func (s *Serving) trafficMode(ctx context.Context) (mode, reason string, routesServed bool, err error) {
	if s.res.Routes == nil {
		return activities.TrafficReplicaRatio, "the worker has no Gateway API client: traffic follows ready replicas", false, nil
	}
	served, err := s.routesServed(ctx)
	if err != nil {
		return "", "", false, err
	}
	switch {
	case !served:
		return activities.TrafficReplicaRatio, "the cluster does not serve Gateway API HTTPRoutes (" + gatewayv1.GroupVersion.String() + "): traffic follows ready replicas", false, nil
	case len(s.parents) == 0:
		return activities.TrafficReplicaRatio, "the cluster serves HTTPRoutes but the worker names no Gateway to attach them to: traffic follows ready replicas", true, nil
	}
	var gws []string
	for _, p := range s.parents {
		n := string(p.Name)
		if p.Namespace != nil {
			n = string(*p.Namespace) + "/" + n
		}
		gws = append(gws, n)
	}
	return activities.TrafficGatewayAPI, "HTTPRoute weights on Gateway " + strings.Join(gws, ", "), true, nil
}

// routesServed asks discovery whether the cluster serves HTTPRoutes. The
// answer is kept for routeRecheck: installing (or removing) Gateway API
// takes effect without restarting workers, at one discovery request per
// minute.
func (s *Serving) routesServed(ctx context.Context) (bool, error) {
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	now := s.clock.Now()
	if !s.routesAsked.IsZero() && now.Sub(s.routesAsked) < s.routeRecheck {
		return s.routesOK, nil
	}
	_ = ctx // discovery requests take no context
	list, err := s.clients.Kube.Discovery().ServerResourcesForGroupVersion(gatewayv1.GroupVersion.String())
	served := false
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("discover %s: %w", gatewayv1.GroupVersion, err)
	default:
		for _, r := range list.APIResources {
			if r.Name == "httproutes" {
				served = true
			}
		}
	}
	s.routesOK, s.routesAsked = served, now
	return served, nil
}
