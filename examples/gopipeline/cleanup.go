package gopipeline

import (
	"strconv"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/workflows"
)

// CleanupName is the registered workflow type of TrainWithCleanup.
const CleanupName = "example.TrainWithCleanup"

// CleanupPipeline shows Run.OnExit, the Go form of a spec's onExit: a
// scratch directory is removed however the run ends. Workers do not
// register it by default; the replay test and the histories it replays do.
var CleanupPipeline = workflows.GoPipeline{
	Name:        CleanupName,
	Description: "Example Go pipeline with an exit handler: train in a scratch directory, always remove it.",
	Workflow:    TrainWithCleanup,
}

// CleanupInput makes training fail (Fail) or run for a while (Sleep,
// seconds) so that the exit handler can be seen after a failure or a
// cancel.
type CleanupInput struct {
	Fail  bool `json:"fail"`
	Sleep int  `json:"sleep"`
}

// TrainWithCleanup registers its exit handler first, as one writes a
// defer, then does its work; End runs the handler after the work, with
// how the run ends.
func TrainWithCleanup(ctx workflow.Context, in CleanupInput) (string, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{ExitTimeout: 5 * time.Minute})
	if err != nil {
		return "", err
	}
	scratch := "/tmp/atelier-scratch-" + run.ID()
	run.OnExit(func(ctx workflow.Context, exit workflows.ExitInfo) error {
		_, err := run.Container(ctx, "remove-scratch", pipeline.Container{
			Image:   "busybox:1.36",
			Command: []string{"sh", "-c", `rm -rf "$DIR"; echo "removed $DIR; the run ended $STATE"`},
			Env:     map[string]string{"DIR": scratch, "STATE": string(exit.State)},
		}).Get(ctx)
		return err
	})
	_, err = run.Container(ctx, "prepare", sh(`mkdir -p "$DIR"`, "DIR", scratch)).Get(ctx)
	if err == nil {
		script := `sleep "$SLEEP"; echo trained`
		if in.Fail {
			script = `echo "diverged" >&2; exit 1`
		}
		_, err = run.Container(ctx, "train", sh(script, "SLEEP", strconv.Itoa(max(in.Sleep, 0)))).Get(ctx)
	}
	return scratch, run.End(scratch, err)
}
