package workflows_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// count returns how many of list equal v.
func count(list []string, v string) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}

// A wide step's own templates read another wide step's outputs by item:
// its batches have their items rendered by activities.RenderItemsName, and an
// expression list keeps its integers (item % 7) because the activity
// evaluates it again rather than receiving JSON. A batch that continues as
// new renders the rest of its range. A literal list over 1,000 items
// travels to the activity as values; a wide list computed from wide
// outputs (run wide before only when its templates did not read them)
// runs too.
func TestWideStepTemplatesReadWideOutputs(t *testing.T) {
	defer workflows.SetBatchItemsPerRun(400)()
	env, rt, st := newWideEnv(t)
	lit := make([]string, 1100)
	for k := range lit {
		lit[k] = fmt.Sprint(k)
	}
	in := input(t, fmt.Sprintf(`
steps:
  - name: prep
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok v={{ item * 2 }}"]}
  - name: big
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok big={{ steps.prep.outputs[item].v }} m={{ item %% 7 }}"]}
  - name: lit
    forEach: {items: [%s], parallelism: 200}
    container: {command: ["ok lit={{ steps.prep.outputs[item].v + item }}"]}
  - name: again
    forEach: {items: "map(steps.prep.outputs, .v)", parallelism: 200}
    container: {command: ["ok again={{ item }}"]}
`, strings.Join(lit, ", ")), nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	for _, name := range []string{"big", "lit", "again"} {
		step := wideStep(s, name)
		require.NotNil(t, step.Wide, name)
		assert.Zero(t, step.Wide.Counts.Failed, name)
	}
	cmds := rt.commands()
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c] = true
	}
	for k := 0; k < 1200; k++ {
		if want := fmt.Sprintf("ok big=%d m=%d", 2*k, k%7); !seen[want] {
			t.Fatalf("no command %q", want)
		}
		if want := fmt.Sprintf("ok again=%d", 2*k); !seen[want] {
			t.Fatalf("no command %q", want)
		}
	}
	for k := 0; k < 1100; k++ {
		if want := fmt.Sprintf("ok lit=%d", 3*k); !seen[want] {
			t.Fatalf("no command %q", want)
		}
	}
	assert.Len(t, cmds, 1200+1200+1100+1200, "every item ran once")
	// Items are rendered a chunk at a time, not one call per item: at
	// least once per batch run, far fewer than the items.
	renders := count(st.itemRenders, "big")
	assert.GreaterOrEqual(t, renders, wideStep(s, "big").Wide.Batches)
	assert.Less(t, renders, 50)
	assert.Positive(t, count(st.itemRenders, "lit"))
	assert.Zero(t, count(st.itemRenders, "again"), "its templates do not read wide outputs")
	assert.Zero(t, count(st.itemRenders, "prep"))
}

// A small forEach's templates read a wide step's outputs: the pipeline
// workflow has its items rendered in chunks that stay far under
// Temporal's payload limit (here about 2 KiB an item, so several chunks),
// and an item whose template fails fails alone, as in the workflow.
func TestForEachTemplatesReadWideOutputsInChunks(t *testing.T) {
	env, rt, st := newWideEnv(t)
	pad := strings.Repeat("x", 2000)
	in := input(t, fmt.Sprintf(`
steps:
  - name: prep
    forEach: {items: "0..1099", parallelism: 200}
    container: {command: ["ok v={{ item * 2 }}"]}
  - name: small
    forEach: {items: "0..599", parallelism: 50, failurePolicy: {mode: continue, maxFailedPercent: 1}}
    container:
      command: ["ok small={{ item == 599 ? steps.prep.outputs[item].nope : steps.prep.outputs[item].v }}", "%s"]
  - name: after
    dependsOn: [small]
    container: {command: ["ok after"]}
`, pad), nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	small := wideStep(s, "small")
	require.Equal(t, runstate.StepSucceeded, small.State, small.Error)
	require.Len(t, small.Items, 600)
	assert.Equal(t, runstate.StepFailed, small.Items[599].State)
	assert.Contains(t, small.Items[599].Error, "rendering templates:")
	assert.Contains(t, small.Items[599].Error, "nope")
	assert.Equal(t, runstate.StepSucceeded, small.Items[598].State)
	assert.Contains(t, small.Message, "1 of 600 items failed")
	cmds := rt.commands()
	for k := 0; k < 599; k++ {
		assert.Contains(t, cmds, fmt.Sprintf("ok small=%d %s", 2*k, pad))
	}
	renders := count(st.itemRenders, "small")
	assert.GreaterOrEqual(t, renders, 2, "600 items of 2 KiB do not fit one chunk")
	assert.Less(t, renders, 10)
	assert.Contains(t, cmds, "ok after")
}

// An approval step's message reads a wide step's outputs: rendered by the
// activity, then the step waits for its decision as any approval.
func TestApprovalMessageReadsWideOutputs(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	in := input(t, `
steps:
  - name: prep
    forEach: {items: "0..1099", parallelism: 200}
    container: {command: ["ok v={{ item }}"]}
  - name: gate
    kind: approval
    approval: {message: "ship {{ len(filter(steps.prep.outputs, .v >= 1000)) }} of {{ len(steps.prep.outputs) }}?"}
  - {name: deploy, dependsOn: [gate], container: {command: ["ok deploy"]}}
`, nil)
	var waiting runstate.StepStatus
	env.RegisterDelayedCallback(func() { waiting = wideStep(status(t, env), "gate") }, time.Hour)
	decide(env, 2*time.Hour, runstate.ApprovalRequest{Step: "gate", Approve: true, Role: "admin", Approver: "alice"})
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	assert.Equal(t, runstate.StepWaitingForApproval, waiting.State)
	require.NotNil(t, waiting.Approval)
	assert.Equal(t, "ship 100 of 1100?", waiting.Approval.Message)
	assert.Equal(t, runstate.StepSucceeded, wideStep(s, "gate").State)
	assert.Contains(t, rt.commands(), "ok deploy")
}

// A forEach whose when reads wide outputs and whose list does not: the
// when is evaluated by the activity, the list in the workflow (so it may
// be longer than the 256 KiB a list computed by the activity may be).
func TestForEachWhenReadsWideOutputs(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	in := input(t, `
steps:
  - name: prep
    forEach: {items: "0..1099", parallelism: 200}
    container: {command: ["ok v={{ item }}"]}
  - name: gate-on
    when: len(steps.prep.outputs) == 1100
    forEach: {items: "0..2"}
    container: {command: ["ok on={{ item }}"]}
  - name: gate-off
    when: len(steps.prep.outputs) == 3
    forEach: {items: "0..2"}
    container: {command: ["ok off={{ item }}"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	assert.Equal(t, runstate.StepSucceeded, wideStep(s, "gate-on").State)
	assert.Equal(t, runstate.StepSkipped, wideStep(s, "gate-off").State)
	assert.Contains(t, rt.commands(), "ok on=2")
	assert.NotContains(t, rt.commands(), "ok off=0")
}

// Runs from before versionWideTemplates, replayed, refuse what they
// refused: GetVersion answers DefaultVersion for them.
func TestWideTemplatesKeepTheRefusalsOfEarlierRuns(t *testing.T) {
	for _, tc := range []struct{ name, step, want string }{
		{"forEach", `
  - name: read
    forEach: {items: "[1, 2]"}
    container: {command: ["ok v={{ steps.prep.outputs[item].v }}"]}`,
			"the templates of a forEach step cannot read the outputs of a forEach over more than 1000 items yet"},
		{"approval", `
  - name: read
    kind: approval
    approval: {message: "{{ len(steps.prep.outputs) }}"}`,
			"an approval step cannot read the outputs of a forEach over more than 1000 items yet"},
		{"wide list", `
  - name: read
    forEach: {items: "map(steps.prep.outputs, .v)"}
    container: {command: ["ok"]}`,
			`the templates of a forEach over more than 1000 items cannot read the outputs of wide step "prep" yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _, _ := newWideEnv(t)
			env.OnGetVersion("atelier.wide-templates", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			in := input(t, `
steps:
  - name: prep
    forEach: {items: "0..1099", parallelism: 200}
    container: {command: ["ok v={{ item }}"]}`+tc.step+"\n", nil)
			env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
			require.True(t, env.IsWorkflowCompleted())
			s := status(t, env)
			assert.Equal(t, runstate.Failed, s.State)
			assert.Contains(t, wideStep(s, "read").Error, tc.want)
		})
	}
}

// A wide list computed from wide outputs that is over MaxRenderedItems
// stays out of the pipeline's workflow: the batches fetch their items
// from the render activity (again after a continue-as-new), whether their
// templates are rendered in the batch or by the activity. A list of at
// most 1,000 items must enter the workflow and still fails naming the
// limit.
func TestWideListOverWideOutputsStaysOutOfTheWorkflow(t *testing.T) {
	defer workflows.SetBatchItemsPerRun(400)()
	env, rt, _ := newWideEnv(t)
	pad := strings.Repeat("x", 300)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, fmt.Sprintf(`
steps:
  - name: prep
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok s=%s-{{ item }}"]}
  - name: each
    forEach: {items: "map(steps.prep.outputs, .s)", parallelism: 200}
    container: {command: ["ok got={{ item }}"]}
  - name: both
    forEach: {items: "map(steps.prep.outputs, .s)", parallelism: 200}
    container: {command: ["ok n={{ len(steps.prep.outputs) }} both={{ item }}"]}
  - name: small
    forEach: {items: "map(steps.prep.outputs[0:900], .s + .s)"}
    container: {command: ["ok"]}
`, pad), nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Failed, s.State, "small fails")
	small := wideStep(s, "small")
	assert.Equal(t, runstate.StepFailed, small.State)
	assert.Contains(t, small.Error, "the limit is 256 KiB")
	for _, name := range []string{"each", "both"} {
		st := wideStep(s, name)
		require.Equal(t, runstate.StepSucceeded, st.State, "%s: %s", name, st.Error)
		require.NotNil(t, st.Wide, name)
		assert.Equal(t, runstate.ItemCounts{Succeeded: 1200}, st.Wide.Counts, name)
	}
	seen := map[string]bool{}
	for _, c := range rt.commands() {
		seen[c] = true
	}
	for k := 0; k < 1200; k++ {
		if want := fmt.Sprintf("ok got=%s-%d", pad, k); !seen[want] {
			t.Fatalf("no command for item %d of each", k)
		}
		if want := fmt.Sprintf("ok n=1200 both=%s-%d", pad, k); !seen[want] {
			t.Fatalf("no command for item %d of both", k)
		}
	}
}
