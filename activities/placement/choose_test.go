package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	h100 = "NVIDIA-H100-80GB-HBM3"
)

// mk builds a cluster seen `ago` before now (ago < 0: never seen) with the
// given free GPUs per product (total = free + 4) and free CPU.
func mk(name string, ago time.Duration, cpuFree int64, labels map[string]string, gpus map[string]int64) catalog.Cluster {
	c := catalog.Cluster{Name: name, Labels: labels, TaskQueue: activities.TaskQueueForCluster(name)}
	if ago < 0 {
		return c
	}
	seen := now.Add(-ago)
	c.LastSeenAt = &seen
	c.Capacity = &catalog.ClusterCapacity{GPUs: map[string]catalog.ResourceAmount{}, CPUMillis: catalog.ResourceAmount{Total: 64000, Free: cpuFree}, Nodes: 1}
	for p, free := range gpus {
		c.Capacity.GPUs[p] = catalog.ResourceAmount{Total: free + 4, Free: free}
	}
	return c
}

func TestChoose(t *testing.T) {
	fresh, stale := 10*time.Second, 5*time.Minute
	east := mk("east", fresh, 8000, map[string]string{"region": "east", "tier": "gpu"}, map[string]int64{a100: 2, h100: 3})
	west := mk("west", fresh, 16000, map[string]string{"region": "west", "tier": "gpu"}, map[string]int64{a100: 6})
	cpu := mk("cpu", fresh, 60000, map[string]string{"tier": "cpu"}, nil)
	dead := mk("dead", stale, 60000, map[string]string{"tier": "gpu"}, map[string]int64{a100: 100})
	never := mk("never", -1, 0, nil, nil)
	twinA := mk("twin-a", fresh, 4000, nil, map[string]int64{a100: 1})
	twinB := mk("twin-b", fresh, 4000, nil, map[string]int64{a100: 1})
	twinC := mk("twin-c", fresh, 5000, nil, map[string]int64{a100: 1})

	type want struct {
		cluster string
		reason  []string // substrings
		err     []string // substrings of a NoClusterError
	}
	cases := []struct {
		name     string
		clusters []catalog.Cluster
		req      activities.SelectClusterRequest
		want     want
	}{
		{"explicit cluster", []catalog.Cluster{east, west}, req("train", &pipeline.Placement{Cluster: "east"}, 0, ""),
			want{cluster: "east", reason: []string{"named by the placement"}}},
		{"explicit offline cluster is still chosen, with a warning", []catalog.Cluster{east, dead}, req("train", &pipeline.Placement{Cluster: "dead"}, 0, ""),
			want{cluster: "dead", reason: []string{"last reported 5m0s ago"}}},
		{"explicit never-seen cluster", []catalog.Cluster{never}, req("train", &pipeline.Placement{Cluster: "never"}, 0, ""),
			want{cluster: "never", reason: []string{"never reported"}}},
		{"explicit unknown cluster", []catalog.Cluster{east, west}, req("train", &pipeline.Placement{Cluster: "north"}, 0, ""),
			want{err: []string{`"north"`, `step "train"`, "not registered", "registered: east {region=east, tier=gpu}, west"}}},
		{"empty registry", nil, req("train", nil, 2, a100),
			want{err: []string{"no Kubernetes cluster is registered", `"train"`, "needs 2 GPUs of type " + a100}}},
		{"selector matches nothing", []catalog.Cluster{east, west, cpu}, req("etl", &pipeline.Placement{Selector: map[string]string{"tier": "tpu"}}, 0, ""),
			want{err: []string{"no registered cluster has labels {tier=tpu}", `"etl"`, "registered: cpu {tier=cpu}"}}},
		{"selector needs all labels", []catalog.Cluster{east, west}, req("x", &pipeline.Placement{Selector: map[string]string{"tier": "gpu", "region": "west"}}, 0, ""),
			want{cluster: "west", reason: []string{"with labels {region=west, tier=gpu}"}}},
		{"default: most free GPUs of the type", []catalog.Cluster{east, west, cpu}, req("x", nil, 1, a100),
			want{cluster: "west", reason: []string{"most free GPUs of type " + a100 + " (6)"}}},
		{"other type", []catalog.Cluster{east, west, cpu}, req("x", nil, 1, h100),
			want{cluster: "east", reason: []string{"(3)", "skipped without 1 GPU of type " + h100 + ": cpu, west"}}},
		{"any type sums products", []catalog.Cluster{east, mk("w", fresh, 0, nil, map[string]int64{a100: 4})}, req("x", nil, 0, ""),
			want{cluster: "east", reason: []string{"most free GPUs (5)"}}},
		{"no GPUs needed: CPU breaks the GPU tie", []catalog.Cluster{cpu, mk("cpu2", fresh, 1000, nil, nil)}, req("x", nil, 0, ""),
			want{cluster: "cpu", reason: []string{"then free CPU (60000m)"}}},
		{"tie on GPUs: more free CPU wins", []catalog.Cluster{twinA, twinB, twinC}, req("x", nil, 1, a100),
			want{cluster: "twin-c"}},
		{"tie on GPUs and CPU: lowest name", []catalog.Cluster{twinB, twinA}, req("x", nil, 1, a100),
			want{cluster: "twin-a"}},
		{"strategy first: lowest name", []catalog.Cluster{west, east, cpu}, req("x", &pipeline.Placement{Strategy: pipeline.StrategyFirst}, 0, ""),
			want{cluster: "cpu", reason: []string{"first by name of 3 candidate(s)"}}},
		{"strategy first with selector", []catalog.Cluster{west, east, cpu}, req("x", &pipeline.Placement{Strategy: pipeline.StrategyFirst, Selector: map[string]string{"tier": "gpu"}}, 0, ""),
			want{cluster: "east"}},
		{"offline skipped when others are online", []catalog.Cluster{dead, west}, req("x", nil, 1, a100),
			want{cluster: "west", reason: []string{"skipped offline (not seen within 2m0s): dead"}}},
		{"never-seen skipped too", []catalog.Cluster{never, cpu}, req("x", &pipeline.Placement{Strategy: pipeline.StrategyFirst}, 0, ""),
			want{cluster: "cpu", reason: []string{"skipped offline", "never"}}},
		{"all offline: choose among them anyway", []catalog.Cluster{dead, never}, req("x", nil, 0, ""),
			want{cluster: "dead", reason: []string{"no candidate reported within 2m0s"}}},
		{"nobody has enough GPUs: keep everyone (autoscaling)", []catalog.Cluster{east, west}, req("x", nil, 64, a100),
			want{cluster: "west", reason: []string{"most free GPUs"}}},
		{"unknown strategy", []catalog.Cluster{east}, req("x", &pipeline.Placement{Strategy: "random"}, 0, ""),
			want{err: []string{`unknown placement strategy "random"`}}},
		{"missing task queue falls back to the convention", []catalog.Cluster{{Name: "bare"}}, req("x", &pipeline.Placement{Cluster: "bare"}, 0, ""),
			want{cluster: "bare"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Choose(c.clusters, c.req, now)
			if len(c.want.err) > 0 {
				var nc *NoClusterError
				if !errors.As(err, &nc) {
					t.Fatalf("got %+v, %v; want a NoClusterError", res, err)
				}
				for _, s := range c.want.err {
					if !strings.Contains(nc.Msg, s) {
						t.Errorf("error %q lacks %q", nc.Msg, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Cluster != c.want.cluster || res.TaskQueue != activities.TaskQueueForCluster(c.want.cluster) {
				t.Fatalf("chose %+v, want %s", res, c.want.cluster)
			}
			for _, s := range c.want.reason {
				if !strings.Contains(res.Reason, s) {
					t.Errorf("reason %q lacks %q", res.Reason, s)
				}
			}
		})
	}
}

// TestChooseProperties checks, on random registries and requests, the
// invariants the rules promise: the choice matches the selector, is online
// whenever a matching cluster is, does not depend on the registry's order,
// and no eligible cluster beats it under the strategy.
func TestChooseProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	products := []string{a100, h100, ""}
	for iter := range 3000 {
		n := r.IntN(7)
		var cs []catalog.Cluster
		for i := range n {
			labels := map[string]string{}
			if r.IntN(2) == 0 {
				labels["tier"] = []string{"gpu", "cpu"}[r.IntN(2)]
			}
			if r.IntN(2) == 0 {
				labels["region"] = []string{"east", "west"}[r.IntN(2)]
			}
			gpus := map[string]int64{}
			for _, p := range products[:2] {
				if r.IntN(2) == 0 {
					gpus[p] = int64(r.IntN(4))
				}
			}
			ago := time.Duration(r.IntN(300)) * time.Second
			if r.IntN(8) == 0 {
				ago = -1
			}
			cs = append(cs, mk(fmt.Sprintf("c%d", i), ago, int64(r.IntN(3))*1000, labels, gpus))
		}
		p := &pipeline.Placement{}
		if r.IntN(2) == 0 {
			p.Selector = map[string]string{"tier": "gpu"}
		}
		if r.IntN(3) == 0 {
			p.Strategy = pipeline.StrategyFirst
		}
		rq := req("s", p, r.IntN(6), products[r.IntN(3)])

		res, err := Choose(cs, rq, now)
		var matching []catalog.Cluster
		for _, c := range cs {
			if matches(c.Labels, p.Selector) {
				matching = append(matching, c)
			}
		}
		if len(matching) == 0 {
			var nc *NoClusterError
			if !errors.As(err, &nc) {
				t.Fatalf("iter %d: nothing matches but got %+v, %v", iter, res, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		var chosen catalog.Cluster
		for _, c := range matching {
			if c.Name == res.Cluster {
				chosen = c
			}
		}
		if chosen.Name == "" {
			t.Fatalf("iter %d: chose %s, which does not match %v", iter, res.Cluster, p.Selector)
		}

		// Eligible: online if any is, then able to hold the GPUs if any can.
		eligible := matching
		if on, _ := split(eligible, func(c catalog.Cluster) bool { return c.Online(now) }); len(on) > 0 {
			eligible = on
			if !chosen.Online(now) {
				t.Fatalf("iter %d: chose offline %s while %s is online", iter, chosen.Name, on[0].Name)
			}
		}
		if rq.GPUs > 0 {
			if fit, _ := split(eligible, func(c catalog.Cluster) bool { return c.Capacity.TotalGPUs(rq.GPUType) >= int64(rq.GPUs) }); len(fit) > 0 {
				eligible = fit
			}
		}
		for _, c := range eligible {
			if p.Strategy == pipeline.StrategyFirst && c.Name < chosen.Name {
				t.Fatalf("iter %d: first chose %s over %s", iter, chosen.Name, c.Name)
			}
			if p.Strategy == "" && compareFree(c, chosen, rq.GPUType) < 0 {
				t.Fatalf("iter %d: most-free-gpus chose %s over better %s (%s)", iter, chosen.Name, c.Name, res.Reason)
			}
		}

		shuffled := append([]catalog.Cluster(nil), cs...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, err := Choose(shuffled, rq, now); err != nil || again != res {
			t.Fatalf("iter %d: order changed the choice: %+v vs %+v (%v)", iter, again, res, err)
		}
	}
}

func req(step string, p *pipeline.Placement, gpus int, gpuType string) activities.SelectClusterRequest {
	return activities.SelectClusterRequest{Project: "vision", Step: step, Placement: p, GPUs: gpus, GPUType: gpuType}
}
