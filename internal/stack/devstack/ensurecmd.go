package devstack

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// EnsureCommand is the body of the ensure-* commands (cmd/ensure-temporal,
// cmd/ensure-helm, cmd/ensure-versitygw): it builds a pinned tool once with ensure, printing
// progress live on stderr, prints its path, and with -version also what
// the tool says when run with versionArgs. name prefixes every message.
func EnsureCommand(name string, ensure func(context.Context, func(string, ...any)) (string, error), versionArgs ...string) {
	version := flag.Bool("version", false, fmt.Sprintf("also print what the tool says to %q", versionArgs))
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, name+": "+format+"\n", args...)
	}
	path, err := ensure(ctx, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	fmt.Println(path)
	if *version {
		out, err := exec.CommandContext(ctx, path, versionArgs...).CombinedOutput()
		fmt.Print(string(out))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v: %v\n", name, versionArgs, err)
			os.Exit(1)
		}
	}
}
