package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

type metrics struct {
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	runsStarted *prometheus.CounterVec
	statusPolls prometheus.Counter
	streamsOpen prometheus.Gauge
	handler     http.Handler
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{
		requests:    telemetry.HTTPRequests.NewCounterVec(false),
		latency:     telemetry.HTTPRequestDuration.NewHistogramVec(false),
		runsStarted: telemetry.APIRunsStarted.NewCounterVec(false),
		statusPolls: telemetry.StreamStatusPolls.NewCounter(),
		streamsOpen: telemetry.StreamsOpen.NewGauge(),
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.latency, err = register(reg, m.latency); err != nil {
		return nil, err
	}
	if m.runsStarted, err = register(reg, m.runsStarted); err != nil {
		return nil, err
	}
	if m.statusPolls, err = register(reg, m.statusPolls); err != nil {
		return nil, err
	}
	if m.streamsOpen, err = register(reg, m.streamsOpen); err != nil {
		return nil, err
	}
	// A series that cannot be gathered (say, an SDK metric with a bad
	// label value) is left out rather than failing the whole scrape.
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
	return m, nil
}

// register tolerates a second gateway on the same registry (tests, reloads)
// by reusing the collector already there.
func register[C prometheus.Collector](reg *prometheus.Registry, c C) (C, error) {
	c, err := telemetry.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("api: %w", err)
	}
	return c, nil
}

func (m *metrics) observe(method, route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(method, route, code).Inc()
	m.latency.WithLabelValues(method, route, code).Observe(d.Seconds())
}
