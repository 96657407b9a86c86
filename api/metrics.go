package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atelier_http_requests_total",
			Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atelier_http_request_duration_seconds",
			Help:    "HTTP request latency by method, route template and status (streams: whole stream).",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route", "status"}),
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atelier_runs_started_total",
			Help: "Runs started through the API, by kind (pipeline or workflow).",
		}, []string{"kind"}),
		statusPolls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atelier_stream_status_polls_total",
			Help: "Status polls made for event and log-follow streams (one per followed run per interval, however many streams follow it).",
		}),
		streamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atelier_streams_open",
			Help: "Event and log-follow streams open now.",
		}),
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
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	return m, nil
}

// register tolerates a second gateway on the same registry (tests, reloads)
// by reusing the collector already there.
func register[C prometheus.Collector](reg *prometheus.Registry, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("api: register metrics: %w", err)
	}
	return c, nil
}

func (m *metrics) observe(method, route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(method, route, code).Inc()
	m.latency.WithLabelValues(method, route, code).Observe(d.Seconds())
}
