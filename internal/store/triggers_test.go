package store_test

import (
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// A run's final status queues one firing per matching enabled trigger
// (pipeline and state, this project only), however often it is mirrored;
// a trigger starts at most maxPerMinute runs a minute (the claim leaves
// the rest waiting); a hook delivery is queued once.
func TestTriggerFirings(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	mustProject(t, s, "q")
	mk := func(project, name, on string, perMin int, states ...runstate.State) catalog.Trigger {
		t.Helper()
		tr, err := s.CreateTrigger(ctx, catalog.Trigger{
			Project: project, Name: name, Kind: catalog.TriggerRun, OnPipeline: on, OnStates: states,
			Pipeline: "eval", Params: map[string]any{"x": "{{ upstream.runId }}"}, MaxPerMinute: perMin, Enabled: true,
		}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	ok := mk("p", "on-ok", "train", 2, runstate.Succeeded)
	mk("p", "on-fail", "train", 60, runstate.Failed)
	mk("p", "other", "prep", 60, runstate.Succeeded)
	mk("q", "other-project", "train", 60, runstate.Succeeded)
	if _, err := s.CreateTrigger(ctx, catalog.Trigger{Project: "p", Name: "on-ok", Kind: catalog.TriggerRun, OnPipeline: "x", Pipeline: "y", Enabled: true}, 10); err == nil {
		t.Fatal("a taken name was stored again")
	}

	for i, id := range []string{"r1", "r2", "r3"} {
		if err := s.MirrorRun(ctx, runStatus(id, 1, runstate.Running)); err != nil {
			t.Fatal(err)
		}
		st := runStatus(id, 2, runstate.Succeeded)
		st.Params = map[string]any{"i": i}
		if err := s.MirrorRun(ctx, st); err != nil {
			t.Fatal(err)
		}
		st.Seq = 3 // mirrored again (a retried write, a reconciler sweep)
		if err := s.MirrorRun(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	claimed, err := s.ClaimTriggerFirings(ctx, "gw", now, now.Add(time.Minute), 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 2 {
		t.Fatalf("claimed %d firings, want the 2 on-ok allows a minute: %+v", len(claimed), claimed)
	}
	for _, c := range claimed {
		if c.TriggerID != ok.ID || c.Trigger != "on-ok" || c.Pipeline != "eval" || c.Params["x"] != "{{ upstream.runId }}" || c.Attempt != 1 {
			t.Fatalf("%+v", c)
		}
		if err := s.RecordTriggerFiring(ctx, catalog.FiringResult{ID: c.ID, Owner: "gw", Attempt: 1, State: catalog.FiringStarted, RunID: "run-of-" + c.Source,
			Params: map[string]any{"x": c.Source}, NextAttemptAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := s.ClaimTriggerFirings(ctx, "gw", now, now.Add(time.Minute), 50); err != nil || len(again) != 0 {
		t.Fatalf("within the minute: %+v, %v", again, err)
	}
	later := now.Add(2 * time.Minute)
	rest, err := s.ClaimTriggerFirings(ctx, "gw", later, later.Add(time.Minute), 50)
	if err != nil || len(rest) != 1 {
		t.Fatalf("a minute later: %+v, %v", rest, err)
	}
	page, err := s.ListTriggerFirings(ctx, ok.ID, 10, "")
	if err != nil || len(page.Firings) != 3 {
		t.Fatalf("log: %+v, %v", page, err)
	}
	started := 0
	for _, f := range page.Firings {
		if f.State == catalog.FiringStarted {
			started++
			if f.RunID != "run-of-"+f.Source || f.Params["x"] != f.Source {
				t.Fatalf("%+v", f)
			}
		}
	}
	if started != 2 {
		t.Fatalf("started %d", started)
	}

	// A hook delivery: queued once, its secret sealed or not, read back
	// only through TriggerSecret.
	h, err := s.CreateTrigger(ctx, catalog.Trigger{Project: "p", Name: "hook", Kind: catalog.TriggerHook, Pipeline: "eval", Secret: "hksec_x", MaxPerMinute: 60, Enabled: true}, 10)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTrigger(ctx, "p", "hook")
	if err != nil || got.Secret != "" {
		t.Fatalf("GetTrigger: %+v, %v", got, err)
	}
	if sec, err := s.TriggerSecret(ctx, got); err != nil || sec != "hksec_x" {
		t.Fatalf("secret %q, %v", sec, err)
	}
	for i, want := range []bool{true, false} {
		queued, err := s.QueueHookFiring(ctx, catalog.TriggerFiring{ID: "fir-h1", TriggerID: h.ID, Project: "p", Source: "d1", Payload: []byte(`{"a":1}`)})
		if err != nil || queued != want {
			t.Fatalf("delivery %d: queued %v, %v", i, queued, err)
		}
	}
	if err := s.DeleteTrigger(ctx, "p", "hook"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTrigger(ctx, "p", "hook"); err == nil {
		t.Fatal("deleted trigger still there")
	}
}
