package modelserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

// Faults is the body of POST /admin/faults: every field is optional and
// only the fields present change. Unknown fields are rejected, so a typo
// fails the test that made it.
type Faults struct {
	// ErrorRate sets the fraction of inference requests answered 500 and
	// restarts the failure pattern (see Config.ErrorRate).
	ErrorRate *float64 `json:"error_rate,omitempty"`
	// FailNext makes the next N requests to reach a running slot fail with
	// 500, before the error rate applies again: a 5xx burst.
	FailNext *int `json:"fail_next,omitempty"`
	// ServiceTime applies to requests that start running from now on.
	ServiceTime *schema.Duration `json:"service_time,omitempty"`
	// Concurrency resizes the running slots; raising it starts queued
	// requests at once, lowering it lets running ones finish.
	Concurrency *int `json:"concurrency,omitempty"`
	// MaxQueue bounds the FIFO from now on (0: unbounded); requests already
	// waiting stay.
	MaxQueue *int `json:"max_queue,omitempty"`
	// Loaded forces readiness up (true) or down (false), overriding the
	// startup delay, until StartupDelay is set again.
	Loaded *bool `json:"loaded,omitempty"`
	// StartupDelay simulates a model reload: not ready for this long from
	// now (clears Loaded).
	StartupDelay *schema.Duration `json:"startup_delay,omitempty"`
	// FailAfter crashes the server after N more answered inference
	// requests; 0 disarms.
	FailAfter *int `json:"fail_after,omitempty"`
	// CrashAfter crashes the server this long from now; 0 disarms.
	CrashAfter *schema.Duration `json:"crash_after,omitempty"`
}

// FaultState answers GET and POST /admin/faults: the knobs in force.
type FaultState struct {
	Backend     Backend         `json:"backend"`
	Model       string          `json:"model"`
	Revision    string          `json:"revision,omitempty"`
	Loaded      bool            `json:"loaded"`
	ErrorRate   float64         `json:"error_rate"`
	FailNext    int             `json:"fail_next"`
	ServiceTime schema.Duration `json:"service_time"`
	Concurrency int             `json:"concurrency"`
	MaxQueue    int             `json:"max_queue"`
	FailAfter   int             `json:"fail_after"`        // answers left before a crash, 0: disarmed
	CrashAt     time.Time       `json:"crash_at,omitzero"` // absent: no crash timer
	Running     int             `json:"running"`
	Waiting     int             `json:"waiting"`
	Succeeded   uint64          `json:"succeeded"`
	Failed      uint64          `json:"failed"`
	Rejected    uint64          `json:"rejected"`
}

func (f Faults) validate() error {
	var errs []error
	if f.ErrorRate != nil {
		errs = append(errs, validateKnobs(0, 0, 0, *f.ErrorRate))
	}
	if f.ServiceTime != nil {
		errs = append(errs, validateKnobs(time.Duration(*f.ServiceTime), 0, 0, 0))
	}
	if f.Concurrency != nil {
		if *f.Concurrency < 1 {
			errs = append(errs, fmt.Errorf("%w: concurrency %d must be at least 1", ErrInvalidConfig, *f.Concurrency))
		}
	}
	if f.MaxQueue != nil {
		errs = append(errs, validateKnobs(0, 0, *f.MaxQueue, 0))
	}
	negInt := func(name string, v *int) {
		if v != nil && *v < 0 {
			errs = append(errs, fmt.Errorf("%w: %s %d is negative", ErrInvalidConfig, name, *v))
		}
	}
	negDur := func(name string, v *schema.Duration) {
		if v != nil && *v < 0 {
			errs = append(errs, fmt.Errorf("%w: %s %s is negative", ErrInvalidConfig, name, time.Duration(*v)))
		}
	}
	negInt("fail_next", f.FailNext)
	negInt("fail_after", f.FailAfter)
	negDur("startup_delay", f.StartupDelay)
	negDur("crash_after", f.CrashAfter)
	return errors.Join(errs...)
}

// SetFaults applies f as POST /admin/faults would.
func (s *Server) SetFaults(f Faults) (FaultState, error) {
	if err := f.validate(); err != nil {
		return FaultState{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.ErrorRate != nil {
		s.setErrorRateLocked(*f.ErrorRate)
	}
	if f.FailNext != nil {
		s.failNext = *f.FailNext
	}
	if f.ServiceTime != nil {
		s.serviceTime = time.Duration(*f.ServiceTime)
	}
	if f.Concurrency != nil {
		s.concurrency = *f.Concurrency
		s.dispatchLocked()
	}
	if f.MaxQueue != nil {
		s.maxQueue = *f.MaxQueue
	}
	if f.StartupDelay != nil {
		s.forced = nil
		s.loadedAt = s.cfg.Clock.Now().Add(time.Duration(*f.StartupDelay))
	}
	if f.Loaded != nil {
		v := *f.Loaded
		s.forced = &v
	}
	if f.FailAfter != nil {
		s.failAfter = *f.FailAfter
	}
	if f.CrashAfter != nil {
		s.armCrashLocked(time.Duration(*f.CrashAfter))
	}
	st := s.faultStateLocked()
	s.cfg.Logger.Info("faults changed", "state", st)
	return st, nil
}

// FaultState returns the knobs in force.
func (s *Server) FaultState() FaultState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faultStateLocked()
}

func (s *Server) faultStateLocked() FaultState {
	return FaultState{
		Backend: s.cfg.Backend, Model: s.cfg.Model, Revision: s.cfg.Revision,
		Loaded: s.loadedLocked(), ErrorRate: s.errorRate, FailNext: s.failNext,
		ServiceTime: schema.Duration(s.serviceTime), Concurrency: s.concurrency, MaxQueue: s.maxQueue,
		FailAfter: s.failAfter, CrashAt: s.crashAt,
		Running: s.running, Waiting: len(s.queue),
		Succeeded: s.m.succeeded(), Failed: s.m.failed, Rejected: s.m.rejected,
	}
}

func (s *Server) getFaults(w http.ResponseWriter, _ *http.Request) {
	respond(w, http.StatusOK, s.FaultState())
}

func (s *Server) postFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		respond(w, http.StatusBadRequest, map[string]string{"error": "invalid faults body: " + err.Error()})
		return
	}
	st, err := s.SetFaults(f)
	if err != nil {
		respond(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	respond(w, http.StatusOK, st)
}

// PostFaults sends f to the POST /admin/faults endpoint of the fake at
// baseURL (such as "http://127.0.0.1:8000"), for tests that run the fake
// as a process. A nil client means http.DefaultClient.
func PostFaults(ctx context.Context, client *http.Client, baseURL string, f Faults) (FaultState, error) {
	if client == nil {
		client = http.DefaultClient
	}
	body, err := json.Marshal(f)
	if err != nil {
		return FaultState{}, fmt.Errorf("encode faults: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/admin/faults", bytes.NewReader(body))
	if err != nil {
		return FaultState{}, fmt.Errorf("post faults: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return FaultState{}, fmt.Errorf("post faults: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return FaultState{}, fmt.Errorf("post faults: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return FaultState{}, fmt.Errorf("post faults: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var st FaultState
	if err := json.Unmarshal(raw, &st); err != nil {
		return FaultState{}, fmt.Errorf("decode fault state: %w", err)
	}
	return st, nil
}

// LogValue implements slog.LogValuer.
func (st FaultState) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.Bool("loaded", st.Loaded), slog.Float64("error_rate", st.ErrorRate), slog.Int("fail_next", st.FailNext),
		slog.String("service_time", time.Duration(st.ServiceTime).String()), slog.Int("concurrency", st.Concurrency),
		slog.Int("max_queue", st.MaxQueue), slog.Int("fail_after", st.FailAfter),
	}
	if !st.CrashAt.IsZero() {
		attrs = append(attrs, slog.Time("crash_at", st.CrashAt))
	}
	return slog.GroupValue(attrs...)
}
