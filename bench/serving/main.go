// Command serving measures the inference endpoint workflow's reactions on
// the real stack (a Temporal dev server, the real worker running
// atelier.Endpoint), with a fake runtime serving its activities in the
// same process: replicas are ready as soon as they are asked for, report
// the load they are given and crash-loop on demand. It isolates what
// Atelier adds to an engine's own start-up:
//
//   - autoscaler reaction: from the moment a queue appears on the replicas
//     to the scale-up decision, against the workflow's tick (the floor a
//     ticking decider pays; Knative ticks every 2 s, KEDA polls every
//     15–30 s);
//   - decision → replica ready, Atelier's part: from the decision to the
//     replica reported ready (the fake starts it instantly);
//   - rollback detection for a hard failure: from the first observation
//     of a crash-looping candidate to the rollback.
//
// See bench/doc.go and docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/schema"
	"github.com/atelier-ml/atelier/workflows/endpoint"
)

// Targets of the issue, printed next to the figures (never asserted).
const (
	targetReaction = 10 * time.Second
	targetReady    = 5 * time.Second
	targetRollback = 2 * time.Minute
)

func main() {
	rounds := flag.Int("rounds", 10, "scale-up reactions measured")
	rollbacks := flag.Int("rollbacks", 5, "crash-looping rollouts measured")
	quick := flag.Bool("quick", false, "smoke run: -rounds 3 -rollbacks 2")
	flag.Parse()
	if *quick {
		*rounds, *rollbacks = 3, 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *rounds, *rollbacks); err != nil {
		fmt.Fprintln(os.Stderr, "serving:", err)
		os.Exit(1)
	}
}

// runtime is the fake where endpoints run: wall-clock times of what it saw.
type runtime struct {
	mu       sync.Mutex
	replicas map[int]int
	load     float64
	crashing map[int]bool
	// when a revision first had n replicas applied, and first reported
	// crash-looping.
	appliedAt  map[[2]int]time.Time
	crashSeen  map[int]time.Time
	queueSince time.Time
}

func newRuntime() *runtime {
	return &runtime{replicas: map[int]int{}, crashing: map[int]bool{}, appliedAt: map[[2]int]time.Time{}, crashSeen: map[int]time.Time{}}
}

func (f *runtime) observe(_ context.Context, req activities.ObserveEndpointRequest) (activities.ObserveEndpointResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	out := activities.ObserveEndpointResult{At: now}
	total := 0
	for _, n := range f.replicas {
		total += n
	}
	for _, rev := range req.Revisions {
		n := f.replicas[rev]
		o := activities.RevisionObservation{Revision: rev, Replicas: n}
		if f.crashing[rev] && n > 0 {
			o.Status.CrashLooping = n
			if _, ok := f.crashSeen[rev]; !ok {
				f.crashSeen[rev] = now
			}
		} else {
			o.Status.Ready = n
			for i := range n {
				o.Queue = append(o.Queue, inference.Observation{At: now, Replica: fmt.Sprintf("r%d-%d", rev, i),
					Signal: inference.QueueSignal{Running: f.load / float64(max(total, 1)), Known: true}})
			}
		}
		out.Revisions = append(out.Revisions, o)
	}
	return out, nil
}

func (f *runtime) apply(_ context.Context, req activities.ApplyEndpointLayoutRequest) (activities.ApplyEndpointLayoutResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range req.Revisions {
		f.replicas[r.Revision] = r.Replicas
		if _, ok := f.appliedAt[[2]int{r.Revision, r.Replicas}]; !ok {
			f.appliedAt[[2]int{r.Revision, r.Replicas}] = time.Now()
		}
	}
	return activities.ApplyEndpointLayoutResult{TrafficMode: "fake"}, nil
}

func (f *runtime) deleteRevisions(_ context.Context, req activities.DeleteEndpointRevisionsRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range req.Revisions {
		delete(f.replicas, r)
	}
	return nil
}

func (f *runtime) deleteEndpoint(context.Context, activities.EndpointRef) error { return nil }

func spec(image string) inference.EndpointSpec {
	minR := 1
	return inference.EndpointSpec{
		Backend: inference.BackendVLLM, Model: inference.Model{Name: "tiny"}, Image: image,
		Replicas: inference.ReplicaRange{Min: &minR, Max: 4},
		Autoscaling: inference.Autoscaling{TargetQueuePerReplica: 10, StableWindow: schema.Duration(10 * time.Second),
			ScaleDownDelay: schema.DurationPtr(2 * time.Second)},
		Rollout: inference.RolloutSettings{Gates: inference.GateSettings{MaxErrorRate: 1, AnalysisInterval: schema.Duration(time.Second)}},
	}
}

func run(ctx context.Context, rounds, rollbacks int) error {
	rt := newRuntime()
	st, err := benchstack.Start(ctx, benchstack.Options{Name: "serving", Worker: true, Register: func(r worker.Registry) {
		r.RegisterActivityWithOptions(rt.observe, activity.RegisterOptions{Name: activities.ObserveEndpointName})
		r.RegisterActivityWithOptions(rt.apply, activity.RegisterOptions{Name: activities.ApplyEndpointLayoutName})
		r.RegisterActivityWithOptions(rt.deleteRevisions, activity.RegisterOptions{Name: activities.DeleteEndpointRevisionsName})
		r.RegisterActivityWithOptions(rt.deleteEndpoint, activity.RegisterOptions{Name: activities.DeleteEndpointName})
	}})
	if err != nil {
		return err
	}
	defer st.Close()
	st.Info.Print(os.Stdout)
	id := activities.EndpointWorkflowID("bench", "chat")
	if _, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: st.Cfg.TaskQueue},
		activities.EndpointWorkflowName, activities.EndpointInput{Project: "bench", Name: "chat", Spec: spec("img:1"), TaskQueue: st.Cfg.TaskQueue}); err != nil {
		return err
	}
	status := func() (activities.EndpointStatus, error) {
		var s activities.EndpointStatus
		v, err := st.Client.QueryWorkflow(ctx, id, "", activities.QueryEndpointStatus)
		if err == nil {
			err = v.Get(&s)
		}
		return s, err
	}
	waitFor := func(what string, cond func(activities.EndpointStatus) bool) (activities.EndpointStatus, error) {
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			s, err := status()
			if err == nil && cond(s) {
				return s, nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return activities.EndpointStatus{}, fmt.Errorf("timed out waiting for %s", what)
	}
	replicasOf := func(s activities.EndpointStatus) int {
		for _, r := range s.Replicas {
			if r.Revision == s.Stable {
				return r.Replicas
			}
		}
		return 0
	}
	if _, err := waitFor("revision 1 serving", func(s activities.EndpointStatus) bool { return s.Stable == 1 && s.Rollout == nil }); err != nil {
		return err
	}
	fmt.Printf("tick: %s (the workflow observes and decides every tick)\n\n", endpoint.DefaultTick)

	// 1 and 2: a queue appears (load 35 at a target of 10 per replica:
	// 4 replicas); then it goes away and the endpoint returns to 1.
	var reactions, readies []time.Duration
	for i := range rounds {
		benchstack.Logf("reaction round %d", i+1)
		rt.mu.Lock()
		rt.load = 35
		appeared := time.Now()
		rt.mu.Unlock()
		s, err := waitFor("scale-up", func(s activities.EndpointStatus) bool { return replicasOf(s) >= 2 })
		if err != nil {
			return err
		}
		var decided time.Time
		for _, e := range s.Events {
			if e.Kind == "ScaleDecided" && e.At.After(appeared) {
				decided = e.At
				break
			}
		}
		reactions = append(reactions, decided.Sub(appeared))
		rt.mu.Lock()
		applied := rt.appliedAt[[2]int{s.Stable, replicasOf(s)}]
		rt.mu.Unlock()
		// The fake's replicas are ready when applied; the workflow sees
		// them at its next observation, which is when "ready" counts.
		readyAt, err := waitFor("replicas seen ready", func(x activities.EndpointStatus) bool {
			for _, o := range x.Observed {
				if o.Revision == x.Stable && o.Status.Ready >= replicasOf(s) {
					return true
				}
			}
			return false
		})
		if err != nil {
			return err
		}
		_ = readyAt
		readies = append(readies, applied.Sub(decided))
		rt.mu.Lock()
		rt.load = 0
		rt.appliedAt = map[[2]int]time.Time{}
		rt.mu.Unlock()
		if _, err := waitFor("scale-down", func(s activities.EndpointStatus) bool { return replicasOf(s) == 1 }); err != nil {
			return err
		}
	}
	rs, ds := benchstack.Summarize(reactions), benchstack.Summarize(readies)
	tick := endpoint.DefaultTick
	fmt.Printf("autoscaler reaction, queue appears → scale-up decided, %d rounds: p50 %s, p90 %s, max %s ms; %.2f× the tick at p50 (target ≤ %s: %s)\n",
		rs.N, benchstack.Ms(rs.P50), benchstack.Ms(rs.P90), benchstack.Ms(rs.Max), float64(rs.P50)/float64(tick), targetReaction, benchstack.Verdict(rs.Max <= targetReaction))
	fmt.Printf("decision → replicas applied (Atelier's part of decision → ready), %d rounds: p50 %s, p90 %s, max %s ms (target ≤ %s: %s)\n\n",
		ds.N, benchstack.Ms(ds.P50), benchstack.Ms(ds.P90), benchstack.Ms(ds.Max), targetReady, benchstack.Verdict(ds.Max <= targetReady))

	// 3: a revision whose replicas crash-loop is rolled back.
	var detections []time.Duration
	for i := range rollbacks {
		benchstack.Logf("rollback round %d", i+1)
		cur, err := status()
		if err != nil {
			return err
		}
		next := cur.Current + 1
		rt.mu.Lock()
		rt.crashing[next] = true
		rt.mu.Unlock()
		h, err := st.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: activities.UpdateEndpointSpec,
			Args: []any{spec(fmt.Sprintf("img:crash-%d", i))}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		s, err := waitFor("rollback", func(s activities.EndpointStatus) bool { return s.Current == next && s.Rollout == nil })
		if err != nil {
			return err
		}
		var rolledBack time.Time
		for _, e := range s.Events {
			if e.Kind == "RolloutRollBack" && e.Revision == next {
				rolledBack = e.At
			}
		}
		rt.mu.Lock()
		seen := rt.crashSeen[next]
		rt.mu.Unlock()
		if rolledBack.IsZero() || seen.IsZero() {
			return fmt.Errorf("revision %d: no rollback recorded (events %+v)", next, s.Events)
		}
		detections = append(detections, rolledBack.Sub(seen))
	}
	dd := benchstack.Summarize(detections)
	fmt.Printf("rollback of a crash-looping revision, first crash observed → rolled back, %d rollouts: p50 %s, max %s ms (target ≤ %s: %s)\n",
		dd.N, benchstack.Ms(dd.P50), benchstack.Ms(dd.Max), targetRollback, benchstack.Verdict(dd.Max <= targetRollback))
	return nil
}
