// Command ensure-tools builds (once) and caches the external binaries that
// `make dev` and `make test` need, printing progress, so a fresh machine's
// long first build is visible before any test starts.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/atelier-ml/atelier/internal/devstack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "ensure-tools: "+format+"\n", args...) }
	path, err := devstack.EnsureTemporalCLI(ctx, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ensure-tools:", err)
		os.Exit(1)
	}
	logf("temporal CLI %s: %s", devstack.TemporalCLIVersion, path)
}
