package pipeline

import (
	"errors"
	"os"
	"testing"

	"github.com/atelier-ml/atelier/schema"
)

// FuzzParse checks that no input makes Parse, Validate, Dependencies or the
// step helpers panic and that every error is a non-empty *ValidationError.
func FuzzParse(f *testing.F) {
	f.Add([]byte(richYAML))
	f.Add([]byte(richJSON))
	f.Add([]byte(fullKubeYAML))
	for _, name := range []string{"train-evaluate.yaml", "ray-spark.yaml", "train-canary.yaml"} {
		if b, err := os.ReadFile("../examples/pipelines/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"steps": [{"name": "a", "dependsOn": ["b"]}, {"name": "b", "when": "steps.a.outputs.x ?? item"}]}`))
	f.Add([]byte("steps:\n- name: a\n  container: {command: ['{{ {\"a\": {{ }} }}']}\n"))
	f.Add([]byte(`{"steps": [{"name": "a", "forEach": {"items": "1..10"}, "container": {"command": ["{{ item"]}}]}`))
	all := ValidateOptions{Kinds: []StepKind{KindContainer, KindRay, KindSpark, KindInference, KindApproval, KindPipeline}}
	kube := ValidateOptions{Kinds: []StepKind{KindContainer, KindRay, KindSpark, KindInference}}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || p != nil {
				t.Fatalf("Parse error %T %v", err, err)
			}
			return
		}
		for _, opts := range []ValidateOptions{{}, kube, all} {
			if err := Validate(p, opts); err != nil {
				var ve *schema.ValidationError
				if !errors.As(err, &ve) || len(ve.Problems) == 0 {
					t.Fatalf("Validate error %T %v", err, err)
				}
			}
		}
		if deps := Dependencies(p); len(deps) != len(p.Steps) {
			t.Fatalf("Dependencies has %d entries for %d steps", len(deps), len(p.Steps))
		}
		// The pure helpers must not panic on any parsed step either.
		for i := range p.Steps {
			s := &p.Steps[i]
			s.GPURequest()
			s.EffectivePlacement(p)
		}
	})
}
