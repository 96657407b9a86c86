package pipeline

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

func TestValidateCache(t *testing.T) {
	long := strings.Repeat("v", MaxCacheVersionLen+1)
	p := mustParse(t, `
cache: {version: "`+long+`", ttl: 1h}
steps:
  - name: ok
    cache: {version: "2", ttl: 24h}
    container: {command: ["true"]}
  - name: disabled
    cache: {enabled: false}
    container: {command: ["true"]}
  - name: templated
    cache: {version: "{{ params.x }}"}
    container: {command: ["true"]}
  - name: ask
    kind: approval
    cache: {}
  - name: deploy
    kind: inference
    cache: {version: "1"}
    inference: {endpoint: e, spec: {backend: vllm, model: {name: m}, image: i}}
  - name: child
    kind: pipeline
    cache: {}
    pipeline: {name: other}
`)
	opts := ValidateOptions{Kinds: []StepKind{KindContainer, KindInference, KindPipeline}, LocalEndpoints: true}
	got := problemsOf(t, Validate(p, opts))
	checkProblems(t, got, []want{
		{"steps[2].cache.version", "templates are not supported"},
		{"steps[3].cache", "an approval step waits for a person's decision in every run; it cannot be cached"},
		{"steps[4].cache", "an inference step deploys an endpoint that lives outside the run"},
		{"steps[5].cache", "a pipeline step starts a child run; it cannot be cached itself"},
		{"cache.version", "129 characters; the limit is 128"},
	})
}

func TestCacheParseIsStrict(t *testing.T) {
	_, err := Parse([]byte("steps:\n  - name: a\n    cache: {enabled: true, ttl: -1h, verison: x}\n    container: {command: [\"true\"]}\n"))
	got := problemsOf(t, err)
	if len(got) != 2 {
		t.Fatalf("problems %+v, want the negative ttl and the unknown field", got)
	}
	for _, p := range got {
		if !strings.HasPrefix(p.Path, "steps[0].cache.") {
			t.Errorf("problem %+v is not located in the cache block", p)
		}
	}
}

func TestEffectiveCache(t *testing.T) {
	yes, no := true, false
	def := &Cache{Version: "p", TTL: schema.Duration(time.Hour)}
	for _, tc := range []struct {
		name     string
		kind     StepKind
		pipeline *Cache
		step     *Cache
		want     *Cache // nil: off
	}{
		{"nothing", "", nil, nil, nil},
		{"step block alone turns it on", "", nil, &Cache{}, &Cache{Enabled: &yes}},
		{"pipeline default", KindRay, def, nil, &Cache{Enabled: &yes, Version: "p", TTL: schema.Duration(time.Hour)}},
		{"pipeline default off", KindSpark, &Cache{Enabled: &no, Version: "p"}, nil, nil},
		{"step overrides field by field", "", def, &Cache{Version: "s"}, &Cache{Enabled: &yes, Version: "s", TTL: schema.Duration(time.Hour)}},
		{"step turns it off", "", def, &Cache{Enabled: &no}, nil},
		{"step block over a default that is off", "", &Cache{Enabled: &no}, &Cache{TTL: schema.Duration(time.Minute)}, &Cache{Enabled: &yes, TTL: schema.Duration(time.Minute)}},
		{"approval ignores the default", KindApproval, def, nil, nil},
		{"inference ignores the default", KindInference, def, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Step{Name: "s", Kind: tc.kind, Cache: tc.step}
			got := s.EffectiveCache(&Spec{Cache: tc.pipeline})
			switch {
			case got == nil && tc.want == nil:
			case got == nil || tc.want == nil:
				t.Fatalf("got %+v, want %+v", got, tc.want)
			case *got.Enabled != *tc.want.Enabled || got.Version != tc.want.Version || got.TTL != tc.want.TTL:
				t.Fatalf("got %+v, want %+v", *got, *tc.want)
			}
		})
	}
}

// TestCachedExample keeps examples/pipelines/cached-train.yaml valid for
// the local runtime.
func TestCachedExample(t *testing.T) {
	data, err := os.ReadFile("../examples/pipelines/cached-train.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, localOpts); err != nil {
		t.Fatal(err)
	}
	if p.Steps[0].EffectiveCache(p) == nil {
		t.Error("the example's first step is not cached")
	}
}
