package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// trainMetricsPipeline trains with the learning rate lr: its step reports
// accuracy (0.95 at lr 0.2, lower either side), 3 epochs and a three-point
// loss curve as metrics, and lr as its output.
const trainMetricsPipeline = `
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - name: train
    container:
      command: [sh, -c, 'awk -v lr="$LR" ''BEGIN { printf "{\"accuracy\": %.4f, \"epochs\": 3, \"loss\": [0.9, %.3f, %.3f]}", 0.95 - (lr - 0.2) * (lr - 0.2), 0.5 - lr, 0.3 - lr }'' > "$ATELIER_METRICS"; echo "{\"lr\": $LR}" > "$ATELIER_OUTPUTS"']
      env: {LR: "{{ params.lr }}"}
`

// Metrics and run comparison on the real stack: a training step writes
// scalar metrics and a loss curve to $ATELIER_METRICS; they are on the
// step (REST), two runs with different parameters are compared over REST
// and with the CLI (differences marked, the best run of a metric named),
// a step whose metrics file is wrong fails saying every problem, and
// another project cannot compare this project's runs.
func TestMetricsAndRunComparison(t *testing.T) {
	s := newStack(t)
	s.createPipeline("train-metrics", trainMetricsPipeline)
	a := s.waitTerminal(s.start("train-metrics", map[string]any{"lr": 0.1}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, a.State, "%s", val(a.Status.Error))
	b := s.waitTerminal(s.start("train-metrics", map[string]any{"lr": 0.2}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, b.State, "%s", val(b.Status.Error))

	m := stepByName(b, "train").Metrics
	require.NotNil(t, m, "the step's metrics are on the run")
	assert.Equal(t, map[string]float64{"accuracy": 0.95, "epochs": 3}, val(m.Scalars))
	assert.Equal(t, map[string][]float64{"loss": {0.9, 0.3, 0.1}}, val(m.Series))

	code, body := s.raw("GET", s.path("/compare?runs=%s&runs=%s", a.Id, b.Id), nil)
	require.Equal(t, 200, code, "%s", body)
	var c gen.RunComparison
	require.NoError(t, json.Unmarshal(body, &c))
	require.Len(t, c.Runs, 2)
	assert.Equal(t, []gen.ComparedValue{{Name: "lr", Values: []any{0.1, 0.2}, Differs: true}}, c.Params)
	require.Len(t, c.Metrics, 2)
	acc := c.Metrics[0]
	assert.Equal(t, "accuracy", acc.Name)
	assert.True(t, acc.Differs)
	assert.Equal(t, 1, val(acc.Best), "the second run is the more accurate")
	assert.Equal(t, 0.95, *acc.Values[1])
	assert.False(t, c.Metrics[1].Differs, "both ran 3 epochs")
	require.Len(t, c.Series, 1)
	assert.Equal(t, [][]float64{{0.9, 0.4, 0.2}, {0.9, 0.3, 0.1}}, c.Series[0].Values)

	// The CLI shows the rows that differ, the best run marked.
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.Equal(t, 0, atelierCLI(t, config, "login", s.url, "--token", s.token, "--project", s.project).code)
	cr := atelierCLI(t, config, "runs", "compare", a.Id, b.Id)
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Regexp(t, `(?m)^param\s+lr\s+0\.1\s+0\.2\s+\*$`, cr.stdout)
	assert.Regexp(t, `(?m)^metric\s+train\.accuracy\s+0\.94 v\s+0\.95 \^\s+\*$`, cr.stdout)
	assert.NotContains(t, cr.stdout, "train.epochs", "equal rows are left out without --all")
	cr = atelierCLI(t, config, "runs", "compare", a.Id, b.Id, "--all")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Contains(t, cr.stdout, "train.epochs")
	cr = atelierCLI(t, config, "runs", "compare", a.Id)
	assert.NotEqual(t, 0, cr.code, "one run is not a comparison")

	// The runs list by a metric: the more accurate first, with the value;
	// bounded; in the CLI with a METRIC column.
	code, body = s.raw("GET", s.path("/runs?pipeline=train-metrics&metric=train.accuracy"), nil)
	require.Equal(t, 200, code, "%s", body)
	var byAcc gen.RunList
	require.NoError(t, json.Unmarshal(body, &byAcc))
	require.Len(t, byAcc.Runs, 2)
	assert.Equal(t, []string{b.Id, a.Id}, []string{byAcc.Runs[0].Id, byAcc.Runs[1].Id})
	assert.Equal(t, 0.95, val(byAcc.Runs[0].MetricValue))
	code, body = s.raw("GET", s.path("/runs?pipeline=train-metrics&metric=train.accuracy&metricOrder=asc&metricMax=0.945"), nil)
	require.Equal(t, 200, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &byAcc))
	require.Len(t, byAcc.Runs, 1)
	assert.Equal(t, a.Id, byAcc.Runs[0].Id)
	cr = atelierCLI(t, config, "runs", "list", "--pipeline", "train-metrics", "--metric", "train.accuracy")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Regexp(t, `(?s)METRIC.*`+b.Id+`.*0\.95.*`+a.Id+`.*0\.94`, cr.stdout)

	// A wrong metrics file fails the step, naming every problem.
	s.createPipeline("bad-metrics", `
steps:
  - name: train
    container:
      command: [sh, -c, 'echo "{\"acc\": \"high\", \"loss\": [1, null]}" > "$ATELIER_METRICS"']
`)
	bad := s.waitTerminal(s.start("bad-metrics", nil), time.Minute)
	require.Equal(t, gen.RunStateFAILED, bad.State)
	msg := val(stepByName(bad, "train").Error)
	assert.Contains(t, msg, "acc: must be a number, not a string")
	assert.Contains(t, msg, "loss[1]: must be a number, not null")

	// Bad requests, and another project.
	code, body = s.raw("GET", s.path("/compare?runs=%s", a.Id), nil)
	assert.Equal(t, 400, code, "%s", body)
	code, _ = s.raw("GET", s.path("/compare?runs=%s&runs=%s", a.Id, "01970000-0000-7000-8000-0000000000ff"), nil)
	assert.Equal(t, 404, code)
	other := s.asProject("other-compare")
	code, body = other.raw("GET", other.path("/compare?runs=%s&runs=%s", a.Id, b.Id), nil)
	assert.Equal(t, 404, code, "another project's runs are not found: %s", body)
	code, _ = other.raw("GET", fmt.Sprintf("/v1/projects/%s/compare?runs=%s&runs=%s", s.project, a.Id, b.Id), nil)
	assert.Equal(t, 404, code, "nor is this project")
}

// A step served from the step cache shows the metrics its source
// reported, so a run of cached steps compares and sorts by its metrics
// like the run that computed them.
func TestCachedStepKeepsItsMetrics(t *testing.T) {
	s := newStack(t)
	s.createPipeline("train-cached-metrics", strings.Replace(trainMetricsPipeline, "  - name: train\n", "  - name: train\n    cache: {}\n", 1))
	first := s.waitTerminal(s.start("train-cached-metrics", map[string]any{"lr": 0.2}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, first.State, "%s", val(first.Status.Error))
	second := s.waitTerminal(s.start("train-cached-metrics", map[string]any{"lr": 0.2}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, second.State, "%s", val(second.Status.Error))
	computed, cached := stepByName(first, "train"), stepByName(second, "train")
	require.Equal(t, gen.StepStateCACHED, cached.State)
	require.NotNil(t, computed.Metrics)
	require.NotNil(t, cached.Metrics, "a cache hit shows its source's metrics")
	assert.Equal(t, *computed.Metrics, *cached.Metrics)
	assert.InDelta(t, 0.95, (*cached.Metrics.Scalars)["accuracy"], 1e-9)
}
