package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// fakeDeployer stands in for activities/deploy: it answers revision 3, or
// the rollback its test sets, and records what it was asked on which queue.
type fakeDeployer struct {
	mu       sync.Mutex
	reqs     []activities.DeployEndpointRequest
	queues   []string
	rollback string // non-empty: every attempt is rolled back with it
	block    bool   // wait for cancellation
}

func (f *fakeDeployer) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(f.deploy, activity.RegisterOptions{Name: activities.DeployEndpointName})
}

func (f *fakeDeployer) deploy(ctx context.Context, req activities.DeployEndpointRequest) (activities.DeployEndpointResult, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.queues = append(f.queues, activity.GetInfo(ctx).TaskQueue)
	rollback, block := f.rollback, f.block
	f.mu.Unlock()
	for block {
		select {
		case <-ctx.Done():
			return activities.DeployEndpointResult{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			activity.RecordHeartbeat(ctx)
		}
	}
	if rollback != "" {
		return activities.DeployEndpointResult{}, temporal.NewNonRetryableApplicationError(rollback, activities.ErrTypeRolloutFailed, nil)
	}
	now := time.Now()
	return activities.DeployEndpointResult{Endpoint: req.Endpoint, Revision: 3, StartedAt: now, FinishedAt: now}, nil
}

func inferenceInput(t *testing.T, yaml string) workflows.PipelineInput {
	t.Helper()
	p, err := pipeline.Parse([]byte(yaml))
	require.NoError(t, err)
	require.NoError(t, pipeline.Validate(p, pipeline.ValidateOptions{Kinds: []pipeline.StepKind{pipeline.KindContainer, pipeline.KindInference}, Kubernetes: true}))
	return workflows.PipelineInput{RunID: "run-1", Project: "p1", Pipeline: "deploy", Version: 1, Spec: *p}
}

const trainDeploySmoke = `
steps:
  - name: train
    container: {command: ["ok model=s3://models/run-1"]}
  - name: deploy
    kind: inference
    retries: {limit: 2}
    timeout: 30m
    inference:
      endpoint: chat
      cluster: gpu-a
      spec:
        backend: vllm
        model: {uri: "{{ steps.train.outputs.model }}", name: tiny}
        image: vllm/vllm-openai:v0.9.1
  - name: smoke
    container: {command: ["ok endpoint={{ steps.deploy.outputs.endpoint }} revision={{ steps.deploy.outputs.revision }}"]}
`

// The deploy step gets the rendered spec, runs on the run's own queue,
// and its outputs reach the next step's templates.
func TestInferenceStepOutputsFlowToLaterSteps(t *testing.T) {
	env, rt, _ := newEnv(t)
	fd := &fakeDeployer{}
	fd.register(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, inferenceInput(t, trainDeploySmoke))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	require.Len(t, fd.reqs, 1)
	req := fd.reqs[0]
	assert.Equal(t, "s3://models/run-1", req.Spec.Model.URI, "templates rendered")
	assert.Equal(t, inference.BackendVLLM, req.Spec.Backend)
	assert.Equal(t, "chat", req.Endpoint)
	assert.Equal(t, "gpu-a", req.Cluster)
	assert.Equal(t, "p1", req.Project)
	assert.Equal(t, "deploy", req.Step)
	assert.Equal(t, 1, req.Attempt)
	assert.Equal(t, 30*time.Minute, req.Timeout)
	assert.NotContains(t, fd.queues[0], "control", "a rollout's wait holds a step slot, not a control slot")

	deploy := s.Steps[1]
	assert.Equal(t, runstate.StepSucceeded, deploy.State)
	assert.Equal(t, "inference", deploy.Kind)
	assert.Equal(t, map[string]any{"endpoint": "chat", "revision": 3.0}, deploy.Outputs)
	assert.Equal(t, "endpoint/chat", deploy.Attempts[0].Object)
	assert.Contains(t, rt.commands(), "ok endpoint=chat revision=3")
}

// A rolled-back revision fails the step once, with the gate's message,
// whatever its retries, and skips what depends on it.
func TestInferenceStepRollbackFailsWithTheGateMessage(t *testing.T) {
	env, rt, _ := newEnv(t)
	gate := `revision 2 of endpoint "chat" was rolled back: error rate 25.0% > 5.0% over 200 requests`
	fd := &fakeDeployer{rollback: gate}
	fd.register(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, inferenceInput(t, trainDeploySmoke))
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), gate)

	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Len(t, fd.reqs, 1, "a rollback is not retried")
	deploy := s.Steps[1]
	assert.Equal(t, runstate.StepFailed, deploy.State)
	assert.Equal(t, gate, deploy.Error)
	require.Len(t, deploy.Attempts, 1)
	assert.Equal(t, gate, deploy.Attempts[0].Error)
	assert.Equal(t, runstate.StepSkipped, s.Steps[2].State)
	assert.NotContains(t, rt.commands(), "ok endpoint=chat revision=3")
}

// Cancelling the run stops the wait: the step ends CANCELLED.
func TestInferenceStepCancelled(t *testing.T) {
	env, _, _ := newEnv(t)
	fd := &fakeDeployer{block: true}
	fd.register(env)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "test", Requester: "me"})
	}, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, inferenceInput(t, trainDeploySmoke))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	assert.Equal(t, runstate.StepCancelled, s.Steps[1].State)
}

// A native Go pipeline deploys with Run.Inference.
func goDeployPipeline(ctx workflow.Context, _ struct{}) (int, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
	if err != nil {
		return 0, err
	}
	out, err := run.Inference(ctx, "deploy", pipeline.InferenceStep{Endpoint: "chat", Cluster: "gpu-a",
		Spec: inference.EndpointSpec{Backend: inference.BackendVLLM, Model: inference.Model{Name: "tiny"}, Image: "vllm"}},
		workflows.WithTimeout(time.Hour)).Get(ctx)
	rev := 0
	if err == nil {
		rev = int(out["revision"].(float64))
	}
	return rev, run.End(rev, err)
}

func TestGoPipelineInference(t *testing.T) {
	env, _, _ := newEnv(t)
	env.RegisterWorkflowWithOptions(goDeployPipeline, workflow.RegisterOptions{Name: "test.GoDeploy"})
	fd := &fakeDeployer{}
	fd.register(env)
	env.ExecuteWorkflow("test.GoDeploy", struct{}{})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var rev int
	require.NoError(t, env.GetWorkflowResult(&rev))
	assert.Equal(t, 3, rev)
	require.Len(t, fd.reqs, 1)
	assert.Equal(t, time.Hour, fd.reqs[0].Timeout)
	assert.Equal(t, "inference", status(t, env).Steps[0].Kind)
}
