package serving

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
)

// Scrape limits.
const (
	DefaultScrapeTimeout = 5 * time.Second
	// maxScrapeBytes bounds one /metrics body: a vLLM replica's is about
	// 100 KB; anything far larger is not a model server.
	maxScrapeBytes = 8 << 20
	// scrapeParallelism bounds concurrent scrapes per call.
	scrapeParallelism = 8
)

// ScrapeMetrics scrapes the revision's replicas once and returns their
// samples, filtered to req.Names (default: the backend's queue and
// KV-cache gauges, what inference.Signal reads), so results stay far below
// Temporal's payload limits.
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
	keep := keepFamilies(req.Names, info)
	out := activities.ScrapeServingMetricsResult{Scrapes: make([]activities.ServingScrape, len(targets))}
	sem := make(chan struct{}, scrapeParallelism)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			samples, err := s.scrape(ctx, t.url, timeout, keep)
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

// scrape fetches and parses one target.
func (s *Serving) scrape(ctx context.Context, url string, timeout time.Duration, keep func(string) bool) ([]inference.Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The text format: every engine serves it, and the parser reads it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > maxScrapeBytes {
		return nil, fmt.Errorf("GET %s: metrics larger than %d bytes", url, maxScrapeBytes)
	}
	return ParseMetrics(bytes.NewReader(body), keep)
}

// keepFamilies returns the family filter of a request.
func keepFamilies(names []string, info inference.BackendInfo) func(string) bool {
	if len(names) == 0 {
		names = append([]string{info.WaitingMetric}, info.KVCacheMetrics...)
		if info.RunningMetric != "" {
			names = append(names, info.RunningMetric)
		}
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return func(family string) bool { return set[family] }
}

// ParseMetrics reads the Prometheus text format (what vLLM, Triton and
// examples/modelserver serve) into samples, keeping the families keep
// accepts (nil keeps all). Counters, gauges and untyped metrics give one
// sample per series; histograms give <name>_bucket (one per le, +Inf
// included), <name>_sum and <name>_count; summaries <name> per quantile,
// <name>_sum and <name>_count, as Prometheus itself flattens them. Labels
// are rendered `a="x",b="y"`, sorted by name. NaN and infinite values are
// dropped: inference.Signal reads them as absent anyway, and JSON (the
// activity's payload) cannot carry them. Samples are sorted by name, then
// labels.
func ParseMetrics(r io.Reader, keep func(family string) bool) ([]inference.Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	var out []inference.Sample
	add := func(name string, labels []*dto.LabelPair, extra map[string]string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		out = append(out, inference.Sample{Name: name, Labels: renderLabels(labels, extra), Value: v})
	}
	for _, name := range slices.Sorted(maps.Keys(families)) {
		if keep != nil && !keep(name) {
			continue
		}
		mf := families[name]
		for _, m := range mf.GetMetric() {
			l := m.GetLabel()
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(name, l, nil, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, l, nil, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, l, nil, m.GetUntyped().GetValue())
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					add(name, l, map[string]string{"quantile": formatFloat(q.GetQuantile())}, q.GetValue())
				}
				add(name+"_sum", l, nil, sm.GetSampleSum())
				add(name+"_count", l, nil, float64(sm.GetSampleCount()))
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					c := float64(b.GetCumulativeCount())
					if b.CumulativeCountFloat != nil {
						c = b.GetCumulativeCountFloat()
					}
					add(name+"_bucket", l, map[string]string{"le": formatFloat(b.GetUpperBound())}, c)
				}
				add(name+"_sum", l, nil, h.GetSampleSum())
				count := float64(h.GetSampleCount())
				if h.SampleCountFloat != nil {
					count = h.GetSampleCountFloat()
				}
				add(name+"_count", l, nil, count)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b inference.Sample) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Labels, b.Labels)
	})
	return out, nil
}

// renderLabels renders label pairs plus extra ones, sorted by name.
func renderLabels(pairs []*dto.LabelPair, extra map[string]string) string {
	all := make(map[string]string, len(pairs)+len(extra))
	for _, p := range pairs {
		all[p.GetName()] = p.GetValue()
	}
	maps.Copy(all, extra)
	keys := slices.Sorted(maps.Keys(all))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(all[k])
	}
	return strings.Join(parts, ",")
}

// formatFloat renders a bound as Prometheus does ("0.5", "+Inf").
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
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
