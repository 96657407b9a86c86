package telemetry_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	Title   string           `json:"title"`
	Type    string           `json:"type"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var (
	metricName = regexp.MustCompile(`\b(?:atelier|temporal)_[a-z0-9_]+\b`)
	matcher    = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	byClause   = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
)

// Every metric the Grafana dashboard (deploy/grafana/atelier.json) queries
// is one Atelier exports: a family of internal/platform/telemetry, or a Temporal SDK
// metric the integration test sees on a real /metrics; histograms are
// read through _bucket/_sum/_count; and every label it filters or groups
// Atelier's metrics by is one of their labels.
func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../../deploy/grafana/atelier.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" {
		t.Error("dashboard has no uid (imports would duplicate it)")
	}
	known := map[string]telemetry.Family{}
	for _, f := range append(slices.Clone(telemetry.Families), telemetry.SDKMetrics...) {
		known[f.Name] = f
	}
	used := map[string]bool{}
	exprs := 0
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q queries nothing", p.Title)
			}
			for _, tg := range p.Targets {
				exprs++
				checkExpr(t, p.Title, tg.Expr, known, used)
			}
		}
	}
	walk(dash.Panels)
	if exprs == 0 {
		t.Fatal("no queries found in the dashboard")
	}
	for _, f := range telemetry.Families {
		if !used[f.Name] {
			t.Logf("not on the dashboard: %s", f.Name)
		}
	}
}

func checkExpr(t *testing.T, panel, expr string, known map[string]telemetry.Family, used map[string]bool) {
	t.Helper()
	names := metricName.FindAllString(expr, -1)
	if len(names) == 0 {
		t.Errorf("panel %q: %q queries no Atelier or Temporal metric", panel, expr)
	}
	var labels []string // labels of the Atelier families in expr
	atelierOnly := true
	for _, n := range names {
		f, ok := known[n]
		if !ok {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if f, ok = known[base]; !ok || f.Type != telemetry.Histogram {
				t.Errorf("panel %q: %s is not a metric Atelier exports", panel, n)
				continue
			}
		} else if f.Type == telemetry.Histogram {
			t.Errorf("panel %q: histogram %s must be read through _bucket, _sum or _count", panel, n)
		}
		used[f.Name] = true
		if strings.HasPrefix(f.Name, "temporal_") {
			atelierOnly = false
			continue
		}
		labels = append(labels, f.LabelNames(true)...)
	}
	if !atelierOnly {
		return // the SDK's tags are not declared here
	}
	for _, m := range matcher.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(labels, m[1]) {
			t.Errorf("panel %q: label %s is not one of %v", panel, m[1], labels)
		}
	}
	for _, m := range byClause.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "le" && l != "" && !slices.Contains(labels, l) {
				t.Errorf("panel %q: grouped by %s, not one of %v", panel, l, labels)
			}
		}
	}
}
