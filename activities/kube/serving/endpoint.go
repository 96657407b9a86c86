package serving

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			ro.URLs = []string{s.revisionURL(ctx, o.Namespace, o.Deployment, req.Backend)}
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

// RevisionURL is the in-cluster DNS address of a revision's Service
// (named like its Deployment).
func RevisionURL(namespace, revisionName string, backend inference.Backend) string {
	info, _ := inference.Info(backend)
	return fmt.Sprintf("http://%s.%s.svc:%d", revisionName, namespace, info.HTTPPort)
}

// clusterIPTTL is how long a Service's cluster IP is reused without
// reading the Service again (a Service made again gets a new one).
const clusterIPTTL = time.Minute

type cachedIP struct {
	ip string
	at time.Time
}

// revisionURL is where the gateway's endpoint proxy sends a revision's
// requests: its Service's cluster IP, which answers from anywhere on the
// cluster's service network (a gateway in the cluster, or on one of its
// nodes: kube-proxy's rules are there too) with no cluster DNS; its DNS
// name (RevisionURL) while the Service has no IP yet.
func (s *Serving) revisionURL(ctx context.Context, namespace, revisionName string, backend inference.Backend) string {
	info, _ := inference.Info(backend)
	key := namespace + "/" + revisionName
	now := s.clock.Now()
	cached, known := s.clusterIPs.Load(key)
	if known && now.Sub(cached.(cachedIP).at) < clusterIPTTL {
		return fmt.Sprintf("http://%s", net.JoinHostPort(cached.(cachedIP).ip, strconv.Itoa(info.HTTPPort)))
	}
	svc, err := s.clients.Kube.CoreV1().Services(namespace).Get(ctx, revisionName, metav1.GetOptions{})
	switch {
	case err != nil && !apierrors.IsNotFound(err) && known:
		// The API server did not answer: the last address read stays
		// (a Service's cluster IP lives as long as the Service).
		return fmt.Sprintf("http://%s", net.JoinHostPort(cached.(cachedIP).ip, strconv.Itoa(info.HTTPPort)))
	case err != nil || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone:
		s.clusterIPs.Delete(key)
		return RevisionURL(namespace, revisionName, backend)
	}
	s.clusterIPs.Store(key, cachedIP{svc.Spec.ClusterIP, now})
	return fmt.Sprintf("http://%s", net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(info.HTTPPort)))
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
