package gpu_test

import (
	"testing"

	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/gpu/gpusynth"
)

// BenchmarkSchedule is one decision cycle over 10,000 pending workloads on
// 1,000 nodes (gpusynth.Default); bench/gpusched reports percentiles and
// baselines for the same snapshot.
func BenchmarkSchedule(b *testing.B) {
	s := gpusynth.Snapshot(gpusynth.Default())
	p := gpu.Schedule(s)
	b.ReportMetric(float64(len(p.Admissions)), "admitted/op")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		gpu.Schedule(s)
	}
}

// BenchmarkScheduleEmptyQueue is the fixed cost of a cycle: the same
// fleet and running workloads, nothing pending.
func BenchmarkScheduleEmptyQueue(b *testing.B) {
	s := gpusynth.Snapshot(gpusynth.Default())
	s.Pending = nil
	b.ReportAllocs()
	for b.Loop() {
		gpu.Schedule(s)
	}
}
