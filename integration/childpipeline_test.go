package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

const childTrain = `
params:
  - {name: dataset, type: string}
  - {name: lr, type: number, default: 0.1}
steps:
  - name: fit
    container:
      command: ["sh", "-c", "printf '{\"model\": \"s3://models/%s\", \"acc\": 0.93}' {{ params.dataset }}-{{ params.lr }} > $ATELIER_OUTPUTS"]
outputs:
  model: "{{ steps.fit.outputs.model }}"
  accuracy: "{{ steps.fit.outputs.acc }}"
`

// Child pipelines on the real stack (gateway, worker, Temporal, Postgres),
// through the generated REST client:
//   - success: the child's declared outputs come back as the parent step's
//     outputs and feed the next step; the child is its own run in REST,
//     linked both ways (parentRun/parentStep, the attempt's childRun);
//   - failure: a child run that fails fails the parent's step and run;
//   - push-time checks: a missing pipeline, another project's pipeline,
//     params that do not fit, a cycle of pipelines are 422s with paths.
func TestChildPipelinesOnRealStack(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	code, problems := s.push("train-model", childTrain)
	require.Equal(t, 201, code, "%v", problems)
	code, problems = s.push("broken", `
steps:
  - {name: ok, container: {command: ["true"]}}
  - {name: boom, dependsOn: [ok], container: {command: ["sh", "-c", "echo boom >&2; exit 4"]}}
`)
	require.Equal(t, 201, code, "%v", problems)
	code, problems = s.push("parent", fmt.Sprintf(`
params: [{name: dataset, type: string, default: iris}]
steps:
  - name: train
    kind: pipeline
    pipeline: {name: train-model, params: {dataset: "{{ params.dataset }}", lr: 0.5}}
  - name: report
    container: {command: ["sh", "-c", "echo '{{ steps.train.outputs.model }} {{ steps.train.outputs.accuracy }}' > %s/report"]}
outputs:
  model: "{{ steps.train.outputs.model }}"
`, dir))
	require.Equal(t, 201, code, "%v", problems)

	// Success, with outputs coming back.
	parent := s.start("parent", nil)
	r := s.waitTerminal(parent, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	report, err := os.ReadFile(filepath.Join(dir, "report"))
	require.NoError(t, err)
	assert.Equal(t, "s3://models/iris-0.5 0.93\n", string(report), "the child's outputs fed the next step")

	pr := s.getRun(parent)
	train := stepByName(pr, "train")
	assert.Equal(t, gen.StepState("SUCCEEDED"), train.State)
	assert.Equal(t, "pipeline", train.Kind)
	assert.Equal(t, map[string]any{"model": "s3://models/iris-0.5", "accuracy": 0.93}, train.Outputs)
	assert.Equal(t, map[string]any{"model": "s3://models/iris-0.5"}, pr.Status.Result, "the parent's own outputs")
	require.NotNil(t, train.Attempts)
	require.Len(t, *train.Attempts, 1)
	link := (*train.Attempts)[0].ChildRun
	require.NotNil(t, link, "the attempt links to its child run")
	assert.Equal(t, parent+".train.a1", link.RunId)
	assert.Equal(t, "train-model", link.Pipeline)
	assert.Equal(t, 1, link.Version, "the newest version, recorded when the step started")

	code, child := s.run(link.RunId)
	require.Equal(t, 200, code, "the child is its own run in REST")
	assert.Equal(t, gen.RunState("SUCCEEDED"), child.State)
	assert.Equal(t, "train-model", val(child.Pipeline))
	assert.Equal(t, parent, val(child.Status.ParentRun))
	assert.Equal(t, "train", val(child.Status.ParentStep))
	assert.Equal(t, map[string]any{"dataset": "iris", "lr": 0.5}, val(child.Status.Params))
	assert.Equal(t, map[string]any{"model": "s3://models/iris-0.5", "accuracy": 0.93}, child.Status.Result)
	// Listed in the project like any run.
	list := s.listRuns(gen.ListRunsParams{Pipeline: ptrTo("train-model")})
	require.Len(t, list, 1)
	assert.Equal(t, link.RunId, list[0].Id)

	// Failure: the child's failure fails the parent's step and run.
	code, problems = s.push("parent-of-broken", `
steps:
  - {name: sub, kind: pipeline, pipeline: {name: broken}}
  - {name: after, dependsOn: [sub], container: {command: ["true"]}}
`)
	require.Equal(t, 201, code, "%v", problems)
	failed := s.start("parent-of-broken", nil)
	r = s.waitTerminal(failed, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	sub := stepByName(r, "sub")
	assert.Equal(t, gen.StepStateFAILED, sub.State)
	assert.Contains(t, val(sub.Error), "child run "+failed+".sub.a1 failed")
	assert.Contains(t, val(sub.Error), `step "boom" failed`)
	assert.Contains(t, val(r.Status.Error), `step "sub" failed`)
	assert.Equal(t, gen.StepStateSKIPPED, stepByName(r, "after").State)
	cr := s.waitTerminal(failed+".sub.a1", 10*time.Second)
	assert.Equal(t, gen.RunStateFAILED, cr.State)
	assert.Equal(t, failed, val(cr.Status.ParentRun))

	// A child run is retried through its parent.
	retry, err := s.client().RetryRunWithResponse(context.Background(), s.project, failed+".sub.a1", gen.RetryRunRequest{})
	require.NoError(t, err)
	require.Equal(t, 409, retry.StatusCode(), "%s", retry.Body)

	// Push-time checks against the project's catalogue.
	other := s.asProject("team-b")
	code, _ = other.push("secret", childTrain)
	require.Equal(t, 201, code)
	code, problems = s.push("bad-parent", `
steps:
  - {name: a, kind: pipeline, pipeline: {name: nope}}
  - {name: b, kind: pipeline, pipeline: {name: secret, params: {dataset: x}}}
  - {name: c, kind: pipeline, pipeline: {name: train-model, version: 9, params: {dataset: x}}}
  - {name: d, kind: pipeline, pipeline: {name: train-model, params: {dataset: 3, epochs: 2}}}
`)
	assert.Equal(t, 422, code)
	assert.Contains(t, problems["steps[0].pipeline.name"], `pipeline "nope" not found in project "team-a"`)
	assert.Contains(t, problems["steps[1].pipeline.name"], `pipeline "secret" not found in project "team-a"`, "never another project's")
	assert.Contains(t, problems["steps[2].pipeline.version"], "has no version 9")
	assert.Contains(t, problems["steps[3].pipeline.params.dataset"], "must be a string")
	assert.Contains(t, problems["steps[3].pipeline.params.epochs"], `has no param "epochs"`)
	code, problems = s.push("train-model", `
params: [{name: dataset, type: string}]
steps:
  - {name: fit, container: {command: ["true"]}}
  - {name: again, kind: pipeline, pipeline: {name: parent}}
`)
	assert.Equal(t, 422, code)
	assert.Contains(t, problems["steps[1].pipeline.name"], "cycle (train-model → parent → train-model)")
	// Another project cannot read the child run.
	code, _ = other.run(link.RunId)
	assert.Equal(t, 404, code)
}

// Cancelling a parent run (REST signal or Temporal cancel) cancels its
// child run: the child's step gets SIGTERM and runs its trap (its
// cleanup), the child ends CANCELLED with the parent's reason, and the
// parent ends CANCELLED.
func TestCancellingAParentCancelsItsChildOnRealStack(t *testing.T) {
	for _, how := range []string{"rest-signal", "temporal-cancel"} {
		t.Run(how, func(t *testing.T) {
			s := newStack(t)
			dir := stepScratchDir(t)
			code, problems := s.push("long", fmt.Sprintf(`
steps:
  - name: work
    container:
      command: ["sh", "-c", "trap 'echo cleaned > %[1]s/cleaned; exit 143' TERM; echo $$ > %[1]s/pid; sleep 300 & wait"]
  - {name: later, dependsOn: [work], container: {command: ["sh", "-c", "echo later > %[1]s/later"]}}
`, dir))
			require.Equal(t, 201, code, "%v", problems)
			code, problems = s.push("outer", `steps: [{name: sub, kind: pipeline, pipeline: {name: long}}]`)
			require.Equal(t, 201, code, "%v", problems)
			parent := s.start("outer", nil)
			waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
			child := parent + ".sub.a1"

			if how == "rest-signal" {
				s.cancel(parent, "wrong dataset")
			} else {
				require.NoError(t, s.temporal.CancelWorkflow(context.Background(), parent, ""))
			}
			r := s.waitTerminal(parent, 30*time.Second)
			require.Equal(t, gen.RunStateCANCELLED, r.State)
			assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "sub").State)

			c := s.waitTerminal(child, 10*time.Second)
			require.Equal(t, gen.RunStateCANCELLED, c.State, "%+v", c.Status)
			require.NotNil(t, c.Status.Cancel)
			assert.Contains(t, c.Status.Cancel.Reason, "parent run "+parent+" cancelled")
			if how == "rest-signal" {
				assert.Contains(t, c.Status.Cancel.Reason, "wrong dataset")
				assert.Contains(t, c.Status.Cancel.Requester, "ci-editor")
			}
			assert.Equal(t, gen.StepStateCANCELLED, stepByName(c, "work").State)
			assert.Equal(t, "cleaned\n", waitFile(t, filepath.Join(dir, "cleaned"), 10*time.Second), "the child's step ran its cleanup")
			time.Sleep(300 * time.Millisecond)
			_, err := os.Stat(filepath.Join(dir, "later"))
			assert.True(t, os.IsNotExist(err), "nothing of the child starts after the cancel")

			d, err := s.temporal.DescribeWorkflowExecution(context.Background(), child, "")
			require.NoError(t, err)
			assert.Equal(t, "Canceled", d.WorkflowExecutionInfo.Status.String())
			assert.Equal(t, parent, d.WorkflowExecutionInfo.GetParentExecution().GetWorkflowId(), "a Temporal child of the parent")
		})
	}
}

// The examples run as documented: train-sweep runs train-model once per
// learning rate and outputs the best model.
func TestChildPipelineExamplesOnRealStack(t *testing.T) {
	s := newStack(t)
	for _, name := range []string{"train-model", "train-sweep"} {
		b, err := os.ReadFile("../examples/pipelines/" + name + ".yaml")
		require.NoError(t, err)
		code, problems := s.push(name, string(b))
		require.Equal(t, 201, code, "%s: %v", name, problems)
	}
	id := s.start("train-sweep", nil)
	r := s.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, map[string]any{"best_model": "file:///tmp/models/iris-0.1", "best_accuracy": 0.95}, r.Status.Result)
	sweep := stepByName(r, "sweep")
	require.Len(t, val(sweep.Items), 3)
	for k, it := range val(sweep.Items) {
		require.Len(t, val(it.Attempts), 1)
		c := s.waitTerminal((*it.Attempts)[0].ChildRun.RunId, 10*time.Second)
		assert.Equal(t, gen.RunStateSUCCEEDED, c.State)
		assert.Equal(t, fmt.Sprintf("sweep[%d]", k), val(c.Status.ParentStep))
	}
}
