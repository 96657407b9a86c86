package inference

import (
	"time"

	"github.com/atelier-ml/atelier/gpu"
)

const (
	a100 gpu.Resource = "NVIDIA-A100-SXM4-80GB"
	h100 gpu.Resource = "NVIDIA-H100-80GB-HBM3"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// sec is t0 plus n seconds.
func sec(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

func ptr[T any](v T) *T { return &v }

func vllmSpec() EndpointSpec {
	return EndpointSpec{
		Backend:   BackendVLLM,
		Model:     Model{Name: "meta-llama/Llama-3.1-8B-Instruct"},
		Image:     "vllm/vllm-openai:v0.9.1",
		Resources: Resources{GPUType: a100, GPUs: 1},
		Replicas:  ReplicaRange{Min: ptr(1), Max: 4},
	}
}

func tritonSpec() EndpointSpec {
	return EndpointSpec{
		Backend:   BackendTriton,
		Model:     Model{URI: "s3://models/triton", Name: "resnet50"},
		Image:     "nvcr.io/nvidia/tritonserver:25.04-py3",
		Resources: Resources{GPUType: a100, GPUs: 1},
	}
}
