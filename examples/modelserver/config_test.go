package modelserver

import (
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestEnvThenFlags(t *testing.T) {
	env := map[string]string{
		EnvBackend: "triton", EnvModel: "bert", EnvModelVersion: "4", EnvRevision: "r1",
		EnvStartupDelay: "3s", EnvServiceTime: "20ms", EnvConcurrency: "8", EnvMaxQueue: "16",
		EnvErrorRate: "0.25", EnvFailAfter: "100", EnvCrashAfter: "1m",
	}
	var cfg Config
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-revision", "r2", "-concurrency", "2", "-backend", "vllm"}); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Backend: BackendVLLM, Model: "bert", ModelVersion: "4", Revision: "r2",
		StartupDelay: 3 * time.Second, ServiceTime: 20 * time.Millisecond, Concurrency: 2, MaxQueue: 16,
		ErrorRate: 0.25, FailAfter: 100, CrashAfter: time.Minute,
	}
	if cfg.Backend != want.Backend || cfg.Model != want.Model || cfg.ModelVersion != want.ModelVersion ||
		cfg.Revision != want.Revision || cfg.StartupDelay != want.StartupDelay || cfg.ServiceTime != want.ServiceTime ||
		cfg.Concurrency != want.Concurrency || cfg.MaxQueue != want.MaxQueue || cfg.ErrorRate != want.ErrorRate ||
		cfg.FailAfter != want.FailAfter || cfg.CrashAfter != want.CrashAfter {
		t.Errorf("config\n got %+v\nwant %+v", cfg, want)
	}
}

func TestBadEnvAndFlags(t *testing.T) {
	for name, val := range map[string]string{
		EnvBackend: "tgi", EnvStartupDelay: "5", EnvConcurrency: "many", EnvErrorRate: "half",
	} {
		var cfg Config
		err := cfg.ApplyEnv(func(k string) (string, bool) { return val, k == name })
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: error %v", name, val, err)
		}
	}
	var cfg Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-backend", "tgi"}); err == nil {
		t.Error("-backend tgi accepted")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero value", Config{}, true},
		{"triton", Config{Backend: BackendTriton, ErrorRate: 1}, true},
		{"unknown backend", Config{Backend: "tgi"}, false},
		{"negative delay", Config{StartupDelay: -1}, false},
		{"negative service time", Config{ServiceTime: -1}, false},
		{"negative concurrency", Config{Concurrency: -1}, false},
		{"negative queue", Config{MaxQueue: -1}, false},
		{"rate above 1", Config{ErrorRate: 1.01}, false},
		{"negative fail-after", Config{FailAfter: -1}, false},
		{"negative crash-after", Config{CrashAfter: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid config")
		}
	}()
	New(Config{ErrorRate: 2})
}

func TestSeparateMetricsListener(t *testing.T) {
	srv := New(Config{Backend: BackendTriton, NoMetricsRoute: true, Model: `we"ird\model`})
	defer srv.Close()
	main, metrics := httptest.NewServer(srv), httptest.NewServer(srv.MetricsHandler())
	defer main.Close()
	defer metrics.Close()
	if r, err := send("GET", main.URL+"/metrics", ""); err != nil || r.status != http.StatusNotFound {
		t.Errorf("main listener /metrics: %v %d", err, r.status)
	}
	r, err := send("GET", metrics.URL+"/metrics", "")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("metrics listener: %v %d", err, r.status)
	}
	m := parseMetrics(t, r.body)
	wantSample(t, m, MetricTritonPending+`{model="we\"ird\\model",version="1"}`, 0)
}
