// Package enginemetrics reads serving engines' Prometheus metrics (vLLM,
// Triton, examples/modelserver) into inference.Samples: one scrape of one
// replica, filtered to the families the caller needs. Both runtimes use it:
// activities/kube/serving scrapes pods, activities/local scrapes local
// replica processes. Turning samples into a queue signal is
// inference.Signal's job.
package enginemetrics

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/atelier-ml/atelier/inference"
)

// Scrape limits.
const (
	// DefaultTimeout bounds one scrape when the caller sets none.
	DefaultTimeout = 5 * time.Second
	// MaxBytes bounds one /metrics body: a vLLM replica's is about 100 KB;
	// anything far larger is not a model server.
	MaxBytes = 8 << 20
)

// QueueFamilies returns the family filter of a scrape: the families in
// names, or by default the backend's queue and KV-cache gauges (what
// inference.Signal reads), so that results stay far below Temporal's
// payload limits.
func QueueFamilies(names []string, info inference.BackendInfo) func(family string) bool {
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

// Fetch scrapes url once with client, within timeout (DefaultTimeout when
// 0), and parses the families keep accepts (see Parse). A status other
// than 200, a body over MaxBytes or unparsable text is an error.
func Fetch(ctx context.Context, client *http.Client, url string, timeout time.Duration, keep func(string) bool) ([]inference.Sample, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The text format: every engine serves it, and the parser reads it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > MaxBytes {
		return nil, fmt.Errorf("GET %s: metrics larger than %d bytes", url, MaxBytes)
	}
	return Parse(bytes.NewReader(body), keep)
}

// Parse reads the Prometheus text format (what vLLM, Triton and
// examples/modelserver serve) into samples, keeping the families keep
// accepts (nil keeps all). Counters, gauges and untyped metrics give one
// sample per series; histograms give <name>_bucket (one per le, +Inf
// included), <name>_sum and <name>_count; summaries <name> per quantile,
// <name>_sum and <name>_count, as Prometheus itself flattens them. Labels
// are rendered `a="x",b="y"`, sorted by name. NaN and infinite values are
// dropped: inference.Signal reads them as absent anyway, and JSON (the
// activities' payload) cannot carry them. Samples are sorted by name, then
// labels.
func Parse(r io.Reader, keep func(family string) bool) ([]inference.Sample, error) {
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
