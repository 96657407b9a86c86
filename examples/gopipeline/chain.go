package gopipeline

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/workflows"
)

// ChainName is the registered workflow type of Chain.
const ChainName = "example.Chain"

// ChainPipeline shows retry from failure in a Go pipeline: five steps in
// a row whose third fails until a marker file exists. Retried (POST
// …/runs/{id}/retry) after the marker is created, the first two steps are
// reused (CACHED, nothing runs) and their outputs still reach the fifth.
// Workers do not register it by default; the replay test, the histories
// it replays and the integration tests do.
var ChainPipeline = workflows.GoPipeline{
	Name:        ChainName,
	Description: "Example Go pipeline of five steps in a row whose third fails until $DIR/ok exists (retry from failure).",
	Workflow:    Chain,
}

// ChainInput names the directory the steps write to: each appends its
// name to Dir/ran, the exit handler appends "exit", and step s3 fails
// unless Dir/ok exists.
type ChainInput struct {
	Dir string `json:"dir"`
}

// Chain runs s1 … s5 one after the other; s1's output n reaches s5
// through Go code, so a retry that reuses s1 must hand its outputs back.
func Chain(ctx workflow.Context, in ChainInput) (float64, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{Params: map[string]any{"dir": in.Dir}})
	if err != nil {
		return 0, err
	}
	// Exit handlers are never reused: a retry runs this one again.
	run.OnExit(func(ctx workflow.Context, exit workflows.ExitInfo) error {
		_, err := run.Container(ctx, "report", chainStep(in.Dir, "exit", `echo "the run ended $STATE"`, "STATE", string(exit.State))).Get(ctx)
		return err
	})
	n, err := chain(ctx, run, in.Dir)
	return n, run.End(n, err)
}

func chain(ctx workflow.Context, run *workflows.Run, dir string) (float64, error) {
	out, err := run.Container(ctx, "s1", chainStep(dir, "s1", `printf '{"n": 7}' > "$ATELIER_OUTPUTS"`)).Get(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := out["n"].(float64)
	for _, s := range []struct{ name, script string }{
		{"s2", "true"},
		{"s3", `test -e "$DIR/ok" || { echo "$DIR/ok is missing" >&2; exit 1; }`},
		{"s4", "true"},
		{"s5", `test "$N" = 7`},
	} {
		if _, err := run.Container(ctx, s.name, chainStep(dir, s.name, s.script, "N", fmt.Sprint(n))).Get(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// chainStep appends name to dir/ran, then runs script with DIR and the
// optional key/value pair in its environment.
func chainStep(dir, name, script string, kv ...string) pipeline.Container {
	env := map[string]string{"DIR": dir, "STEP": name}
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return pipeline.Container{
		Image:   "busybox:1.36",
		Command: []string{"sh", "-c", `echo "$STEP" >> "$DIR/ran"; ` + script},
		Env:     env,
	}
}
