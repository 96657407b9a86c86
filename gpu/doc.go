// Package gpu will hold GPU capacity management: GPU pools by type (from
// node labels such as nvidia.com/gpu.product and allocatable nvidia.com/gpu),
// per-project quotas, an admission queue with priority, preemption, fair
// share and starvation aging, with pipelines waiting durably for capacity
// (step state WAITING_FOR_GPU) instead of holding pods.
//
// Not implemented yet: nothing in Atelier consults this package today. See
// the README's "Not yet" list.
package gpu
