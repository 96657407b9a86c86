package pipeline

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

func TestValidateProblems(t *testing.T) {
	cases := []struct {
		name string
		spec string
		opts *ValidateOptions
		want []want
	}{
		{"no steps", `steps: []`, nil, []want{{"steps", "a pipeline needs at least one step"}}},
		{"bad step name", `
steps:
  - {name: Train_1, container: {command: [x]}}`, nil,
			[]want{{"steps[0].name", `invalid step name "Train_1"`}}},
		{"missing step name", `
steps:
  - {container: {command: [x]}}`, nil, []want{{"steps[0].name", "required"}}},
		{"step name too long", `
steps:
  - {name: a` + strings.Repeat("b", 63) + `, container: {command: [x]}}`, nil,
			[]want{{"steps[0].name", "at most 63 characters"}}},
		{"duplicate step name", `
steps:
  - {name: a, container: {command: [x]}}
  - {name: b, container: {command: [x]}}
  - {name: a, container: {command: [x]}}`, nil,
			[]want{{"steps[2].name", `duplicate step name "a" (also steps[0])`}}},
		{"bad and duplicate param names", `
params:
  - {name: 1x, type: string}
  - {name: lr, type: number}
  - {name: lr, type: number}
  - {type: string}
steps:
  - {name: a, container: {command: [x]}}`, nil, []want{
			{"params[0].name", `invalid param name "1x"`},
			{"params[2].name", `duplicate param name "lr" (also params[1])`},
			{"params[3].name", "required"},
		}},
		{"param types", `
params:
  - {name: a, type: float}
  - {name: b}
steps:
  - {name: a, container: {command: [x]}}`, nil, []want{
			{"params[0].type", `unknown type "float"; use one of string, integer, number, boolean, object, array`},
			{"params[1].type", "required"},
		}},
		{"param defaults must match type", `
params:
  - {name: s, type: string, default: 1}
  - {name: i, type: integer, default: 0.5}
  - {name: num, type: number, default: "1"}
  - {name: b, type: boolean, default: "true"}
  - {name: o, type: object, default: [1]}
  - {name: l, type: array, default: {a: 1}}
  - {name: ok, type: integer, default: 3}
steps:
  - {name: a, container: {command: [x]}}`, nil, []want{
			{"params[0].default", "must be a string, got number 1"},
			{"params[1].default", "must be a whole number, got number 0.5"},
			{"params[2].default", `must be a number, got string "1"`},
			{"params[3].default", "must be true or false"},
			{"params[4].default", "must be an object, got a list"},
			{"params[5].default", "must be a list, got an object"},
		}},
		{"unknown kind", `
steps:
  - {name: a, kind: lambda, container: {command: [x]}}`, nil,
			[]want{{"steps[0].kind", `unknown step kind "lambda"; use one of container, ray, spark, inference, approval, pipeline`}}},
		{"cluster kinds on the local runtime", `
steps:
  - {name: a, kind: ray, ray: {}}
  - {name: b, kind: spark, spark: {}}
  - {name: c, kind: inference, inference: {}}`, nil, []want{
			{"steps[0].kind", `step kind "ray" needs a Kubernetes cluster; the local runtime runs only container steps`},
			{"steps[1].kind", `step kind "spark" needs a Kubernetes cluster`},
			{"steps[2].kind", `step kind "inference" needs a Kubernetes cluster`},
		}},
		{"kinds every runtime runs: their blocks", `
steps:
  - {name: a, kind: approval}
  - {name: b, kind: pipeline}`, nil, []want{
			{"steps[1].pipeline", `required for a pipeline step`},
		}},
		{"runIf", `
steps:
  - {name: a, container: {command: [x]}}
  - {name: b, dependsOn: [a], runIf: noneFailed, container: {command: [x]}}
  - {name: c, dependsOn: [a], runIf: anyfailed, container: {command: [x]}}
  - {name: d, dependsOn: [a], runIf: always, container: {command: [x]}}
  - {name: e, runIf: allDone, container: {command: [x]}}`, nil, []want{
			{"steps[2].runIf", `unknown runIf "anyfailed"; use one of allSucceeded, noneFailed, allDone, anyFailed (did you mean "anyFailed"?)`},
			{"steps[3].runIf", `unknown runIf "always"; use one of allSucceeded, noneFailed, allDone, anyFailed`},
			{"steps[4].runIf", "runIf decides from the step's dependsOn, and this step has none"},
		}},
		{"continueOn", `
steps:
  - {name: a, continueOn: failed, container: {command: [x]}}
  - {name: b, continueOn: succeeded, container: {command: [x]}}`, nil, []want{
			{"steps[1].continueOn", `unknown continueOn "succeeded"; the only one is "failed"`},
		}},
		{"approval steps", `
steps:
  - {name: a, kind: approval}
  - {name: b, kind: approval, timeout: 1m, approval: {minRole: admin, commentRequired: true, onTimeout: approve, message: "ship it?"}}
  - {name: c, kind: approval, approval: {minRole: owner, approvers: [admin, root], onTimeout: maybe}}
  - {name: d, kind: approval, approval: {onTimeout: approve, message: "{{ steps.nope.outputs.x }}"}}
  - {name: e, kind: approval, forEach: {items: [1]}, retries: {limit: 1}, container: {command: [x]}}
  - {name: f, approval: {}, container: {command: [x]}}`, nil, []want{
			{"steps[2].approval.minRole", `unknown role "owner"; use one of viewer, editor, admin`},
			{"steps[2].approval.approvers", "set approvers or minRole, not both"},
			{"steps[2].approval.approvers[1]", `unknown role "root"`},
			{"steps[2].approval.onTimeout", `unknown outcome "maybe"; use approve or reject`},
			{"steps[3].approval.onTimeout", "applies when the step's timeout passes; set timeout too"},
			{"steps[3].approval.message", `unknown step "nope"`},
			{"steps[4].container", "only container steps may set container (this step's kind is approval)"},
			{"steps[4].forEach", "an approval step is decided once; forEach does not apply"},
			{"steps[4].retries", "an approval step is not retried; a rejection fails it"},
			{"steps[5].approval", "only approval steps may set approval (this step's kind is container)"},
		}},
		{"kind allowed by a cluster runtime needs its config", `
steps:
  - {name: a, kind: ray}
  - {name: b, kind: spark, spark: {}}`, &ValidateOptions{Kinds: []StepKind{KindContainer, KindRay}}, []want{
			{"steps[0].ray", "required for a ray step"},
			{"steps[1].kind", `step kind "spark" is not supported by this runtime (it runs container, ray)`},
		}},
		{"container step config", `
steps:
  - {name: a}
  - {name: b, container: {image: x}}
  - {name: c, container: {command: ["", x]}}
  - {name: d, container: {command: [x]}, ray: {entrypoint: x}, spark: {type: R}, inference: {}}`, nil, []want{
			{"steps[0].container", "required for a container step"},
			{"steps[1].container.command", "must not be empty"},
			{"steps[2].container.command[0]", "must not be empty"},
			{"steps[3].ray", "only ray steps may set ray (this step's kind is container)"},
			{"steps[3].spark", "only spark steps may set spark (this step's kind is container)"},
			{"steps[3].inference", "only inference steps may set inference"},
		}},
		{"dependsOn", `
steps:
  - {name: prepare, container: {command: [x]}}
  - {name: b, dependsOn: [prepar, b, prepare, prepare], container: {command: [x]}}`, nil, []want{
			{"steps[1].dependsOn[0]", `unknown step "prepar" (did you mean "prepare"?)`},
			{"steps[1].dependsOn[1]", "a step cannot depend on itself"},
			{"steps[1].dependsOn[3]", `duplicate dependency "prepare" (also dependsOn[2])`},
		}},
		{"when must compile", `
steps:
  - {name: a, when: "1 >", container: {command: [x]}}`, nil,
			[]want{{"steps[0].when", "unexpected token EOF"}}},
		{"when must be boolean", `
steps:
  - {name: a, when: "1 + 2", container: {command: [x]}}`, nil,
			[]want{{"steps[0].when", "expected bool, but got int"}}},
		{"when without braces", `
steps:
  - {name: a, when: "{{ true }}", container: {command: [x]}}`, nil,
			[]want{{"steps[0].when", "without {{ }}"}}},
		{"template syntax", `
steps:
  - name: a
    container:
      command: [x, "{{ 1 +", "{{ }}", "{{ 1 + }}", "{{ 'a' + 1 }}", "ok }} here", "{{ {'a': {'b': 1}} }}"]`, nil, []want{
			{"steps[0].container.command[1]", `"{{" is not closed by "}}"`},
			{"steps[0].container.command[2]", "empty template"},
			{"steps[0].container.command[3]", "in {{ 1 + }}: unexpected token EOF"},
			{"steps[0].container.command[4]", "mismatched types string and int"},
		}},
		{"templates in every container field", `
steps:
  - name: a
    container:
      image: "img:{{ bad0 }}"
      command: ["{{ bad1 }}"]
      args: ["{{ bad2 }}"]
      env: {Z: "{{ bad3 }}", "A=B": "x"}
      workingDir: "{{ bad4 }}"`, nil, []want{
			{"steps[0].container.image", `unknown name "bad0"`},
			{"steps[0].container.command[0]", `unknown name "bad1"`},
			{"steps[0].container.args[0]", `unknown name "bad2"`},
			{"steps[0].container.env[\"A=B\"]", `invalid environment variable name "A=B"`},
			{"steps[0].container.env.Z", `unknown name "bad3"`},
			{"steps[0].container.workingDir", `unknown name "bad4"`},
		}},
		{"references", `
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - {name: prepare, container: {command: [x]}}
  - name: b
    container:
      command:
        - "{{ params.lrr }}"
        - "{{ steps.prepar.outputs.x }}"
        - "{{ steps.b.outputs.x }}"
        - "{{ steps.prepare.result }}"
        - "{{ steps }}"
        - "{{ steps[params.lr].outputs }}"
        - "{{ run.user }}"
        - "{{ foo.bar }}"
        - "{{ $env.params }}"
        - "{{ env('HOME') }}"
        - "{{ now() }}"
        - "{{ let steps = 1; steps }}"
        - "{{ params.lr }} {{ params }} {{ run.id }} {{ run }} {{ len(params) }} {{ let x = params.lr; x * 2 }}"
        - "{{ steps.prepare.outputs }} {{ steps['prepare'].outputs.x }} {{ map([1, 2], # * params.lr) }}"`, nil, []want{
			{"steps[1].container.command[0]", `in {{ params.lrr }}: unknown param "lrr" (did you mean "lr"?)`},
			{"steps[1].container.command[1]", `unknown step "prepar" (did you mean "prepare"?)`},
			{"steps[1].container.command[2]", "a step cannot use its own outputs (steps.b)"},
			{"steps[1].container.command[3]", "use steps.prepare.outputs.<key>"},
			{"steps[1].container.command[4]", "refer to a step's outputs as steps.<step>.outputs"},
			{"steps[1].container.command[5]", "write the step name literally"},
			{"steps[1].container.command[6]", `unknown run field "user"; run has id, project and pipeline`},
			{"steps[1].container.command[7]", `unknown name "foo"; use params.*, steps.<step>.outputs.*, item or run.*`},
			{"steps[1].container.command[8]", `unknown name "$env"`},
			{"steps[1].container.command[9]", `unknown function "env"`},
			{"steps[1].container.command[10]", "now() is not available"},
			{"steps[1].container.command[11]", "let steps would hide the built-in name"},
		}},
		{"item outside forEach", `
steps:
  - {name: a, container: {command: ["{{ item }}"]}}
  - name: b
    when: item > 1
    forEach: {items: "[item]"}
    container: {command: ["{{ item }}"]}`, nil, []want{
			{"steps[0].container.command[0]", "item is only available in steps with forEach"},
			{"steps[1].when", "item is not available in when: when is evaluated once for the whole step, before forEach fans out (forEach.when is evaluated per item)"},
			{"steps[1].forEach.items", "item is not available in forEach.items"},
		}},
		{"forEach", `
steps:
  - {name: a, forEach: {items: {a: 1}}, container: {command: [x]}}
  - {name: b, forEach: {items: " "}, container: {command: [x]}}
  - {name: c, forEach: {items: "{{ params.x }}"}, container: {command: [x]}}
  - {name: d, forEach: {items: "1 +"}, container: {command: [x]}}
  - {name: e, forEach: {items: [1], parallelism: 1001}, container: {command: [x]}}
  - {name: f, forEach: {items: [1], parallelism: -1}, container: {command: [x]}}
  - {name: g, forEach: {parallelism: 1}, container: {command: [x]}}
  - {name: h, forEach: {items: 7}, container: {command: [x]}}
  - {name: i, forEach: {items: [1], failurePolicy: {mode: sometimes, maxFailedPercent: 101}}, container: {command: [x]}}
  - {name: j, forEach: {items: [1], failurePolicy: {mode: continue, maxFailedPercent: 1.5}}, container: {command: [x]}}
  - {name: k, forEach: {items: [1], when: "{{ item > 1 }}"}, container: {command: [x]}}
  - {name: l, forEach: {items: [1], when: "len(item) + 1"}, container: {command: [x]}}
  - {name: m, forEach: {items: [1], when: "steps.nope.outputs.x == item"}, container: {command: [x]}}
  - {name: nn, forEach: {items: [1], when: "item > steps.a.outputs.min && params.x"}, container: {command: [x]}}`, nil, []want{
			{"steps[0].forEach.items", "must be a list or an expression string"},
			{"steps[1].forEach.items", "expression must not be empty"},
			{"steps[2].forEach.items", "without {{ }}"},
			{"steps[3].forEach.items", "unexpected token EOF"},
			{"steps[4].forEach.parallelism", "must be between 0 and 1000"},
			{"steps[5].forEach.parallelism", "must be between 0 and 1000"},
			{"steps[6].forEach.items", "required"},
			{"steps[7].forEach.items", "must be a list or an expression string"},
			{"steps[8].forEach.failurePolicy.mode", `must be "failFast" or "continue", got "sometimes"`},
			{"steps[8].forEach.failurePolicy.maxFailedPercent", "must be between 0 and 100, got 101"},
			{"steps[10].forEach.when", "without {{ }}"},
			{"steps[11].forEach.when", "expected bool, but got int"},
			{"steps[12].forEach.when", `unknown step "nope"`},
			{"steps[13].forEach.when", `unknown param "x"`},
		}},
		{"metric goals", `
steps:
  - {name: a, metrics: {val_loss: minimize, accuracy: maximize}, container: {command: [x]}}
  - {name: b, metrics: {"1bad": minimize, loss: lower}, container: {command: [x]}}
  - {name: c, kind: approval, metrics: {loss: minimize}, approval: {}}`, nil, []want{
			{"steps[1].metrics.1bad", "invalid name"},
			{"steps[1].metrics.loss", `must be "maximize" or "minimize", got "lower"`},
			{"steps[2].metrics", "only container steps report metrics"},
		}},
		{"retries and timeout", `
steps:
  - {name: a, retries: {limit: 21}, container: {command: [x]}}
  - {name: b, retries: {limit: -1, factor: 0.5, backoff: 1m, maxBackoff: 10s}, container: {command: [x]}}
  - {name: c, retries: {limit: 20, factor: 1}, timeout: 169h, container: {command: [x]}}
  - {name: d, retries: {limit: 0, factor: 0}, timeout: 168h, container: {command: [x]}}`, nil, []want{
			{"steps[0].retries.limit", "must be between 0 and 20, got 21"},
			{"steps[1].retries.limit", "must be between 0 and 20, got -1"},
			{"steps[1].retries.factor", "must be at least 1"},
			{"steps[1].retries.maxBackoff", "must not be less than backoff"},
			{"steps[2].timeout", "longer than the limit of 168h0m0s"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, tc.spec)
			opts := localOpts
			if tc.opts != nil {
				opts = *tc.opts
			}
			checkProblems(t, problemsOf(t, Validate(p, opts)), tc.want)
		})
	}
}

func TestValidateProgrammatic(t *testing.T) {
	step := func(name string) Step { return Step{Name: name, Container: &Container{Command: []string{"x"}}} }
	t.Run("negative durations", func(t *testing.T) {
		s := step("a")
		s.Timeout = schema.Duration(-time.Second)
		s.Retries = &Retries{Backoff: schema.Duration(-1), MaxBackoff: schema.Duration(-1)}
		p := &Spec{Deadline: schema.Duration(-time.Second), Steps: []Step{s}}
		checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{
			{"deadline", "must not be negative"},
			{"steps[0].retries.backoff", "must not be negative"},
			{"steps[0].retries.maxBackoff", "must not be negative"},
			{"steps[0].timeout", "must not be negative"},
		})
	})
	t.Run("too many steps and items", func(t *testing.T) {
		p := &Spec{}
		for i := 0; i <= MaxSteps; i++ {
			p.Steps = append(p.Steps, step(fmt.Sprintf("s%d", i)))
		}
		items := "[" + strings.Repeat("1,", MaxForEachItems) + "1]"
		p.Steps[0].ForEach = &ForEach{Items: []byte(items)}
		checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{
			{"steps", fmt.Sprintf("%d steps; the limit is %d", MaxSteps+1, MaxSteps)},
			{"steps[0].forEach.items", fmt.Sprintf("%d items; the limit is %d", MaxForEachItems+1, MaxForEachItems)},
		})
	})
	t.Run("nil pipeline", func(t *testing.T) {
		checkProblems(t, problemsOf(t, Validate(nil, localOpts)), []want{{"", "pipeline is missing"}})
	})
	t.Run("nil kinds means container only", func(t *testing.T) {
		p := &Spec{Steps: []Step{step("a"), {Name: "b", Kind: KindRay, Ray: &RayStep{}}}}
		checkProblems(t, problemsOf(t, Validate(p, ValidateOptions{})), []want{
			{"steps[1].kind", "needs a Kubernetes cluster"},
		})
	})
}

// TestValidateReportsEverything checks that one bad spec yields all of its
// problems, in document order.
func TestValidateReportsEverything(t *testing.T) {
	p := mustParse(t, `
params:
  - {name: lr, type: number, default: high}
steps:
  - name: Prepare
    container: {command: []}
  - name: train
    kind: ray
    dependsOn: [missing]
    when: params.rate > 1
    forEach: {items: [1], parallelism: 1001}
    retries: {limit: 99}
  - name: eval
    container: {command: ["{{ item }}", "{{ steps.train.outputs.acc }}"]}
  - name: eval
    container: {command: [x]}
`)
	checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{
		{"params[0].default", "must be a number"},
		{"steps[0].name", "invalid step name"},
		{"steps[0].container.command", "must not be empty"},
		{"steps[1].kind", "needs a Kubernetes cluster"},
		{"steps[1].dependsOn[0]", `unknown step "missing"`},
		{"steps[1].when", `unknown param "rate"`},
		{"steps[1].forEach.parallelism", "must be between 0 and 1000"},
		{"steps[1].retries.limit", "must be between 0 and 20"},
		{"steps[2].container.command[0]", "item is only available in steps with forEach"},
		{"steps[3].name", `duplicate step name "eval" (also steps[2])`},
	})
}

func TestValidateCycles(t *testing.T) {
	cases := []struct {
		name string
		spec string
		want []want
	}{
		{"two steps via dependsOn", `
steps:
  - {name: a, dependsOn: [b], container: {command: [x]}}
  - {name: b, dependsOn: [a], container: {command: [x]}}`,
			[]want{{"steps[0]", "dependency cycle: a -> b -> a"}}},
		{"three steps via dependsOn", `
steps:
  - {name: start, container: {command: [x]}}
  - {name: a, dependsOn: [start, c], container: {command: [x]}}
  - {name: b, dependsOn: [a], container: {command: [x]}}
  - {name: c, dependsOn: [b], container: {command: [x]}}`,
			[]want{{"steps[1]", "dependency cycle: a -> c -> b -> a"}}},
		{"via references", `
steps:
  - {name: a, when: "steps.b.outputs.ok", container: {command: [x]}}
  - {name: b, container: {command: ["{{ steps.c.outputs.x }}"]}}
  - {name: c, forEach: {items: "steps.a.outputs.list"}, container: {command: [x]}}`,
			[]want{{"steps[0]", "dependency cycle: a -> b -> c -> a"}}},
		{"mixed dependsOn and env reference", `
steps:
  - {name: a, dependsOn: [b], container: {command: [x]}}
  - {name: b, container: {command: [x], env: {X: "{{ steps.a.outputs.x }}"}}}`,
			[]want{{"steps[0]", "dependency cycle: a -> b -> a"}}},
		{"two separate cycles reported once each", `
steps:
  - {name: a, dependsOn: [b], container: {command: [x]}}
  - {name: b, dependsOn: [a], container: {command: [x]}}
  - {name: c, dependsOn: [d], container: {command: [x]}}
  - {name: d, dependsOn: [c], container: {command: [x]}}`,
			[]want{{"steps[0]", "a -> b -> a"}, {"steps[2]", "c -> d -> c"}}},
		{"one component with several cycles is one problem", `
steps:
  - {name: a, dependsOn: [b, c], container: {command: [x]}}
  - {name: b, dependsOn: [a], container: {command: [x]}}
  - {name: c, dependsOn: [a], container: {command: [x]}}`,
			[]want{{"steps[0]", "dependency cycle: a -> b -> a"}}},
		{"self dependency is not a cycle report", `
steps:
  - {name: a, dependsOn: [a], container: {command: [x]}}`,
			[]want{{"steps[0].dependsOn[0]", "a step cannot depend on itself"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkProblems(t, problemsOf(t, Validate(mustParse(t, tc.spec), localOpts)), tc.want)
		})
	}
}

func TestDependencies(t *testing.T) {
	p := mustParse(t, `
params:
  - {name: count, type: integer, default: 1}
steps:
  - {name: a, container: {command: [x]}}
  - {name: b, container: {command: [x]}}
  - {name: c, dependsOn: [b], when: "steps.a.outputs.ok ?? false", container: {command: [x]}}
  - name: d
    forEach: {items: "steps.c.outputs.list"}
    container:
      command: ["{{ steps.b.outputs.x }}"]
      args: ["{{ item }}"]
      env: {A: "{{ steps.a.outputs.y }}"}
      workingDir: "/w/{{ steps.c.outputs.dir }}"
  - {name: e, dependsOn: [d, a], container: {command: ["{{ params.count }}"]}}`)
	if err := Validate(p, localOpts); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(Dependencies(p))
	if want := "[[] [] [0 1] [0 1 2] [0 3]]"; got != want {
		t.Errorf("Dependencies = %s, want %s", got, want)
	}
}

// TestValidateRandomGraphs checks, on random graphs expressed through a mix of
// dependsOn and output references, that Validate reports a cycle exactly when
// a topological sort fails, and nothing else.
func TestValidateRandomGraphs(t *testing.T) {
	cyclic := 0
	for seed := int64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		n := 1 + rng.Intn(12)
		// Mostly forward edges (a DAG in a random order) plus, sometimes, a
		// few arbitrary ones that may close cycles.
		perm := rng.Perm(n)
		edges := make([]map[int]bool, n)
		for i := range edges {
			edges[i] = map[int]bool{}
		}
		for i := 0; i < n; i++ {
			for j := 0; j < i; j++ {
				if rng.Float64() < 0.3 {
					edges[perm[i]][perm[j]] = true
				}
			}
		}
		if rng.Intn(2) == 0 {
			for k := rng.Intn(3); k >= 0; k-- {
				a, b := rng.Intn(n), rng.Intn(n)
				if a != b {
					edges[a][b] = true
				}
			}
		}
		p := &Spec{}
		for i := 0; i < n; i++ {
			s := Step{Name: fmt.Sprintf("s%d", i), Container: &Container{Command: []string{"x"}}}
			for j := 0; j < n; j++ {
				if !edges[i][j] {
					continue
				}
				ref := fmt.Sprintf("s%d", j)
				switch rng.Intn(4) {
				case 0:
					s.DependsOn = append(s.DependsOn, ref)
				case 1:
					s.Container.Args = append(s.Container.Args, "{{ steps."+ref+".outputs.v }}")
				case 2:
					if s.When != "" {
						s.When += " && "
					}
					s.When += "steps." + ref + ".outputs.ok"
				default:
					s.Container.Command = append(s.Container.Command, "--in={{ steps."+ref+".outputs.path }}")
				}
			}
			p.Steps = append(p.Steps, s)
		}

		sortable := topoSorts(edges)
		err := Validate(p, localOpts)
		reported := false
		for _, pr := range problemsOf(t, err) {
			if !strings.HasPrefix(pr.Message, "dependency cycle: ") {
				t.Fatalf("seed %d: unexpected problem %s: %s", seed, pr.Path, pr.Message)
			}
			reported = true
			checkCycleMessage(t, seed, pr.Message, edges)
		}
		if reported == sortable {
			t.Fatalf("seed %d: topological sort ok=%v but cycle reported=%v (%v)", seed, sortable, reported, err)
		}
		if !sortable {
			cyclic++
		}
		// Dependencies must match the generated edges exactly.
		deps := Dependencies(p)
		for i := range deps {
			if len(deps[i]) != len(edges[i]) {
				t.Fatalf("seed %d: step %d deps %v, edges %v", seed, i, deps[i], edges[i])
			}
			for k, j := range deps[i] {
				if !edges[i][j] || (k > 0 && deps[i][k-1] >= j) {
					t.Fatalf("seed %d: step %d deps %v, edges %v", seed, i, deps[i], edges[i])
				}
			}
		}
	}
	if cyclic < 30 || cyclic > 270 {
		t.Errorf("only %d of 300 graphs were cyclic; the generator is not exercising both cases", cyclic)
	}
}

// topoSorts runs Kahn's algorithm independently of the code under test.
func topoSorts(edges []map[int]bool) bool {
	n := len(edges)
	indeg := make([]int, n) // number of unfinished dependencies
	for i := range edges {
		indeg[i] = len(edges[i])
	}
	var ready []int
	for i := range indeg {
		if indeg[i] == 0 {
			ready = append(ready, i)
		}
	}
	done := 0
	for len(ready) > 0 {
		v := ready[0]
		ready = ready[1:]
		done++
		for i := range edges {
			if edges[i][v] {
				indeg[i]--
				if indeg[i] == 0 {
					ready = append(ready, i)
				}
			}
		}
	}
	return done == n
}

// checkCycleMessage verifies that a reported cycle follows real edges.
func checkCycleMessage(t *testing.T, seed int64, msg string, edges []map[int]bool) {
	t.Helper()
	names := strings.Split(strings.TrimPrefix(msg, "dependency cycle: "), " -> ")
	if len(names) < 3 || names[0] != names[len(names)-1] {
		t.Fatalf("seed %d: malformed cycle %q", seed, msg)
	}
	for k := 0; k+1 < len(names); k++ {
		var a, b int
		fmt.Sscanf(names[k], "s%d", &a)
		fmt.Sscanf(names[k+1], "s%d", &b)
		if !edges[a][b] {
			t.Fatalf("seed %d: cycle %q uses a missing edge %s -> %s", seed, msg, names[k], names[k+1])
		}
	}
}

func TestValidateSecrets(t *testing.T) {
	p, err := Parse([]byte(`
steps:
  - name: a
    container:
      command: ["true"]
      env: {TAKEN: "1"}
      secrets:
        - {name: db-password, env: DB_PASSWORD}
        - {name: "Bad Name", env: OTHER}
        - {name: hf-token, env: DB_PASSWORD}
        - {name: x1, env: TAKEN}
        - {name: x2, env: "A=B"}
        - {name: x3, env: ATELIER_OUTPUTS}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(p, ValidateOptions{})
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	got := map[string]bool{}
	for _, pr := range ve.Problems {
		got[pr.Path] = true
	}
	for _, want := range []string{"steps[0].container.secrets[1].name", "steps[0].container.secrets[2].env", "steps[0].container.secrets[3].env", "steps[0].container.secrets[4].env", "steps[0].container.secrets[5].env"} {
		if !got[want] {
			t.Errorf("no problem at %s (got %v)", want, ve.Problems)
		}
	}
	if got["steps[0].container.secrets[0].name"] || got["steps[0].container.secrets[0].env"] {
		t.Errorf("a valid reference has a problem: %v", ve.Problems)
	}
	// Rendering keeps the references (the worker resolves them).
	c, err := RenderContainer(p.Steps[0].Container, Env{})
	if err != nil || len(c.Secrets) != 6 || c.Secrets[0] != (SecretEnv{Name: "db-password", Env: "DB_PASSWORD"}) {
		t.Fatalf("RenderContainer = %+v, %v", c, err)
	}
}
