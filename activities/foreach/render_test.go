package foreach

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
)

// A promote step whose templates read a wide forEach is rendered here, as
// the workflow cannot hold that forEach's outputs: it gets the promote
// block with the winner named.
func TestRenderPromoteOverWideOutputs(t *testing.T) {
	step := pipeline.Step{Name: "promote", Kind: pipeline.KindPromote, Promote: &pipeline.PromoteStep{
		Model: "ranker", Alias: "champion", From: `{{ steps.sweep.outputs[1].name }}.model`}}
	env := pipeline.Env{Steps: map[string]pipeline.StepEnv{"sweep": {Outputs: []any{
		map[string]any{"name": "train-0"}, map[string]any{"name": "train-1"}}}}}
	res, err := Render(&activities.RenderRequest{Step: step}, env)
	require.NoError(t, err)
	require.NotNil(t, res.Promote)
	assert.Equal(t, pipeline.PromoteStep{Model: "ranker", Alias: "champion", From: "train-1.model"}, *res.Promote)
	assert.Nil(t, res.Container)
}
