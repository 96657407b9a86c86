package placement

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

// NoClusterError is Choose's error when no cluster can take the step. The
// activity turns it into a non-retryable activities.ErrTypeNoCluster.
type NoClusterError struct{ Msg string }

func (e *NoClusterError) Error() string { return e.Msg }

func noCluster(format string, args ...any) error {
	return &NoClusterError{Msg: fmt.Sprintf(format, args...)}
}

// maxListed bounds how many clusters an error or reason names, so a large
// registry does not make step messages unreadable.
const maxListed = 10

// Choose picks the cluster for req among the registered clusters at now;
// see the package documentation for the rules. It does not modify clusters.
func Choose(clusters []catalog.Cluster, req activities.SelectClusterRequest, now time.Time) (activities.SelectClusterResult, error) {
	var p pipeline.Placement
	if req.Placement != nil {
		p = *req.Placement
	}
	// Sorted by name so every rule below, and every message, is
	// deterministic whatever order the registry returned.
	all := slices.Clone(clusters)
	slices.SortFunc(all, func(a, b catalog.Cluster) int { return strings.Compare(a.Name, b.Name) })

	if p.Cluster != "" {
		for _, c := range all {
			if c.Name == p.Cluster {
				reason := fmt.Sprintf("cluster %s named by the placement", c.Name)
				if !c.Online(now) {
					reason += fmt.Sprintf("; warning: its worker %s, so the step waits until it is back", lastSeen(c, now))
				}
				return result(c, reason), nil
			}
		}
		return activities.SelectClusterResult{}, noCluster("cluster %q named by the placement of step %q is not registered%s",
			p.Cluster, req.Step, registered(all))
	}

	strategy := p.Strategy
	if strategy == "" {
		strategy = pipeline.StrategyMostFreeGPUs
	}
	if strategy != pipeline.StrategyMostFreeGPUs && strategy != pipeline.StrategyFirst {
		return activities.SelectClusterResult{}, noCluster("unknown placement strategy %q for step %q; use %s or %s",
			strategy, req.Step, pipeline.StrategyMostFreeGPUs, pipeline.StrategyFirst)
	}

	var cands []catalog.Cluster
	for _, c := range all {
		if matches(c.Labels, p.Selector) {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		if len(all) == 0 {
			return activities.SelectClusterResult{}, noCluster("no Kubernetes cluster is registered to run step %q%s; start `atelier worker --cluster NAME` in a cluster",
				req.Step, needs(req))
		}
		return activities.SelectClusterResult{}, noCluster("no registered cluster has labels %s for step %q%s%s",
			formatLabels(p.Selector), req.Step, needs(req), registered(all))
	}

	var notes []string
	// Online first: a dead worker runs nothing, whatever its last capacity.
	online, offline := split(cands, func(c catalog.Cluster) bool { return c.Online(now) })
	switch {
	case len(online) == 0:
		notes = append(notes, fmt.Sprintf("no candidate reported within %s, chose among all", catalog.ClusterOnlineWindow))
	case len(offline) > 0:
		notes = append(notes, fmt.Sprintf("skipped offline (not seen within %s): %s", catalog.ClusterOnlineWindow, names(offline)))
		cands = online
	}
	if req.GPUs > 0 {
		fit, short := split(cands, func(c catalog.Cluster) bool { return c.Capacity.TotalGPUs(req.GPUType) >= int64(req.GPUs) })
		if len(fit) > 0 && len(short) > 0 {
			notes = append(notes, fmt.Sprintf("skipped without %s: %s", gpuWords(int64(req.GPUs), req.GPUType), names(short)))
			cands = fit
		}
	}

	var chosen catalog.Cluster
	var reason string
	scope := fmt.Sprintf("%d candidate(s)", len(cands))
	if len(p.Selector) > 0 {
		scope += " with labels " + formatLabels(p.Selector)
	}
	switch strategy {
	case pipeline.StrategyFirst:
		chosen = cands[0] // sorted by name
		reason = fmt.Sprintf("first by name of %s", scope)
	default:
		chosen = slices.MinFunc(cands, func(a, b catalog.Cluster) int { return compareFree(a, b, req.GPUType) })
		reason = fmt.Sprintf("most free GPUs%s (%d) of %s", typeWords(req.GPUType), chosen.Capacity.FreeGPUs(req.GPUType), scope)
		if len(cands) > 1 {
			reason += fmt.Sprintf(", then free CPU (%dm), then name", freeCPU(chosen))
		}
	}
	if len(notes) > 0 {
		reason += "; " + strings.Join(notes, "; ")
	}
	return result(chosen, reason), nil
}

// compareFree orders a before b when a has more free GPUs of the type, then
// more free CPU, then the lower name.
func compareFree(a, b catalog.Cluster, gpuType string) int {
	if ga, gb := a.Capacity.FreeGPUs(gpuType), b.Capacity.FreeGPUs(gpuType); ga != gb {
		if ga > gb {
			return -1
		}
		return 1
	}
	if ca, cb := freeCPU(a), freeCPU(b); ca != cb {
		if ca > cb {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Name, b.Name)
}

func freeCPU(c catalog.Cluster) int64 {
	if c.Capacity == nil {
		return 0
	}
	return c.Capacity.CPUMillis.Free
}

func result(c catalog.Cluster, reason string) activities.SelectClusterResult {
	q := c.TaskQueue
	if q == "" { // registered by hand without one; the convention is fixed
		q = activities.TaskQueueForCluster(c.Name)
	}
	return activities.SelectClusterResult{Cluster: c.Name, TaskQueue: q, Reason: reason}
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func split(cs []catalog.Cluster, keep func(catalog.Cluster) bool) (yes, no []catalog.Cluster) {
	for _, c := range cs {
		if keep(c) {
			yes = append(yes, c)
		} else {
			no = append(no, c)
		}
	}
	return yes, no
}

func lastSeen(c catalog.Cluster, now time.Time) string {
	if c.LastSeenAt == nil {
		return "has never reported"
	}
	return fmt.Sprintf("last reported %s ago", now.Sub(*c.LastSeenAt).Truncate(time.Second))
}

// needs describes the step's GPU request for messages.
func needs(req activities.SelectClusterRequest) string {
	if req.GPUs <= 0 {
		return ""
	}
	return " (needs " + gpuWords(int64(req.GPUs), req.GPUType) + ")"
}

func gpuWords(n int64, gpuType string) string {
	s := fmt.Sprintf("%d GPU", n)
	if n != 1 {
		s += "s"
	}
	return s + typeWords(gpuType)
}

func typeWords(gpuType string) string {
	if gpuType == "" {
		return ""
	}
	return " of type " + gpuType
}

// registered lists the registry for an error message.
func registered(all []catalog.Cluster) string {
	if len(all) == 0 {
		return "; no cluster is registered"
	}
	parts := make([]string, 0, min(len(all), maxListed))
	for i, c := range all {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(all)-maxListed))
			break
		}
		parts = append(parts, c.Name+" "+formatLabels(c.Labels))
	}
	return "; registered: " + strings.Join(parts, ", ")
}

func names(cs []catalog.Cluster) string {
	parts := make([]string, 0, min(len(cs), maxListed))
	for i, c := range cs {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(cs)-maxListed))
			break
		}
		parts = append(parts, c.Name)
	}
	return strings.Join(parts, ", ")
}

// formatLabels renders labels as {k=v, ...} with sorted keys.
func formatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return "{" + strings.Join(keys, ", ") + "}"
}
