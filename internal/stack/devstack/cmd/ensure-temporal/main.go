// Command ensure-temporal builds (once) and prints the path of the pinned
// temporal CLI (devstack.TemporalCLIVersion); with -version it also prints
// the CLI's own version line.
//
// `make test` runs it before `go test ./...` because go test buffers each
// package's output: a first-time ~10 minute CLI build inside a test binary
// would look like a hang. Here the progress is printed live (stderr).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

func main() {
	version := flag.Bool("version", false, "also print `temporal --version`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "ensure-temporal: "+format+"\n", args...)
	}
	path, err := devstack.EnsureTemporalCLI(ctx, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ensure-temporal:", err)
		os.Exit(1)
	}
	fmt.Println(path)
	if *version {
		out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
		fmt.Print(string(out))
		if err != nil {
			fmt.Fprintln(os.Stderr, "ensure-temporal: temporal --version:", err)
			os.Exit(1)
		}
	}
}
