package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/workflows"
)

// fakeCatalogue answers the resolve activity from pipelines parsed in the
// test; versions are 1-based in declaration order.
type fakeCatalogue struct {
	mu       sync.Mutex
	versions map[string][]pipeline.Spec // by "project/name"
	asked    []activities.ResolvePipelineRequest
}

func (c *fakeCatalogue) add(t *testing.T, project, name, yaml string) {
	t.Helper()
	p := parse(t, yaml)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.versions == nil {
		c.versions = map[string][]pipeline.Spec{}
	}
	c.versions[project+"/"+name] = append(c.versions[project+"/"+name], p)
}

func (c *fakeCatalogue) resolve(_ context.Context, req activities.ResolvePipelineRequest) (activities.ResolvePipelineResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, req)
	vs := c.versions[req.Project+"/"+req.Pipeline]
	v := req.Version
	if v == 0 {
		v = len(vs)
	}
	if v < 1 || v > len(vs) {
		return activities.ResolvePipelineResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("pipeline %q not found in project %q", req.Pipeline, req.Project), activities.ErrTypePipelineNotFound, nil)
	}
	return activities.ResolvePipelineResult{Version: v, Spec: vs[v-1]}, nil
}

func newChildEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *fakeRuntime, *fakeCatalogue, func() map[string]runstate.Status) {
	env, rt, mirrored := newEnv(t)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "run-1"})
	cat := &fakeCatalogue{}
	env.RegisterActivityWithOptions(cat.resolve, activity.RegisterOptions{Name: activities.ResolvePipelineName})
	// The last mirrored status of every run, children included.
	last := func() map[string]runstate.Status {
		out := map[string]runstate.Status{}
		for _, s := range *mirrored {
			if s.Seq >= out[s.RunID].Seq {
				out[s.RunID] = s
			}
		}
		return out
	}
	return env, rt, cat, last
}

const trainChild = `
params:
  - {name: dataset, type: string}
  - {name: lr, type: number, default: 0.1}
steps:
  - name: fit
    container: {command: ["ok model=m-{{ params.dataset }} lr={{ params.lr }}"]}
outputs:
  model: "{{ steps.fit.outputs.model }}"
  lr: "{{ steps.fit.outputs.lr }}"
`

func TestPipelineStepRunsChildAndTakesItsOutputs(t *testing.T) {
	env, rt, cat, last := newChildEnv(t)
	cat.add(t, "p1", "train", trainChild)
	in := input(t, `
params: [{name: lr, type: number, default: 0.5}]
steps:
  - name: train
    kind: pipeline
    pipeline: {name: train, params: {dataset: iris, lr: "{{ params.lr }}"}}
  - name: deploy
    container: {command: ["ok got={{ steps.train.outputs.model }}@{{ steps.train.outputs.lr }}"]}
outputs:
  deployed: "{{ steps.deploy.outputs.got }}"
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.PipelineResult
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, map[string]any{"deployed": "m-iris@0.5"}, res.Outputs)

	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Equal(t, map[string]any{"deployed": "m-iris@0.5"}, s.Result, "the run's outputs are its result")
	train := s.Steps[0]
	assert.Equal(t, runstate.StepSucceeded, train.State)
	assert.Equal(t, "pipeline", train.Kind)
	assert.Equal(t, map[string]any{"model": "m-iris", "lr": 0.5}, train.Outputs, "typed: lr stays a number")
	require.Len(t, train.Attempts, 1)
	want := &runstate.ChildRun{RunID: "run-1.train.a1", Pipeline: "train", Version: 1}
	assert.Equal(t, want, train.Attempts[0].ChildRun)
	assert.Contains(t, rt.commands(), "ok model=m-iris lr=0.5")
	assert.Equal(t, []activities.ResolvePipelineRequest{{Project: "p1", Pipeline: "train"}}, cat.asked, "the run's own project, newest version")

	child := last()["run-1.train.a1"]
	assert.Equal(t, runstate.Succeeded, child.State)
	assert.Equal(t, "p1", child.Project, "the parent's project")
	assert.Equal(t, "train", child.Pipeline)
	assert.Equal(t, 1, child.Version)
	assert.Equal(t, "run-1", child.ParentRun)
	assert.Equal(t, "train", child.ParentStep)
	assert.Equal(t, map[string]any{"model": "m-iris", "lr": 0.5}, child.Result)

	// The Temporal UI's details link the step to its child run.
	v, err := env.QueryWorkflow("__temporal_workflow_metadata")
	require.NoError(t, err)
	var meta sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&meta))
	assert.Contains(t, meta.GetCurrentDetails(), "child run [run-1.train.a1](/namespaces/default-test-namespace/workflows/run-1.train.a1) (train v1)")
}

func TestPipelineStepFailsWithItsChild(t *testing.T) {
	env, _, cat, last := newChildEnv(t)
	cat.add(t, "p1", "broken", `
steps:
  - {name: ok, container: {command: [ok]}}
  - {name: boom, dependsOn: [ok], container: {command: [fail]}}
`)
	in := input(t, `
steps:
  - name: sub
    kind: pipeline
    retries: {limit: 1, backoff: 1s}
    pipeline: {name: broken}
  - {name: after, dependsOn: [sub], container: {command: [ok]}}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &appErr)
	assert.Equal(t, workflows.ErrTypePipelineFailed, appErr.Type())

	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	sub := s.Steps[0]
	assert.Equal(t, runstate.StepFailed, sub.State)
	require.Len(t, sub.Attempts, 2, "a retry is a new child run")
	assert.Equal(t, "run-1.sub.a1", sub.Attempts[0].ChildRun.RunID)
	assert.Equal(t, "run-1.sub.a2", sub.Attempts[1].ChildRun.RunID)
	assert.Contains(t, sub.Error, "child run run-1.sub.a2 failed")
	assert.Contains(t, sub.Error, `step "boom" failed`)
	assert.Equal(t, runstate.StepSkipped, s.Steps[1].State)
	assert.Equal(t, runstate.Failed, last()["run-1.sub.a1"].State)
}

func TestPipelineStepBadReferencesFailAtOnce(t *testing.T) {
	env, _, cat, _ := newChildEnv(t)
	cat.add(t, "p1", "needs", `
params: [{name: count, type: integer}]
steps: [{name: a, container: {command: [ok]}}]
`)
	cat.add(t, "other", "secret", `steps: [{name: a, container: {command: [ok]}}]`)
	in := input(t, `
steps:
  - {name: missing, kind: pipeline, retries: {limit: 3}, pipeline: {name: nope}}
  - {name: foreign, kind: pipeline, pipeline: {name: secret}}
  - {name: badparam, kind: pipeline, retries: {limit: 3}, pipeline: {name: needs, params: {count: "{{ 1.5 }}"}}}
  - {name: badversion, kind: pipeline, pipeline: {name: needs, version: 9}}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	for i, want := range []string{
		`pipeline "nope" not found in project "p1"`,
		`pipeline "secret" not found in project "p1"`,
		`params.count: must be a whole number`,
		`pipeline "needs" not found`,
	} {
		st := s.Steps[i]
		assert.Equal(t, runstate.StepFailed, st.State, st.Name)
		assert.Len(t, st.Attempts, 1, "%s: not retried", st.Name)
		assert.Contains(t, st.Error, want, st.Name)
	}
}

func TestPipelinesInACycleStopAtTheDepthLimit(t *testing.T) {
	env, _, cat, last := newChildEnv(t)
	cat.add(t, "p1", "ping", `steps: [{name: call, kind: pipeline, pipeline: {name: pong}}]`)
	cat.add(t, "p1", "pong", `steps: [{name: call, kind: pipeline, pipeline: {name: ping}}]`)
	in := input(t, `steps: [{name: call, kind: pipeline, pipeline: {name: ping}}]`, nil)
	env.SetTestTimeout(time.Minute)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	runs := last()
	assert.Len(t, runs, 1+pipeline.MaxPipelineDepth, "the top run and 5 nested children")
	deepest := "run-1" + strings.Repeat(".call.a1", pipeline.MaxPipelineDepth)
	require.Contains(t, runs, deepest)
	msg := runs[deepest].Steps[0].Error
	assert.Contains(t, msg, "child runs nest at most 5 levels")
	assert.Contains(t, msg, "demo → ping → pong → ping → pong → ping → pong")
	assert.Contains(t, s.Error, msg, "the error reaches the top run")
}

func TestCancellingTheParentCancelsTheChild(t *testing.T) {
	for _, how := range []string{"signal", "temporal"} {
		t.Run(how, func(t *testing.T) {
			env, rt, cat, last := newChildEnv(t)
			cat.add(t, "p1", "long", `
steps:
  - {name: work, container: {command: [block]}}
  - {name: cleanup, dependsOn: [work], runIf: allDone, container: {command: ["ok cleaned=1"]}}
`)
			in := input(t, `steps: [{name: sub, kind: pipeline, pipeline: {name: long}}]`, nil)
			env.RegisterDelayedCallback(func() {
				if how == "signal" {
					env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "wrong data", Requester: "alice"})
				} else {
					env.CancelWorkflow()
				}
			}, 2*time.Second)
			env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
			require.True(t, env.IsWorkflowCompleted())
			assert.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "got %v", env.GetWorkflowError())
			s := status(t, env)
			assert.Equal(t, runstate.Cancelled, s.State)
			assert.Equal(t, runstate.StepCancelled, s.Steps[0].State)

			child := last()["run-1.sub.a1"]
			assert.Equal(t, runstate.Cancelled, child.State, "the child ran its cleanup and ended CANCELLED")
			require.NotNil(t, child.Cancel)
			assert.Contains(t, child.Cancel.Reason, "parent run run-1 cancelled")
			if how == "signal" {
				assert.Contains(t, child.Cancel.Reason, "wrong data")
				assert.Equal(t, "alice", child.Cancel.Requester)
			}
			assert.Equal(t, []string{"block"}, rt.commands(), "nothing starts after the cancel")
		})
	}
}

func TestChildRunDeadlineIsBoundedByTheStepTimeout(t *testing.T) {
	env, _, cat, last := newChildEnv(t)
	cat.add(t, "p1", "long", `
deadline: 1h
steps: [{name: work, container: {command: [block]}}]
`)
	in := input(t, `steps: [{name: sub, kind: pipeline, timeout: 3s, pipeline: {name: long}}]`, nil)
	env.SetTestTimeout(time.Minute)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	child := last()["run-1.sub.a1"]
	assert.Equal(t, runstate.Failed, child.State)
	assert.Contains(t, child.Error, `the parent run run-1's deadline or its step "sub"'s timeout passed`)
	assert.Contains(t, s.Steps[0].Error, "deadline exceeded")
}

func TestRetryReusesASucceededPipelineStep(t *testing.T) {
	env, _, cat, last := newChildEnv(t)
	cat.add(t, "p1", "train", trainChild)
	in := input(t, `
steps:
  - {name: train, kind: pipeline, pipeline: {name: train, params: {dataset: iris}}}
  - {name: fan, kind: pipeline, forEach: {items: [a, b]}, pipeline: {name: train, params: {dataset: "{{ item }}"}}}
  - {name: use, container: {command: ["ok m={{ steps.train.outputs.model }}"]}}
`, nil)
	in.Reuse = &runstate.Reuse{RetryOf: "run-0", Steps: []runstate.ReusedStep{
		{Name: "train", Done: true, Outputs: map[string]any{"model": "m-old"}},
		{Name: "fan", Items: []runstate.ReusedItem{{Index: 0, Item: "a", Outputs: map[string]any{"model": "m-a"}}}},
	}}
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.StepCached, s.Steps[0].State)
	assert.Empty(t, s.Steps[0].Attempts)
	assert.Equal(t, runstate.StepCached, s.Steps[1].Items[0].State)
	assert.Equal(t, runstate.StepSucceeded, s.Steps[1].Items[1].State)
	assert.Equal(t, "run-1.fan.i1.a1", s.Steps[1].Items[1].Attempts[0].ChildRun.RunID)
	assert.Equal(t, map[string]any{"m": "m-old"}, s.Steps[2].Outputs)
	runs := last()
	assert.Len(t, runs, 2, "one child run: the item that was not reused")
	assert.Equal(t, "fan[1]", runs["run-1.fan.i1.a1"].ParentStep)
}

// A child run cancelled by someone other than its parent fails the step,
// unretried: the parent is not cancelled, and a cancelled step must not
// let the run succeed.
func TestAChildCancelledOnItsOwnFailsTheStep(t *testing.T) {
	env, _, cat, last := newChildEnv(t)
	cat.add(t, "p1", "long", `steps: [{name: work, container: {command: [block]}}]`)
	in := input(t, `steps: [{name: sub, kind: pipeline, retries: {limit: 2}, pipeline: {name: long}}]`, nil)
	env.RegisterDelayedCallback(func() {
		require.NoError(t, env.SignalWorkflowByID("run-1.sub.a1", runstate.SignalCancel, runstate.CancelRequest{Reason: "not needed", Requester: "bob"}))
	}, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Equal(t, runstate.StepFailed, s.Steps[0].State)
	assert.Len(t, s.Steps[0].Attempts, 1, "not retried")
	assert.Contains(t, s.Steps[0].Error, "child run run-1.sub.a1 was cancelled")
	assert.Equal(t, runstate.Cancelled, last()["run-1.sub.a1"].State)
}

// goChildPipeline runs a stored pipeline from a native Go pipeline.
func goChildPipeline(ctx workflow.Context, dataset string) (string, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
	if err != nil {
		return "", err
	}
	out, err := run.Pipeline(ctx, "train", pipeline.ChildStep{Name: "train", Params: map[string]any{"dataset": dataset}}).Get(ctx)
	model, _ := out["model"].(string)
	return model, run.End(model, err)
}

func TestGoPipelineRunsAChildPipeline(t *testing.T) {
	env, _, cat, last := newChildEnv(t)
	cat.add(t, "p1", "train", trainChild)
	env.RegisterWorkflowWithOptions(goChildPipeline, workflow.RegisterOptions{Name: "test.GoChild"})
	require.NoError(t, env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(runstate.SAProject).ValueSet("p1"))))
	env.ExecuteWorkflow("test.GoChild", "mnist")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var model string
	require.NoError(t, env.GetWorkflowResult(&model))
	assert.Equal(t, "m-mnist", model)
	child := last()["run-1.train.a1"]
	assert.Equal(t, runstate.Succeeded, child.State)
	assert.Equal(t, "p1", child.Project)
	assert.Equal(t, "run-1", child.ParentRun)
	assert.Equal(t, "train", child.ParentStep)
}
