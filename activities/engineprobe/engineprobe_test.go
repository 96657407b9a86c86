package engineprobe_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/atelier-ml/atelier/activities/engineprobe"
	"github.com/atelier-ml/atelier/inference"
)

// Probes go to the replicas in turn with the engine's own request; 5xx
// answers are errors; a replica nobody can reach is no sample at all.
func TestSendCountsAnswersOnly(t *testing.T) {
	var calls atomic.Int32
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/completions" {
			http.Error(w, "bad probe "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
		}
	}))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()

	got := engineprobe.Send(t.Context(), http.DefaultClient, inference.BackendVLLM, "tiny", []string{ok.URL, failing.URL, dead.URL}, 9)
	if got.Requests != 6 || got.Errors != 3 || got.Latency.Total() != 6 {
		t.Errorf("counted %+v, want 6 requests (3 unreachable left out), 3 errors", got)
	}
	if calls.Load() != 3 {
		t.Errorf("the healthy replica got %d probes, want its turn: 3", calls.Load())
	}
	if n := engineprobe.Send(t.Context(), http.DefaultClient, inference.BackendVLLM, "tiny", []string{ok.URL}, 1000).Requests; n != engineprobe.MaxPerCall {
		t.Errorf("a large ask sent %d, want the cap %d", n, engineprobe.MaxPerCall)
	}

	triton := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/v2/models/resnet/ready") {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer triton.Close()
	if got := engineprobe.Send(t.Context(), http.DefaultClient, inference.BackendTriton, "resnet", []string{triton.URL}, 2); got.Requests != 2 || got.Errors != 0 {
		t.Errorf("triton: %+v", got)
	}
}
