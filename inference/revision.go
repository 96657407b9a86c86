package inference

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

// ErrRevisionNotFound is returned by Rollback for a revision number that is
// not in the history.
var ErrRevisionNotFound = errors.New("inference: no such revision")

// Revision is one immutable, numbered version of an endpoint's spec.
// Numbers start at 1 and grow by one per revision.
type Revision struct {
	Number int `json:"number"`
	// Spec is the spec with defaults applied: a revision records what it
	// ran, whatever later versions of Atelier default to.
	Spec EndpointSpec `json:"spec"`
	// Digest is "sha256:<hex>" of Spec's canonical JSON; equal digests
	// mean equal specs.
	Digest string `json:"digest"`
	// TemplateDigest covers only what the replicas run (backend, model,
	// image, args, env, resources). Revisions that differ only in
	// replicas, autoscaling or rollout settings share it and need no
	// rollout.
	TemplateDigest string    `json:"templateDigest"`
	Created        time.Time `json:"created"`
	// RollbackOf is the revision whose spec this one restored (0 if none).
	RollbackOf int `json:"rollbackOf,omitempty"`
}

// NeedsRollout reports whether moving from prev to r changes what the
// replicas run, so that new replicas must replace the old ones. When false,
// the caller applies r's replicas, autoscaling and rollout settings in
// place.
func (r Revision) NeedsRollout(prev Revision) bool {
	return r.TemplateDigest != prev.TemplateDigest
}

// Digest returns "sha256:<hex>" of the canonical JSON of the spec with
// defaults applied, so that leaving a field out and setting it to its
// default give the same digest. The JSON is canonical because struct
// fields encode in declaration order, maps (only in pod settings) by
// sorted key, and every optional field is omitted when empty, which keeps digests stable when
// fields are added. It fails only for a spec Validate rejects (NaN).
func Digest(spec EndpointSpec) (string, error) {
	return digestOf(WithDefaults(spec))
}

// template is the part of a spec that replicas run.
type template struct {
	Backend Backend  `json:"backend"`
	Model   Model    `json:"model"`
	Image   string   `json:"image"`
	Args    []string `json:"args,omitempty"`
	Env     []EnvVar `json:"env,omitempty"`
	// Secrets are names, never values (omitted when empty, so digests
	// of specs without secrets stay as they were).
	Secrets   []SecretEnv `json:"secrets,omitempty"`
	Resources Resources   `json:"resources"`
	// Pod is omitted when empty for the same reason.
	Pod *schema.Pod `json:"pod,omitempty"`
}

func templateOf(s EndpointSpec) template {
	return template{Backend: s.Backend, Model: s.Model, Image: s.Image, Args: s.Args, Env: s.Env, Secrets: s.Secrets, Resources: s.Resources, Pod: s.Pod}
}

func digestOf(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("inference: encoding the spec for its digest: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// newRevision builds revision number n from a validated spec.
func newRevision(n int, spec EndpointSpec, created time.Time) (Revision, error) {
	s := WithDefaults(spec)
	d, err := digestOf(s)
	if err != nil {
		return Revision{}, err
	}
	td, err := digestOf(templateOf(s))
	if err != nil {
		return Revision{}, err
	}
	return Revision{Number: n, Spec: s, Digest: d, TemplateDigest: td, Created: created}, nil
}

// NextRevision validates spec and makes the revision that follows latest
// (nil for a new endpoint: revision 1). An update whose digest equals
// latest's is a no-op: it returns latest and false, and no revision is
// made. Created is the caller's clock (workflow.Now in a workflow).
func NextRevision(latest *Revision, spec EndpointSpec, created time.Time) (Revision, bool, error) {
	if err := Validate(spec); err != nil {
		return Revision{}, false, err
	}
	n := 1
	if latest != nil {
		n = latest.Number + 1
	}
	r, err := newRevision(n, spec, created)
	if err != nil {
		return Revision{}, false, err
	}
	if latest != nil && r.Digest == latest.Digest {
		return *latest, false, nil
	}
	return r, true, nil
}

// Rollback makes a new revision whose spec is revision to's, recording
// RollbackOf, after the latest revision of history (the one with the
// highest number; history need not be sorted). Rolling back to a spec
// equal to the latest's is a no-op (latest, false). The error wraps
// ErrRevisionNotFound when to is not in history.
func Rollback(history []Revision, to int, created time.Time) (Revision, bool, error) {
	var latest, target *Revision
	for i := range history {
		h := &history[i]
		if latest == nil || h.Number > latest.Number {
			latest = h
		}
		if h.Number == to {
			target = h
		}
	}
	if target == nil {
		return Revision{}, false, fmt.Errorf("%w: %d", ErrRevisionNotFound, to)
	}
	if target.Digest == latest.Digest {
		return *latest, false, nil
	}
	r, err := newRevision(latest.Number+1, target.Spec, created)
	if err != nil {
		return Revision{}, false, err
	}
	r.RollbackOf = to
	return r, true, nil
}
