package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// SecretResolver opens a project's secrets by name (the vault). A name the
// project has no secret of is a catalog.ErrNotFound.
type SecretResolver interface {
	Resolve(ctx context.Context, project string, names []string) (map[string]string, error)
}

// WithSecrets lets steps reference project secrets (pipeline.SecretEnv),
// resolved through s just before their process starts. Without it a step
// that references one fails saying the worker has no secrets key.
func WithSecrets(s SecretResolver) Option { return func(r *Runner) { r.secrets = s } }

// resolveSecrets opens the secrets the step references. A missing secret
// or a worker without a key fails the step for good; a catalogue that
// cannot be reached is retried.
func (a *attempt) resolveSecrets(ctx context.Context) error {
	if len(a.req.Secrets) == 0 {
		return nil
	}
	if a.r.secrets == nil {
		return temporal.NewNonRetryableApplicationError(
			"the step references secrets but this worker has no secrets key (ATELIER_SECRETS_KEY_URL)", activities.ErrTypeInvalidStep, nil)
	}
	names := make([]string, 0, len(a.req.Secrets))
	for _, s := range a.req.Secrets {
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	values, err := a.r.secrets.Resolve(ctx, a.req.Project, names)
	if errors.Is(err, catalog.ErrNotFound) {
		return temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeInvalidStep, nil)
	}
	if err != nil {
		return fmt.Errorf("resolving the step's secrets: %w", err)
	}
	a.secretEnv = make([]string, 0, len(a.req.Secrets))
	for _, s := range a.req.Secrets {
		if s.File != "" {
			if a.secretFiles == nil {
				a.secretFiles = map[string]string{}
			}
			a.secretFiles[s.File] = values[s.Name]
			continue
		}
		a.secretEnv = append(a.secretEnv, s.Env+"="+values[s.Name])
	}
	a.redact = redact.New(values)
	return nil
}

func (a *attempt) secretsDir() string { return filepath.Join(a.attemptDir, "secrets") }

// writeSecretFiles puts the step's secret files ({file: ...} references)
// in a directory of the attempt's that only the step's user can read
// ($ATELIER_SECRETS), each 0400. dropSecretFiles removes them once the
// process has ended.
func (a *attempt) writeSecretFiles() error {
	if len(a.secretFiles) == 0 {
		return nil
	}
	dir := a.secretsDir()
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear secrets dir: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create secrets dir: %w", err)
	}
	for name, value := range a.secretFiles {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value), 0o400); err != nil {
			return fmt.Errorf("write secret file %s: %w", name, err)
		}
		if err := a.r.giveTo(p); err != nil {
			return err
		}
	}
	return a.r.giveTo(dir)
}

// dropSecretFiles removes the step's secret files: a value stays on the
// worker's disk no longer than the process that needed it.
func (a *attempt) dropSecretFiles() {
	if len(a.secretFiles) == 0 || a.left {
		return
	}
	if err := os.RemoveAll(a.secretsDir()); err != nil {
		a.logger.Warn("could not remove the step's secret files", zap.Error(err))
	}
}
