package enginemetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/inference"
)

func TestParse(t *testing.T) {
	text := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 3
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="m"} 2
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 5
vllm:e2e_request_latency_seconds_sum{model_name="m"} 4.5
vllm:e2e_request_latency_seconds_count{model_name="m"} 5
# TYPE rpc summary
rpc{quantile="0.99"} NaN
rpc_sum 1
rpc_count 2
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="r",version="1"} 7
`
	got, err := Parse(strings.NewReader(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []inference.Sample{
		{Name: "nv_inference_request_failure", Labels: `model="r",version="1"`, Value: 7},
		{Name: "rpc_count", Value: 2},
		{Name: "rpc_sum", Value: 1},
		{Name: "vllm:e2e_request_latency_seconds_bucket", Labels: `le="+Inf",model_name="m"`, Value: 5},
		{Name: "vllm:e2e_request_latency_seconds_bucket", Labels: `le="0.5",model_name="m"`, Value: 2},
		{Name: "vllm:e2e_request_latency_seconds_count", Labels: `model_name="m"`, Value: 5},
		{Name: "vllm:e2e_request_latency_seconds_sum", Labels: `model_name="m"`, Value: 4.5},
		{Name: "vllm:num_requests_waiting", Labels: `engine="0",model_name="m"`, Value: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	if _, err := Parse(strings.NewReader("not metrics {"), nil); err == nil {
		t.Error("garbage parsed")
	}
}

func TestFetchKeepsTheQueueFamilies(t *testing.T) {
	body := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1
# TYPE vllm:e2e_request_latency_seconds_sum counter
vllm:e2e_request_latency_seconds_sum 4
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	info, _ := inference.Info(inference.BackendVLLM)
	got, err := Fetch(context.Background(), srv.Client(), srv.URL+"/metrics", 0, QueueFamilies(nil, info))
	if err != nil {
		t.Fatal(err)
	}
	want := []inference.Sample{
		{Name: "vllm:num_requests_running", Labels: `model_name="m"`, Value: 1},
		{Name: "vllm:num_requests_waiting", Labels: `model_name="m"`, Value: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	if _, err := Fetch(context.Background(), srv.Client(), srv.URL+"/nope", 0, nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 scrape: got %v", err)
	}
}
