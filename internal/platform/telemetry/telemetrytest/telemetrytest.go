// Package telemetrytest reads metrics back in tests: from a registry or
// from a scraped /metrics page, as a flat map of series to values.
package telemetrytest

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Values maps each series, written `name{k="v",…}` with labels sorted by
// name (`name` alone without labels), to its value. A histogram appears as
// its `name_count{…}` and `name_sum{…}`.
type Values map[string]float64

// Gather reads g.
func Gather(g prometheus.Gatherer) (Values, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	return flatten(mfs), nil
}

// Scrape GETs url (a /metrics page in the text format).
func Scrape(url string) (Values, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	mfs := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	return flatten(mfs), nil
}

// Series names a series the way Values keys it.
func Series(name string, labels ...string) string {
	if len(labels)%2 != 0 {
		panic("telemetrytest.Series: labels come in pairs")
	}
	pairs := make([]string, 0, len(labels)/2)
	for i := 0; i < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(pairs)
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// Sum adds the values of every series of name whose labels include the
// given pairs (the others summed over, like PromQL's sum without them).
func (v Values) Sum(name string, labels ...string) float64 {
	var want []string
	for i := 0; i+1 < len(labels); i += 2 {
		want = append(want, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	total := 0.0
	for k, val := range v {
		n, rest, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(","+strings.TrimSuffix(rest, "}")+",", ","+w+",") {
				ok = false
				break
			}
		}
		if ok {
			total += val
		}
	}
	return total
}

// Has reports whether any series of name exists.
func (v Values) Has(name string) bool {
	for k := range v {
		if n, _, _ := strings.Cut(k, "{"); n == name {
			return true
		}
	}
	return false
}

func flatten(mfs []*dto.MetricFamily) Values {
	out := Values{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName(), lp.GetValue())
			}
			name := mf.GetName()
			switch {
			case m.Counter != nil:
				out[Series(name, labels...)] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[Series(name, labels...)] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[Series(name, labels...)] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				out[Series(name+"_count", labels...)] = float64(m.GetHistogram().GetSampleCount())
				out[Series(name+"_sum", labels...)] = m.GetHistogram().GetSampleSum()
			case m.Summary != nil:
				out[Series(name+"_count", labels...)] = float64(m.GetSummary().GetSampleCount())
				out[Series(name+"_sum", labels...)] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return out
}
