// Package gpusynth builds synthetic, reproducible GPU clusters and queues
// for gpu.Schedule's benchmarks (gpu.BenchmarkSchedule, bench/gpusched).
// Same Config and Seed, same snapshot.
package gpusynth
