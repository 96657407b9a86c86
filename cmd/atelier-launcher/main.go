// Command atelier-launcher runs in a Kubernetes step's pod around the
// step's command when the step reads or writes artifacts: `install DIR`
// copies it into the pod's shared volume (the init container), `run --
// COMMAND...` places the inputs, runs the command and stores the outputs
// (package internal/process/launcher); `fetch` places the inputs only (an
// inference revision's init container fetching its model). It is built
// static and small, apart
// from the atelier binary, because every such pod copies it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/process/launcher"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "install" {
		if err := launcher.Install(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "atelier-launcher install:", err)
			os.Exit(1)
		}
		return
	}
	fetch := len(os.Args) == 2 && os.Args[1] == "fetch"
	if !fetch && (len(os.Args) < 4 || os.Args[1] != "run" || os.Args[2] != "--") {
		fmt.Fprintln(os.Stderr, "usage: atelier-launcher install DIR | atelier-launcher run -- COMMAND [ARGS...] | atelier-launcher fetch")
		os.Exit(2)
	}
	var spec launch.Spec
	if err := json.Unmarshal([]byte(os.Getenv(launch.SpecEnv)), &spec); err != nil || spec.ResultPath == "" {
		fmt.Fprintf(os.Stderr, "atelier-launcher: $%s is not a launch spec (%v): the pod was not built by an Atelier worker\n", launch.SpecEnv, err)
		os.Exit(1)
	}
	grant := os.Getenv(launch.GrantEnv)
	if fetch {
		os.Exit(launcher.Fetch(context.Background(), spec, grant, launcher.PodPaths, os.Stderr))
	}
	os.Exit(launcher.Run(context.Background(), spec, grant, launcher.PodPaths, os.Args[3:], os.Stderr))
}
