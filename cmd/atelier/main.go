// Command atelier is Atelier's single binary: `atelier gateway` serves the
// REST API, `atelier worker` runs pipelines (`atelier worker --cluster NAME`
// runs the steps sent to one Kubernetes cluster), `atelier dev` runs
// everything on one machine.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/internal/app"
	"github.com/atelier-ml/atelier/internal/config"
	"github.com/atelier-ml/atelier/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cfg config.Config
	root := &cobra.Command{Use: "atelier", Short: "ML pipelines on Temporal", SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error { return cfg.EnvError() }}
	cfg.Bind(root.PersistentFlags())

	dev := app.DevOptions{}
	devCmd := &cobra.Command{Use: "dev", Short: "Run Temporal, Postgres, the gateway and a worker on this machine",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return app.RunDev(cmd.Context(), cfg, dev, app.DevBuilders{Gateway: wire.InitGateway, Worker: wire.InitWorker}, os.Stdout)
		}}
	devCmd.Flags().StringVar(&dev.StateDir, "state-dir", ".atelier", "dev stack state (Temporal db, Postgres, logs, admin token)")
	devCmd.Flags().IntVar(&dev.TemporalPort, "temporal-port", 7233, "Temporal frontend port")
	devCmd.Flags().IntVar(&dev.UIPort, "ui-port", 8233, "Temporal Web UI port")

	root.AddCommand(devCmd, adminTokenCmd(&cfg),
		&cobra.Command{Use: "gateway", Short: "Serve the REST API", RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cfg, wire.InitGateway)
		}},
		workerCmd(&cfg),
	)
	if err := root.ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}

// workerCmd runs a local-runtime worker, or with --cluster the worker of
// one Kubernetes cluster.
func workerCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "worker", Short: "Run pipelines (local runtime task queue), or serve a Kubernetes cluster (--cluster)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Cluster == "" {
				return run(cmd.Context(), *cfg, wire.InitWorker)
			}
			if err := cfg.ValidateCluster(); err != nil {
				return err
			}
			return run(cmd.Context(), *cfg, wire.InitClusterWorker)
		}}
	cfg.BindWorker(cmd.Flags())
	return cmd
}

func run[P app.Process](ctx context.Context, cfg config.Config, build func(context.Context, config.Config) (P, func(), error)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	p, cleanup, err := build(ctx, cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer cleanup()
	return p.Run(ctx)
}
