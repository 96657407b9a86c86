package inference

import (
	"testing"
	"time"
)

// A registered model is enough for vLLM; the engine answers to the
// model's name, and a revision that resolves to another version changes
// what replicas run (a rollout), while the same version does not.
func TestRegisteredModelRevisions(t *testing.T) {
	spec := vllmSpec()
	spec.Model = Model{Ref: "sentiment@champion", Follow: true,
		Registered: &RegisteredModel{Model: "sentiment", Version: 3, Alias: "champion", Digest: "sha256:aa"}}
	if err := Validate(spec); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got := spec.Model.Served(); got != "sentiment" {
		t.Errorf("Served = %q, want the model's name", got)
	}
	loc := spec.Model.Located("/data/models/p/aa")
	if loc.URI != "/data/models/p/aa" || loc.Name != "sentiment" {
		t.Errorf("Located = %+v, want the path served under the model's name", loc)
	}
	now := time.Unix(0, 0)
	r1, _, err := NextRevision(nil, spec, now)
	if err != nil {
		t.Fatal(err)
	}
	same := spec
	same.Replicas = ReplicaRange{Min: ptr(1), Max: 6}
	r2, made, err := NextRevision(&r1, same, now)
	if err != nil || !made || r2.NeedsRollout(r1) {
		t.Errorf("same version, other replicas: made %v, rollout %v, err %v; want a revision applied in place", made, r2.NeedsRollout(r1), err)
	}
	next := spec
	reg := *spec.Model.Registered
	reg.Version, reg.Digest = 4, "sha256:bb"
	next.Model.Registered = &reg
	r3, made, err := NextRevision(&r1, next, now)
	if err != nil || !made || !r3.NeedsRollout(r1) {
		t.Errorf("another version: made %v, rollout %v, err %v; want a rollout", made, r3.NeedsRollout(r1), err)
	}
}
