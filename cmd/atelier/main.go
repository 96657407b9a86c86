// Command atelier is Atelier's single binary: `atelier gateway` serves the
// REST API, `atelier worker` runs pipelines (`atelier worker --cluster NAME`
// runs the steps sent to one Kubernetes cluster), `atelier dev` runs
// everything on one machine. The other commands (login, pipelines, run,
// runs, logs, cancel, endpoints) drive a running Atelier through its REST
// API: package internal/process/cli.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/process/app"
	"github.com/atelier-ml/atelier/internal/process/cli"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/wire"
	"github.com/atelier-ml/atelier/workflows"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cfg config.Config
	root := &cobra.Command{Use: "atelier", Short: "ML pipelines on Temporal", SilenceUsage: true, SilenceErrors: true}
	root.AddGroup(&cobra.Group{ID: serverGroup, Title: "Run Atelier:"}, &cobra.Group{ID: cli.GroupID, Title: "Use Atelier (through its REST API):"})
	// The server commands share one set of flags (and ATELIER_* variables).
	serverFlags := pflag.NewFlagSet("server", pflag.ContinueOnError)
	cfg.Bind(serverFlags)
	server := func(cmd *cobra.Command) *cobra.Command {
		cmd.GroupID = serverGroup
		cmd.Flags().AddFlagSet(serverFlags)
		cmd.PreRunE = func(*cobra.Command, []string) error { return cfg.EnvError() }
		return cmd
	}

	dev := app.DevOptions{}
	devCmd := &cobra.Command{Use: "dev", Short: "Run Temporal, Postgres, the gateway and a worker on this machine",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return app.RunDev(cmd.Context(), cfg, dev, app.DevBuilders{Gateway: wire.InitGateway, Worker: worker}, os.Stdout)
		}}
	devCmd.Flags().StringVar(&dev.StateDir, "state-dir", ".atelier", "dev stack state (Temporal db, Postgres, logs, admin token)")
	devCmd.Flags().IntVar(&dev.TemporalPort, "temporal-port", 7233, "Temporal frontend port")
	devCmd.Flags().IntVar(&dev.UIPort, "ui-port", 8233, "Temporal Web UI port")

	root.AddCommand(server(devCmd), server(adminTokenCmd(&cfg)),
		server(&cobra.Command{Use: "gateway", Short: "Serve the REST API", RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cfg, wire.InitGateway)
		}}),
		server(workerCmd(&cfg)),
	)
	root.AddCommand(cli.Commands()...)
	if err := root.ExecuteContext(ctx); err != nil {
		code := 1
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			code = exit.Code
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(code)
	}
}

const serverGroup = "server"

// workerCmd runs a local-runtime worker, or with --cluster the worker of
// one Kubernetes cluster.
func workerCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "worker", Short: "Run pipelines (local runtime task queue), or serve a Kubernetes cluster (--cluster)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Cluster == "" {
				return run(cmd.Context(), *cfg, worker)
			}
			if err := cfg.ValidateCluster(); err != nil {
				return err
			}
			return run(cmd.Context(), *cfg, wire.InitClusterWorker)
		}}
	cfg.BindWorker(cmd.Flags())
	return cmd
}

func run[P app.Process](ctx context.Context, cfg config.Config, build func(context.Context, config.Config, *telemetry.Metrics) (P, func(), error)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	m := telemetry.New(telemetry.Options{TenantLabels: cfg.MetricsTenantLabels})
	p, cleanup, err := build(ctx, cfg, m)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer cleanup()
	return app.WithMetricsServer(p, cfg.MetricsAddr, m).Run(ctx)
}

// worker builds the local-runtime worker. It serves the example Go
// pipelines only where asked (--examples, on in atelier dev): the binary
// knows the examples, the wiring does not.
func worker(ctx context.Context, cfg config.Config, m *telemetry.Metrics) (*app.Worker, func(), error) {
	var gos []workflows.GoPipeline
	if cfg.Examples {
		gos = gopipeline.Examples()
	}
	return wire.InitWorker(ctx, cfg, m, gos)
}
