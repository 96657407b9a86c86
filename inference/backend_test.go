package inference

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerArgs(t *testing.T) {
	tests := []struct {
		name string
		spec EndpointSpec
		want []string
	}{
		{"triton", tritonSpec(), []string{"--model-repository=s3://models/triton", "--model-control-mode=explicit", "--load-model=resnet50"}},
		{"vllm by name", vllmSpec(), []string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"}},
		{"vllm from a path with a served name", func() EndpointSpec {
			s := vllmSpec()
			s.Model = Model{URI: "/models/llama", Name: "llama"}
			s.Args = []string{"--max-model-len=8192"}
			return s
		}(), []string{"--model", "/models/llama", "--served-model-name", "llama", "--port", "8000", "--max-model-len=8192"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ContainerArgs(tt.spec)); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackendFacts(t *testing.T) {
	tr, _ := Info(BackendTriton)
	vl, _ := Info(BackendVLLM)
	if tr.ReadinessPath != "/v2/health/ready" || tr.WaitingMetric != "nv_inference_pending_request_count" || tr.MetricsPort != 8002 {
		t.Errorf("triton = %+v", tr)
	}
	if vl.ReadinessPath != "/v1/models" || !vl.ReadinessListsModel || vl.WaitingMetric != "vllm:num_requests_waiting" ||
		vl.RunningMetric != "vllm:num_requests_running" || vl.KVCacheMetrics[0] != "vllm:kv_cache_usage_perc" {
		t.Errorf("vllm = %+v", vl)
	}
	if _, ok := Info("tgi"); ok {
		t.Error("unknown backend has info")
	}
}

func TestModelListed(t *testing.T) {
	body := []byte(`{"object":"list","data":[{"id":"llama","object":"model"},{"id":"other"}]}`)
	if ok, err := ModelListed(body, "llama"); !ok || err != nil {
		t.Errorf("llama listed = %v, %v", ok, err)
	}
	if ok, err := ModelListed(body, "mistral"); ok || err != nil {
		t.Errorf("mistral listed = %v, %v", ok, err)
	}
	if _, err := ModelListed([]byte("Internal Server Error"), "llama"); err == nil {
		t.Error("a non-JSON body is not an error")
	}
}

func TestSignal(t *testing.T) {
	tests := []struct {
		name    string
		backend Backend
		samples []Sample
		want    QueueSignal
	}{{
		name:    "vllm sums series and keeps the highest KV usage",
		backend: BackendVLLM,
		samples: []Sample{
			{Name: "vllm:num_requests_running", Labels: `engine="1"`, Value: 3},
			{Name: "vllm:num_requests_waiting", Labels: `engine="0"`, Value: 2},
			{Name: "vllm:num_requests_running", Labels: `engine="0"`, Value: 5},
			{Name: "vllm:num_requests_waiting", Labels: `engine="1"`, Value: 1},
			{Name: "vllm:gpu_cache_usage_perc", Value: 0.4},
			{Name: "vllm:kv_cache_usage_perc", Value: 0.7},
			{Name: "vllm:prompt_tokens_total", Value: 1e9},
		},
		want: QueueSignal{Waiting: 3, Running: 8, KVCacheUsage: 0.7, Known: true},
	}, {
		name:    "vllm without the running gauge is unknown",
		backend: BackendVLLM,
		samples: []Sample{{Name: "vllm:num_requests_waiting", Value: 4}},
		want:    QueueSignal{},
	}, {
		name:    "NaN counts as absent",
		backend: BackendVLLM,
		samples: []Sample{{Name: "vllm:num_requests_waiting", Value: math.NaN()}, {Name: "vllm:num_requests_running", Value: 1}},
		want:    QueueSignal{},
	}, {
		name:    "triton has no running gauge",
		backend: BackendTriton,
		samples: []Sample{{Name: "nv_inference_pending_request_count", Labels: `model="a"`, Value: 2}, {Name: "nv_inference_pending_request_count", Labels: `model="b"`, Value: 1}},
		want:    QueueSignal{Waiting: 3, Known: true},
	}, {
		name:    "an empty scrape is unknown, not zero",
		backend: BackendTriton,
		want:    QueueSignal{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Signal(tt.backend, tt.samples)); diff != "" {
				t.Errorf("signal (-want +got):\n%s", diff)
			}
		})
	}
}
