package inference

import (
	"errors"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/schema"
)

func TestRevisions(t *testing.T) {
	r1, made, err := NextRevision(nil, vllmSpec(), sec(0))
	if err != nil || !made || r1.Number != 1 || !strings.HasPrefix(r1.Digest, "sha256:") || !r1.Created.Equal(sec(0)) {
		t.Fatalf("first revision = %+v, %v, %v", r1, made, err)
	}

	t.Run("a no-op update makes no revision", func(t *testing.T) {
		// Writing a default out explicitly is the same spec.
		s := vllmSpec()
		s.Autoscaling.StableWindow = schema.Duration(DefaultStableWindow)
		s.Rollout.Strategy = StrategyRolling
		got, made, err := NextRevision(&r1, s, sec(10))
		if err != nil || made || got.Number != 1 || !got.Created.Equal(sec(0)) {
			t.Fatalf("NextRevision = %+v, %v, %v; want revision 1 unchanged", got, made, err)
		}
	})

	t.Run("invalid update", func(t *testing.T) {
		s := vllmSpec()
		s.Image = ""
		if _, _, err := NextRevision(&r1, s, sec(10)); !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("err = %v, want ErrInvalidSpec", err)
		}
	})

	// A policy-only change makes a revision that needs no rollout.
	s2 := vllmSpec()
	s2.Replicas.Max = 8
	r2, made, err := NextRevision(&r1, s2, sec(20))
	if err != nil || !made || r2.Number != 2 {
		t.Fatalf("second revision = %+v, %v, %v", r2, made, err)
	}
	if r2.Digest == r1.Digest || r2.NeedsRollout(r1) {
		t.Errorf("replicas change: digest changed %v, needs rollout %v; want true, false", r2.Digest != r1.Digest, r2.NeedsRollout(r1))
	}

	s3 := vllmSpec()
	s3.Image = "vllm/vllm-openai:v0.9.2"
	r3, _, err := NextRevision(&r2, s3, sec(30))
	if err != nil || r3.Number != 3 || !r3.NeedsRollout(r2) {
		t.Fatalf("image change = %+v, %v; want revision 3 needing a rollout", r3, err)
	}

	history := []Revision{r3, r1, r2} // any order
	t.Run("rollback makes a new revision with the old spec", func(t *testing.T) {
		rb, made, err := Rollback(history, 1, sec(40))
		if err != nil || !made {
			t.Fatalf("Rollback = %v, %v", made, err)
		}
		if rb.Number != 4 || rb.RollbackOf != 1 || rb.Digest != r1.Digest || rb.TemplateDigest != r1.TemplateDigest || !rb.Created.Equal(sec(40)) {
			t.Errorf("rollback revision = %+v", rb)
		}
		// The new revision does not alias the old one's spec.
		rb.Spec.Env = append(rb.Spec.Env, EnvVar{Name: "X"})
		*rb.Spec.Replicas.Min = 7
		if len(r1.Spec.Env) != 0 || *r1.Spec.Replicas.Min != 1 {
			t.Error("rollback aliases the spec of revision 1")
		}
	})
	t.Run("rollback to the latest spec is a no-op", func(t *testing.T) {
		got, made, err := Rollback(history, 3, sec(40))
		if err != nil || made || got.Number != 3 {
			t.Fatalf("Rollback = %+v, %v, %v", got, made, err)
		}
	})
	t.Run("unknown revision", func(t *testing.T) {
		if _, _, err := Rollback(history, 9, sec(40)); !errors.Is(err, ErrRevisionNotFound) {
			t.Fatalf("err = %v, want ErrRevisionNotFound", err)
		}
	})
}

func TestDigestIsStable(t *testing.T) {
	// Pinned: a change here changes every stored revision's digest, which
	// makes the next no-op update roll out again. Add fields with
	// omitempty instead.
	d, err := Digest(vllmSpec())
	if err != nil {
		t.Fatal(err)
	}
	s := vllmSpec()
	s.Env = []EnvVar{{Name: "A", Value: "1"}}
	d2, _ := Digest(s)
	if d == d2 {
		t.Fatal("env does not reach the digest")
	}
	again, _ := Digest(WithDefaults(vllmSpec()))
	if d != again {
		t.Fatal("Digest(WithDefaults(s)) != Digest(s)")
	}
}

// Pod settings are part of what replicas run: changing them rolls out,
// and they are validated with the spec at their paths.
func TestPodSettingsRollOut(t *testing.T) {
	r1, _, err := NextRevision(nil, vllmSpec(), sec(0))
	if err != nil {
		t.Fatal(err)
	}
	s := vllmSpec()
	s.Pod = &schema.Pod{Tolerations: []schema.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}}
	r2, made, err := NextRevision(&r1, s, sec(10))
	if err != nil || !made || !r2.NeedsRollout(r1) {
		t.Fatalf("NextRevision = %+v, %v, %v; want a revision that rolls out", r2, made, err)
	}
	s.Pod.Tolerations[0].Operator = "Sometimes"
	err = Validate(s)
	var ve *schema.ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Path != "pod.tolerations[0].operator" {
		t.Fatalf("Validate = %v", err)
	}
}
