package serving

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/engineprobe"
	"github.com/atelier-ml/atelier/inference"
)

// The endpoint workflow's contract (activities.ObserveEndpointName, ...)
// over the per-object activities above: one activity per tick observes
// every revision, one applies a whole layout, so an endpoint's history
// grows by a few events per tick instead of a few per revision.

// RegisterEndpoint registers the endpoint workflow's activities under
// their contract names.
func (s *Serving) RegisterEndpoint(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(s.ObserveEndpoint, activity.RegisterOptions{Name: activities.ObserveEndpointName})
	reg.RegisterActivityWithOptions(s.ApplyEndpointLayout, activity.RegisterOptions{Name: activities.ApplyEndpointLayoutName})
	reg.RegisterActivityWithOptions(s.DeleteEndpointRevisions, activity.RegisterOptions{Name: activities.DeleteEndpointRevisionsName})
	reg.RegisterActivityWithOptions(s.DeleteWholeEndpoint, activity.RegisterOptions{Name: activities.DeleteEndpointName})
	reg.RegisterActivityWithOptions(s.Headroom, activity.RegisterOptions{Name: activities.EndpointHeadroomName})
}

// ObserveEndpoint observes each revision and scrapes its ready replicas'
// queue metrics. A replica whose scrape fails is left out of Queue: the
// autoscaler then treats its load as unknown, never as zero. Traffic
// figures for the gates (Requests, Errors, P99) are not read yet: the
// measured revision reports MetricsKnown false, so traffic gates answer
// "insufficient samples" (see the package doc).
func (s *Serving) ObserveEndpoint(ctx context.Context, req activities.ObserveEndpointRequest) (activities.ObserveEndpointResult, error) {
	out := activities.ObserveEndpointResult{At: s.clock.Now()}
	for _, rev := range req.Revisions {
		ref := activities.ServingRevisionRef{Project: req.Project, Endpoint: req.Endpoint, Revision: rev}
		o, err := s.ObserveRevision(ctx, activities.ObserveServingRevisionRequest{ServingRevisionRef: ref})
		if err != nil {
			return out, err
		}
		ro := activities.RevisionObservation{Revision: rev, Replicas: len(o.Replicas), Status: o.Status()}
		switch {
		case o.Stuck != nil:
			ro.Waiting = fmt.Sprintf("%s: %s", o.Stuck.Reason, o.Stuck.Message)
		case o.Unschedulable != nil:
			ro.Waiting = fmt.Sprintf("%s: %s", o.Unschedulable.Reason, o.Unschedulable.Message)
		}
		if o.Ready > 0 {
			ro.URLs = []string{RevisionURL(o.Namespace, o.Deployment, req.Backend)}
			sc, err := s.ScrapeMetrics(ctx, activities.ScrapeServingMetricsRequest{ServingRevisionRef: ref, Backend: req.Backend})
			if err != nil {
				return out, err
			}
			for _, x := range sc.Scrapes {
				if x.Error != "" {
					continue
				}
				ro.Queue = append(ro.Queue, inference.Observation{At: x.At, Replica: x.Replica, Signal: inference.Signal(req.Backend, x.Samples)})
			}
		}
		if rev == req.Measured && req.Probes > 0 && len(ro.URLs) > 0 {
			// Through the revision's Service: from a worker outside the
			// cluster nothing answers, and no sample is counted.
			p := engineprobe.Send(ctx, s.http, req.Backend, req.ProbeModel, ro.URLs, req.Probes)
			ro.Probed = &p
		}
		out.Revisions = append(out.Revisions, ro)
		activity.RecordHeartbeat(ctx, rev)
	}
	return out, nil
}

// ApplyEndpointLayout applies every listed revision's Deployment and the
// traffic weights: revisions first (new capacity before traffic moves),
// or traffic first when the layout is surge-free (the removed replicas'
// traffic moves before they go).
func (s *Serving) ApplyEndpointLayout(ctx context.Context, req activities.ApplyEndpointLayoutRequest) (activities.ApplyEndpointLayoutResult, error) {
	var backend inference.Backend
	for _, r := range req.Revisions {
		backend = r.Spec.Backend
	}
	revisions := func() error {
		for _, r := range req.Revisions {
			_, err := s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{
				ServingRevisionRef: activities.ServingRevisionRef{Project: req.Project, Endpoint: req.Endpoint, Revision: r.Revision},
				Spec:               r.Spec, Replicas: r.Replicas,
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	var mode string
	traffic := func() error {
		res, err := s.ApplyTraffic(ctx, activities.ApplyServingTrafficRequest{Project: req.Project, Endpoint: req.Endpoint, Backend: backend, Weights: req.Traffic})
		mode = res.Mode
		return err
	}
	steps := []func() error{revisions, traffic}
	if req.ScaleDownFirst {
		steps = []func() error{traffic, revisions}
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return activities.ApplyEndpointLayoutResult{}, err
		}
	}
	return activities.ApplyEndpointLayoutResult{TrafficMode: mode}, nil
}

// RevisionURL is the in-cluster address of a revision's Service (named
// like its Deployment), where the gateway's endpoint proxy sends the
// revision's requests: reachable from a gateway that runs in the cluster
// (or on its pod and service network).
func RevisionURL(namespace, revisionName string, backend inference.Backend) string {
	info, _ := inference.Info(backend)
	return fmt.Sprintf("http://%s.%s.svc:%d", revisionName, namespace, info.HTTPPort)
}

// DeleteEndpointRevisions deletes revisions that no longer serve.
func (s *Serving) DeleteEndpointRevisions(ctx context.Context, req activities.DeleteEndpointRevisionsRequest) error {
	for _, rev := range req.Revisions {
		ref := activities.ServingRevisionRef{Project: req.Project, Endpoint: req.Endpoint, Revision: rev}
		if _, err := s.DeleteRevision(ctx, ref); err != nil {
			return err
		}
	}
	return nil
}

// DeleteWholeEndpoint deletes everything of the endpoint.
func (s *Serving) DeleteWholeEndpoint(ctx context.Context, ref activities.EndpointRef) error {
	_, err := s.DeleteEndpoint(ctx, activities.DeleteServingEndpointRequest{Project: ref.Project, Endpoint: ref.Endpoint})
	return err
}
