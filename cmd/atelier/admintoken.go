package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/store"
)

// adminTokenCmd mints the first admin token of an installation; every other
// token is created through the REST API with an admin token.
func adminTokenCmd(cfg *config.Config) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "admin-token",
		Short: "Create an admin API token and print its secret (shown once)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.DatabaseURL == "" {
				return fmt.Errorf("no database: set --database-url or ATELIER_DATABASE_URL")
			}
			return createAdminToken(cmd.Context(), cfg.DatabaseURL, name, cmd)
		},
	}
	cmd.Flags().StringVar(&name, "name", "admin", "token name (shown as the requester of what it does)")
	return cmd
}

func createAdminToken(ctx context.Context, url, name string, cmd *cobra.Command) error {
	s, err := store.Open(ctx, url, store.WithApplicationName("atelier-admin-token"))
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	secret, hash := tokens.New()
	if err := s.EnsureAdminToken(ctx, name, hash); err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), secret)
	return nil
}
