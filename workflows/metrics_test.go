package workflows_test

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

func newMetricsEnv(t *testing.T, tenant bool) (*testsuite.TestWorkflowEnvironment, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var s testsuite.WorkflowTestSuite
	s.SetMetricsHandler(telemetry.NewSDKHandler(reg, telemetry.Options{TenantLabels: tenant}))
	env := s.NewTestWorkflowEnvironment()
	rt := &fakeRuntime{}
	var mu sync.Mutex
	env.RegisterActivityWithOptions(rt.run, activity.RegisterOptions{Name: activities.RunContainerName})
	env.RegisterActivityWithOptions(func(context.Context, runstate.Status) error { mu.Lock(); defer mu.Unlock(); return nil },
		activity.RegisterOptions{Name: activities.MirrorRunName})
	workflows.Register(env)
	return env, reg
}

// A run counts itself, each step's final state, each attempt and each
// attempt's queue wait once, labelled by kind and state only.
func TestRunAndStepMetrics(t *testing.T) {
	env, reg := newMetricsEnv(t, false)
	in := input(t, `
steps:
  - name: flaky
    retries: {limit: 2, backoff: 1s}
    container: {command: ["flaky x"]}
  - name: fan
    dependsOn: [flaky]
    forEach: {items: [1, 2, 3]}
    container: {command: ["ok"]}
  - name: skipped
    dependsOn: [fan]
    when: "false"
    container: {command: ["ok"]}
  - name: broken
    dependsOn: [fan]
    container: {command: ["fail"]}
  - name: never
    dependsOn: [broken]
    container: {command: ["ok"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())

	v, err := telemetrytest.Gather(reg)
	require.NoError(t, err)
	s := telemetrytest.Series
	assert.Equal(t, 1.0, v[s("atelier_runs_begun_total", "kind", "pipeline")], "%v", v)
	assert.Equal(t, 1.0, v[s("atelier_runs_finished_total", "kind", "pipeline", "state", "FAILED")])
	assert.Equal(t, 1.0, v[s("atelier_run_duration_seconds_count", "kind", "pipeline", "state", "FAILED")])

	// flaky, the 3 items of fan and broken started; skipped and never did not.
	assert.Equal(t, 5.0, v[s("atelier_steps_started_total", "kind", "container")])
	// A forEach step counts through its items; a skipped step and one
	// never started because of a failure end SKIPPED.
	assert.Equal(t, 4.0, v[s("atelier_steps_finished_total", "kind", "container", "state", "SUCCEEDED")])
	assert.Equal(t, 1.0, v[s("atelier_steps_finished_total", "kind", "container", "state", "FAILED")])
	assert.Equal(t, 2.0, v[s("atelier_steps_finished_total", "kind", "container", "state", "SKIPPED")])
	assert.Equal(t, 5.0, v[s("atelier_step_duration_seconds_count", "kind", "container", "state", "SUCCEEDED")]+v[s("atelier_step_duration_seconds_count", "kind", "container", "state", "FAILED")])

	// flaky: one failed attempt, then one that succeeded.
	assert.Equal(t, 6.0, v[s("atelier_step_attempts_started_total", "kind", "container")])
	assert.Equal(t, 2.0, v[s("atelier_step_attempts_finished_total", "kind", "container", "state", "FAILED")])
	assert.Equal(t, 4.0, v[s("atelier_step_attempts_finished_total", "kind", "container", "state", "SUCCEEDED")])
	assert.Equal(t, 6.0, v[s("atelier_step_queue_wait_seconds_count", "kind", "container")])
	assert.False(t, v.Has("atelier_steps_finished_total") && v.Sum("atelier_steps_finished_total", "project", "p1") > 0, "no project label by default")
}

func TestRunMetricsTenantLabels(t *testing.T) {
	env, reg := newMetricsEnv(t, true)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: one
    container: {command: ["ok"]}
`, nil))
	require.NoError(t, env.GetWorkflowError())
	v, err := telemetrytest.Gather(reg)
	require.NoError(t, err)
	s := telemetrytest.Series
	assert.Equal(t, 1.0, v[s("atelier_runs_finished_total", "kind", "pipeline", "project", "p1", "state", "SUCCEEDED")], "%v", v)
	assert.Equal(t, 1.0, v[s("atelier_steps_finished_total", "kind", "container", "project", "p1", "state", "SUCCEEDED")])
}
