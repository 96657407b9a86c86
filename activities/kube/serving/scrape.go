package serving

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/enginemetrics"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
)

// Scrape limits.
const (
	DefaultScrapeTimeout = enginemetrics.DefaultTimeout
	// scrapeParallelism bounds concurrent scrapes per call.
	scrapeParallelism = 8
)

// ScrapeMetrics scrapes the revision's replicas once and returns their
// samples, filtered to req.Names (default: the backend's queue and
// KV-cache gauges, what inference.Signal reads), so results stay far below
// Temporal's payload limits.
//
// Parsing is enginemetrics.Parse's, shared with the local runtime.
//
// Without req.Targets it scrapes every ready pod of the revision at
// http://<pod IP>:<metrics port><metrics path>, which needs a worker that
// can reach pod IPs (in the cluster, or on its pod network). Pods of fake
// nodes (kwok, in tests) have IPs but no containers behind them: tests
// pass Targets pointing at an in-process examples/modelserver instead.
//
// A target that cannot be scraped is reported in its ServingScrape.Error,
// not as the activity's error: one dead replica must not hide the others'
// load, and its signal is unknown, never zero. The activity fails only for
// an invalid request (InvalidStep) or when the pods cannot be listed.
func (s *Serving) ScrapeMetrics(ctx context.Context, req activities.ScrapeServingMetricsRequest) (activities.ScrapeServingMetricsResult, error) {
	if err := checkRef(req.ServingRevisionRef); err != nil {
		return activities.ScrapeServingMetricsResult{}, err
	}
	info, ok := inference.Info(req.Backend)
	if !ok {
		return activities.ScrapeServingMetricsResult{}, framework.Invalid("unknown backend %q; use triton or vllm", req.Backend)
	}
	if req.Timeout < 0 {
		return activities.ScrapeServingMetricsResult{}, framework.Invalid("timeout must not be negative, got %s", req.Timeout)
	}
	timeout := req.Timeout
	if timeout == 0 {
		timeout = DefaultScrapeTimeout
	}
	type target struct{ url, replica string }
	var targets []target
	if len(req.Targets) > 0 {
		for _, t := range req.Targets {
			if !strings.HasPrefix(t, "http://") && !strings.HasPrefix(t, "https://") {
				return activities.ScrapeServingMetricsResult{}, framework.Invalid("target %q is not an http(s) URL", t)
			}
			targets = append(targets, target{url: t})
		}
	} else {
		ns, err := s.namespace(req.Project)
		if err != nil {
			return activities.ScrapeServingMetricsResult{}, err
		}
		pods, err := s.clients.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector:   selectorString(RevisionLabels(req.Project, req.Endpoint, req.Revision)),
			ResourceVersion: "0",
		})
		if err != nil {
			return activities.ScrapeServingMetricsResult{}, framework.WrapAPI(err, "list pods of revision %d of endpoint %s", req.Revision, req.Endpoint)
		}
		items := pods.Items
		slices.SortFunc(items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		for _, p := range items {
			if p.DeletionTimestamp != nil || p.Status.PodIP == "" || !podReady(&p) {
				continue
			}
			u := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(info.MetricsPort)) + info.MetricsPath
			targets = append(targets, target{url: u, replica: p.Name})
		}
	}
	keep := enginemetrics.QueueFamilies(req.Names, info)
	out := activities.ScrapeServingMetricsResult{Scrapes: make([]activities.ServingScrape, len(targets))}
	sem := make(chan struct{}, scrapeParallelism)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			samples, err := enginemetrics.Fetch(ctx, s.http, t.url, timeout, keep)
			sc := activities.ServingScrape{Target: t.url, Replica: t.replica, At: s.clock.Now(), Samples: samples}
			if err != nil {
				sc.Error = err.Error()
			}
			out.Scrapes[i] = sc
		}()
	}
	wg.Wait()
	return out, nil
}

// podReady reports whether the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
