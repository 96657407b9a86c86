package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// fakeRuntime stands in for the local runtime in these fast unit tests (the
// real one is exercised by integration/). Commands are tiny scripts:
// "ok k=v ..." succeeds with outputs; "fail" fails; "flaky N" fails the first
// N attempts; "block" waits for cancellation.
type fakeRuntime struct {
	mu              sync.Mutex
	calls           []activities.ContainerRequest
	running, maxRan int
}

func (f *fakeRuntime) run(ctx context.Context, req activities.ContainerRequest) (activities.ContainerResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.running++
	f.maxRan = max(f.maxRan, f.running)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.running--; f.mu.Unlock() }()
	res := activities.ContainerResult{StartedAt: time.Now(), FinishedAt: time.Now()}
	if m := shOutputs.FindStringSubmatch(strings.Join(req.Command, " ")); m != nil {
		// The examples' shell steps: sh -c "echo '<json>' > $ATELIER_OUTPUTS".
		if err := json.Unmarshal([]byte(m[1]), &res.Outputs); err != nil {
			return res, err
		}
		return res, nil
	}
	args := strings.Fields(strings.Join(req.Command, " "))
	switch args[0] {
	case "ok":
		res.Outputs = map[string]any{}
		for _, kv := range args[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var val any
			if json.Unmarshal([]byte(v), &val) != nil {
				val = v
			}
			res.Outputs[k] = val
		}
		return res, nil
	case "slow": // succeeds after a while, so a sibling can fail meanwhile
		time.Sleep(300 * time.Millisecond)
		return res, nil
	case "slower": // as slow, with a wider margin for a sibling's failure to land
		time.Sleep(time.Second)
		return res, nil
	case "flaky":
		if req.Attempt <= len(args[1]) { // "flaky xx" fails two attempts
			res.ExitCode = 1
			return res, temporal.NewNonRetryableApplicationError("command exited with code 1", activities.ErrTypeStepFailed, nil, res)
		}
		return res, nil
	case "block":
		for {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(100 * time.Millisecond):
				activity.RecordHeartbeat(ctx)
			}
		}
	default:
		res.ExitCode = 3
		return res, temporal.NewNonRetryableApplicationError("command exited with code 3", activities.ErrTypeStepFailed, nil, res)
	}
}

// shOutputs matches a shell step that only writes its outputs.
var shOutputs = regexp.MustCompile(`^sh -c echo '(.*)' > "?\$ATELIER_OUTPUTS"?$`)

func (f *fakeRuntime) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, strings.Join(c.Command, " "))
	}
	return out
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *fakeRuntime, *[]runstate.Status) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	rt := &fakeRuntime{}
	var mirrored []runstate.Status
	var mu sync.Mutex
	env.RegisterActivityWithOptions(rt.run, activity.RegisterOptions{Name: activities.RunContainerName})
	env.RegisterActivityWithOptions(func(ctx context.Context, s runstate.Status) error {
		mu.Lock()
		mirrored = append(mirrored, s)
		mu.Unlock()
		return nil
	}, activity.RegisterOptions{Name: activities.MirrorRunName})
	workflows.Register(env)
	return env, rt, &mirrored
}

func parse(t *testing.T, yaml string) pipeline.Spec {
	t.Helper()
	p, err := pipeline.Parse([]byte(yaml))
	require.NoError(t, err)
	require.NoError(t, pipeline.Validate(p, pipeline.ValidateOptions{Kinds: []pipeline.StepKind{pipeline.KindContainer}}))
	return *p
}

func kubeInput(t *testing.T, yaml string) workflows.PipelineInput {
	t.Helper()
	p, err := pipeline.Parse([]byte(yaml))
	require.NoError(t, err)
	require.NoError(t, pipeline.Validate(p, pipeline.ValidateOptions{Kinds: []pipeline.StepKind{pipeline.KindContainer, pipeline.KindRay, pipeline.KindSpark}}))
	return workflows.PipelineInput{RunID: "run-1", Project: "p1", Pipeline: "kube", Version: 1, Spec: *p}
}

func input(t *testing.T, yaml string, params map[string]any) workflows.PipelineInput {
	p := parse(t, yaml)
	resolved, err := pipeline.ResolveParams(&p, params)
	require.NoError(t, err)
	return workflows.PipelineInput{RunID: "run-1", Project: "p1", Pipeline: "demo", Version: 1, Spec: p, Params: resolved}
}

func status(t *testing.T, env *testsuite.TestWorkflowEnvironment) runstate.Status {
	t.Helper()
	v, err := env.QueryWorkflow(runstate.QueryStatus)
	require.NoError(t, err)
	var s runstate.Status
	require.NoError(t, v.Get(&s))
	return s
}

func stepStates(s runstate.Status) map[string]runstate.StepState {
	m := map[string]runstate.StepState{}
	for _, st := range s.Steps {
		m[st.Name] = st.State
	}
	return m
}

func TestPipelineDataFlowWhenAndForEach(t *testing.T) {
	env, rt, mirrored := newEnv(t)
	in := input(t, `
params:
  - {name: threshold, type: number, default: 0.5}
steps:
  - name: prepare
    container: {command: ["ok rows=150"]}
  - name: train
    forEach: {items: [1, 2, 3], parallelism: 2}
    container: {command: ["ok acc={{ item }} rows={{ steps.prepare.outputs.rows }}"]}
  - name: deploy
    when: steps.train.outputs[2].acc > params.threshold
    container: {command: ["ok deployed=true"]}
  - name: never
    dependsOn: [train]
    when: params.threshold > 10
    container: {command: ["ok"]}
  - name: after-never
    dependsOn: [never]
    container: {command: ["ok"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Equal(t, map[string]runstate.StepState{
		"prepare": runstate.StepSucceeded, "train": runstate.StepSucceeded, "deploy": runstate.StepSucceeded,
		"never": runstate.StepSkipped, "after-never": runstate.StepSkipped,
	}, stepStates(s))
	assert.Contains(t, rt.commands(), "ok acc=3 rows=150")
	assert.Len(t, s.Steps[1].Items, 3)
	assert.Equal(t, []any{map[string]any{"acc": 1.0, "rows": 150.0}, map[string]any{"acc": 2.0, "rows": 150.0}, map[string]any{"acc": 3.0, "rows": 150.0}}, s.Steps[1].Outputs)
	assert.Contains(t, s.Steps[4].Message, `dependency "never" skipped`)

	last := (*mirrored)[len(*mirrored)-1]
	assert.Equal(t, runstate.Succeeded, last.State, "final state reaches the mirror")
	assert.Equal(t, s.Seq, last.Seq)
}

func TestPipelineRetriesThenFailsAndSkipsDownstream(t *testing.T) {
	env, rt, _ := newEnv(t)
	in := input(t, `
steps:
  - name: flaky
    retries: {limit: 2, backoff: 1s}
    container: {command: ["flaky xx"]}
  - name: broken
    dependsOn: [flaky]
    retries: {limit: 1, backoff: 1s}
    container: {command: ["fail"]}
  - name: downstream
    dependsOn: [broken]
    container: {command: ["ok"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &appErr)
	assert.Equal(t, workflows.ErrTypePipelineFailed, appErr.Type())

	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Contains(t, s.Error, `step "broken" failed`)
	assert.Len(t, s.Steps[0].Attempts, 3, "two failed attempts then success")
	assert.Equal(t, runstate.StepSucceeded, s.Steps[0].State)
	require.Len(t, s.Steps[1].Attempts, 2)
	assert.Equal(t, 3, *s.Steps[1].Attempts[1].ExitCode)
	assert.Equal(t, runstate.StepFailed, s.Steps[1].State)
	assert.Equal(t, runstate.StepSkipped, s.Steps[2].State)
	assert.NotContains(t, rt.commands(), "ok", "downstream of a failed step never runs")
}

func TestPipelineCancelSignalStopsRunningAndLaterSteps(t *testing.T) {
	env, rt, _ := newEnv(t)
	in := input(t, `
steps:
  - name: long
    container: {command: ["block"]}
  - name: later
    dependsOn: [long]
    container: {command: ["ok"]}
`, nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "wrong data", Requester: "alice"})
	}, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	assert.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "got %v", env.GetWorkflowError())

	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	require.NotNil(t, s.Cancel)
	assert.Equal(t, "alice", s.Cancel.Requester)
	assert.Equal(t, runstate.StepCancelled, s.Steps[0].State)
	assert.Equal(t, runstate.StepCancelled, s.Steps[1].State)
	assert.Equal(t, []string{"block"}, rt.commands())
}

func TestPipelineTemporalCancelGetsSameCleanup(t *testing.T) {
	env, _, _ := newEnv(t)
	in := input(t, `
steps:
  - name: long
    container: {command: ["block"]}
  - name: later
    dependsOn: [long]
    container: {command: ["ok"]}
`, nil)
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	assert.True(t, temporal.IsCanceledError(env.GetWorkflowError()))
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	assert.Equal(t, "temporal", s.Cancel.Requester)
	assert.Equal(t, runstate.StepCancelled, s.Steps[1].State)
}

func TestPipelineDeadline(t *testing.T) {
	env, _, _ := newEnv(t)
	in := input(t, `
deadline: 2s
steps:
  - name: long
    container: {command: ["block"]}
`, nil)
	env.SetTestTimeout(30 * time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Contains(t, s.Error, "deadline")
	assert.Equal(t, runstate.StepCancelled, s.Steps[0].State)
}

// Seen by a user: a forEach cut short by another step's failure was
// reported SUCCEEDED with partial outputs.
func TestForEachCutShortBySiblingFailureIsNotSucceeded(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(workflows.PipelineWorkflow, input(t, `
steps:
  - name: fan
    forEach: {items: [1, 2, 3, 4], parallelism: 1}
    container: {command: [slow]}
  - name: broken
    container: {command: [fail]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	s := status(t, env)
	var fan runstate.StepStatus
	for _, st := range s.Steps {
		if st.Name == "fan" {
			fan = st
		}
	}
	assert.Equal(t, runstate.StepCancelled, fan.State)
	assert.Contains(t, fan.Message, "3 of 4 items never ran")
	assert.Contains(t, fan.Message, `step "broken" failed`)
	assert.Nil(t, fan.Outputs, "no partial outputs")
	skipped := 0
	for _, it := range fan.Items {
		if it.State == runstate.StepSkipped {
			skipped++
		}
	}
	assert.Equal(t, 3, skipped)
	assert.Equal(t, 1, strings.Count(strings.Join(rt.commands(), ","), "slow"))
}

// Seen by a user: 21 forEach steps × parallelism 100 exceed Temporal's 2,000
// pending activities per workflow and the run hangs. Attempts past the
// run's bound wait for a slot instead.
func TestInflightAttemptsAreBoundedPerRun(t *testing.T) {
	env, rt, _ := newEnv(t)
	var b strings.Builder
	b.WriteString("steps:\n")
	items := "[" + strings.TrimSuffix(strings.Repeat("1,", 100), ",") + "]"
	for i := 0; i < 11; i++ {
		fmt.Fprintf(&b, "  - name: s%d\n    forEach: {items: %s, parallelism: 100}\n    container: {command: [slow]}\n", i, items)
	}
	env.ExecuteWorkflow(workflows.PipelineWorkflow, input(t, b.String(), nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.Len(t, rt.calls, 1100)
	assert.LessOrEqual(t, rt.maxRan, workflows.MaxInflightAttempts)
	assert.Greater(t, rt.maxRan, 500, "the bound must not serialise the run")
}
