// Command ensure-helm builds (once) and prints the path of the pinned helm
// (devstack.HelmVersion); with -version it also prints `helm version`.
//
// `make test` runs it (make ensure-helm) before `go test ./...` because go
// test buffers each package's output: a first-time build of helm inside
// the chart test would look like a hang. Here the progress is printed live
// (stderr).
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
	version := flag.Bool("version", false, "also print `helm version`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "ensure-helm: "+format+"\n", args...)
	}
	path, err := devstack.EnsureHelm(ctx, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ensure-helm:", err)
		os.Exit(1)
	}
	fmt.Println(path)
	if *version {
		out, err := exec.CommandContext(ctx, path, "version", "--short").CombinedOutput()
		fmt.Print(string(out))
		if err != nil {
			fmt.Fprintln(os.Stderr, "ensure-helm: helm version:", err)
			os.Exit(1)
		}
	}
}
