package telemetry

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
)

// Options configure a process's metrics.
type Options struct {
	// TenantLabels adds the families' TenantLabels (project; endpoint and
	// revision) to their series. Off by default: every project multiplies
	// the run and step series.
	TenantLabels bool
	// SpanExporter, when set, turns tracing on in every process built with
	// these metrics and receives their spans instead of OTLP (tests read
	// them from an in-memory exporter; see NewTracing).
	SpanExporter sdktrace.SpanExporter
}

// Metrics is one process's metrics: the registry its /metrics serves and
// the Temporal SDK handler writing into it. `atelier dev` shares one
// between its gateway and its worker, so one /metrics shows both.
type Metrics struct {
	Registry     *prometheus.Registry
	SDK          client.MetricsHandler
	TenantLabels bool
	// SpanExporter is Options.SpanExporter: nil, tracing follows the
	// OpenTelemetry environment.
	SpanExporter sdktrace.SpanExporter
}

// New makes a registry with the Go runtime and process collectors and an
// SDK handler over it.
func New(opts Options) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Metrics{Registry: reg, SDK: NewSDKHandler(reg, opts), TenantLabels: opts.TenantLabels, SpanExporter: opts.SpanExporter}
}

// HTTPHandler serves the registry in the Prometheus exposition formats. A
// series that cannot be gathered is left out rather than failing the
// whole scrape.
func (m *Metrics) HTTPHandler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, ErrorHandling: promhttp.ContinueOnError})
}

// Register registers c on reg, or returns the collector already
// registered under the same description (a second gateway or proxy on one
// registry: tests, `atelier dev`).
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}

// NewSDKHandler returns a Temporal SDK metrics handler whose metrics are
// collected by reg. The SDK's metrics follow the usual Prometheus export
// of them (as with the SDK's tally contrib and a Prometheus reporter):
// counters get _total, timers become histograms in seconds named _seconds,
// tags become labels. Names in Families are exported as declared, with
// only the family's labels (tags the SDK adds in workflow code, such as
// namespace, task_queue and workflow_type, are dropped, so the label set
// stays the family's).
func NewSDKHandler(reg prometheus.Registerer, opts Options) client.MetricsHandler {
	c := &sdkCollector{series: map[string]prometheus.Collector{}, tenant: opts.TenantLabels, families: map[string]Family{}}
	for _, f := range Families {
		c.families[f.Name] = f
	}
	reg.MustRegister(c)
	return sdkHandler{c: c}
}

// sdkCollector holds every series the SDK handler made. It is an unchecked
// collector (it describes nothing up front): the SDK creates metrics by
// name at run time, and one name may carry different tag sets.
type sdkCollector struct {
	mu       sync.RWMutex
	series   map[string]prometheus.Collector
	tenant   bool
	families map[string]Family
}

func (c *sdkCollector) Describe(chan<- *prometheus.Desc) {}

func (c *sdkCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, s := range c.series {
		s.Collect(ch)
	}
}

type tag struct{ k, v string }

// sdkHandler is a view of the collector with a set of tags (sorted by key).
type sdkHandler struct {
	c    *sdkCollector
	tags []tag
}

func (h sdkHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := slices.Clone(h.tags)
	for k, v := range tags {
		k = sanitizeName(k, false)
		v = strings.ToValidUTF8(v, "?")
		i, found := slices.BinarySearchFunc(merged, k, func(t tag, k string) int { return strings.Compare(t.k, k) })
		if found {
			merged[i].v = v
		} else {
			merged = slices.Insert(merged, i, tag{k, v})
		}
	}
	return sdkHandler{c: h.c, tags: merged}
}

func (h sdkHandler) Counter(name string) client.MetricsCounter {
	m, ok := h.get(name, Counter).(prometheus.Counter)
	if !ok {
		return nop{}
	}
	return counter{m}
}

func (h sdkHandler) Gauge(name string) client.MetricsGauge {
	m, ok := h.get(name, Gauge).(prometheus.Gauge)
	if !ok {
		return nop{}
	}
	return gauge{m}
}

func (h sdkHandler) Timer(name string) client.MetricsTimer {
	m, ok := h.get(name, Histogram).(prometheus.Histogram)
	if !ok {
		return nop{}
	}
	return timer{m}
}

// get returns the series of name with the handler's tags, creating it
// once; nil when name is a family of another type (a bug caught by the
// tests, never a panic in a worker).
func (h sdkHandler) get(name string, t Type) prometheus.Collector {
	fam, atelier := h.c.families[name]
	var labels prometheus.Labels
	if atelier {
		if fam.Type != t {
			return nil
		}
		labels = prometheus.Labels{}
		for _, l := range fam.LabelNames(h.c.tenant) {
			labels[l] = h.tag(l)
		}
	} else {
		fam = sdkFamily(name, t)
		labels = make(prometheus.Labels, len(h.tags))
		for _, tg := range h.tags {
			labels[tg.k] = tg.v
		}
	}
	key := seriesKey(fam.Name, labels)
	h.c.mu.RLock()
	s, ok := h.c.series[key]
	h.c.mu.RUnlock()
	if ok {
		return s
	}
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	if s, ok := h.c.series[key]; ok {
		return s
	}
	switch t {
	case Counter:
		s = prometheus.NewCounter(prometheus.CounterOpts{Name: fam.Name, Help: fam.Help, ConstLabels: labels})
	case Gauge:
		s = prometheus.NewGauge(prometheus.GaugeOpts{Name: fam.Name, Help: fam.Help, ConstLabels: labels})
	default:
		s = prometheus.NewHistogram(prometheus.HistogramOpts{Name: fam.Name, Help: fam.Help, ConstLabels: labels, Buckets: fam.buckets()})
	}
	h.c.series[key] = s
	return s
}

func (h sdkHandler) tag(k string) string {
	i, found := slices.BinarySearchFunc(h.tags, k, func(t tag, k string) int { return strings.Compare(t.k, k) })
	if !found {
		return ""
	}
	return h.tags[i].v
}

// sdkFamily names one of the SDK's own metrics the way its Prometheus
// export usually does.
func sdkFamily(name string, t Type) Family {
	name = sanitizeName(name, true)
	f := Family{Name: name, Type: t, Buckets: sdkBuckets}
	switch t {
	case Counter:
		if !strings.HasSuffix(name, "_total") {
			f.Name += "_total"
		}
		f.Help = "Temporal Go SDK counter " + name + "."
	case Gauge:
		f.Help = "Temporal Go SDK gauge " + name + "."
	default:
		if !strings.HasSuffix(name, "_seconds") {
			f.Name += "_seconds"
		}
		f.Help = "Temporal Go SDK timer " + name + ", in seconds."
	}
	return f
}

func seriesKey(name string, labels prometheus.Labels) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
	}
	return b.String()
}

// sanitizeName keeps what Prometheus accepts in a metric name (colons
// allowed) or a label name: letters, digits, underscores, not starting
// with a digit.
func sanitizeName(s string, metric bool) string {
	ok := func(i int, r rune) bool {
		return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9') || (metric && r == ':')
	}
	clean := true
	for i, r := range s {
		if !ok(i, r) {
			clean = false
			break
		}
	}
	if clean && s != "" {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if ok(i, r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

type counter struct{ c prometheus.Counter }

func (c counter) Inc(d int64) {
	if d > 0 { // a Prometheus counter never goes down
		c.c.Add(float64(d))
	}
}

type gauge struct{ g prometheus.Gauge }

func (g gauge) Update(v float64) { g.g.Set(v) }

type timer struct{ h prometheus.Histogram }

func (t timer) Record(d time.Duration) { t.h.Observe(d.Seconds()) }

type nop struct{}

func (nop) Inc(int64)            {}
func (nop) Update(float64)       {}
func (nop) Record(time.Duration) {}
