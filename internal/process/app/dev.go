package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/atelier-ml/atelier/activities/local"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/fsperm"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/store"
)

// Process is anything the dev stack runs until its context ends.
type Process interface {
	Run(ctx context.Context) error
}

// DevBuilders are the wire injectors the dev stack calls once Temporal and
// Postgres are up (passed in because wire/ imports this package).
type DevBuilders struct {
	Gateway func(ctx context.Context, cfg config.Config, m *telemetry.Metrics) (*Gateway, func(), error)
	Worker  func(ctx context.Context, cfg config.Config, m *telemetry.Metrics) (*Worker, func(), error)
}

// DevOptions configure `atelier dev`.
type DevOptions struct {
	// StateDir holds the Temporal database, a throwaway Postgres if one is
	// needed, logs and the admin token; git-ignored (.atelier).
	StateDir string
	// TemporalPort and UIPort fix the dev server ports (7233 / 8233).
	TemporalPort, UIPort int
}

// DefaultProject is created by the dev stack so the example works at once.
const DefaultProject = "default"

// RunDev brings up everything on one machine and keeps it running until ctx
// is cancelled: Temporal dev server (persistent), Postgres, migrations, an
// admin token, the gateway and a worker. It then stops what it started.
func RunDev(ctx context.Context, cfg config.Config, opts DevOptions, b DevBuilders, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, "atelier dev: "+format+"\n", args...) }
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	stateDir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return err
	}
	// Steps run below the state dir (its data/ holds their work dirs), so
	// they may traverse it but not list it; its files are owner-only.
	if err := os.Chmod(stateDir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}

	say("starting Temporal dev server (state in %s)…", filepath.Join(stateDir, "temporal.db"))
	ts, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{
		StateDir: stateDir, Port: opts.TemporalPort, UIPort: opts.UIPort,
		Namespace: cfg.Namespace, LogFile: filepath.Join(stateDir, "temporal.log"),
	}, say)
	if err != nil {
		return err
	}
	defer func() {
		say("stopping Temporal")
		_ = ts.Stop()
	}()
	cfg.TemporalHostPort, cfg.TemporalUIURL = ts.HostPort(), ts.UIURL()

	if cfg.DatabaseURL == "" {
		url, stop, err := devstack.EnsurePostgres(ctx, stateDir, say)
		if err != nil {
			return err
		}
		defer func() { _ = stop() }()
		cfg.DatabaseURL = url
	}
	// Other processes started by hand (a cluster worker, say) find the
	// database here.
	if err := os.WriteFile(filepath.Join(stateDir, "database-url"), []byte(cfg.DatabaseURL+"\n"), 0o600); err != nil {
		return fmt.Errorf("save database URL: %w", err)
	}
	if cfg.DataDir == config.Default().DataDir {
		cfg.DataDir = devDataDir(stateDir, cfg.StepUser, say)
	}
	cfg.Examples = true // the banner's example commands start them
	// Webhooks to a receiver on this machine are what a developer tries.
	cfg.WebhookAllowPrivate = true
	token, err := bootstrap(ctx, cfg, stateDir)
	if err != nil {
		return err
	}
	if cfg.SecretsKeyURL == "" {
		if cfg.SecretsKeyURL, err = devSecretsKey(stateDir); err != nil {
			return err
		}
	}
	if cfg.ArtifactsURL == "" {
		// Gateway and worker run here and share the directory.
		abs, err := filepath.Abs(filepath.Join(stateDir, "artifacts"))
		if err != nil {
			return err
		}
		cfg.ArtifactsURL = "file://" + abs
	}

	// One registry: the gateway's /metrics also shows the worker's run,
	// step and Temporal SDK metrics.
	m := telemetry.New(telemetry.Options{TenantLabels: cfg.MetricsTenantLabels})
	gw, gwClean, err := b.Gateway(ctx, cfg, m)
	if err != nil {
		return fmt.Errorf("build gateway: %w", err)
	}
	defer gwClean()
	wk, wkClean, err := b.Worker(ctx, cfg, m)
	if err != nil {
		return fmt.Errorf("build worker: %w", err)
	}
	defer wkClean()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []Process{gw, wk} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = p.Run(ctx); errs[i] != nil {
				cancel() // one process failing stops the stack
			}
		}()
	}
	addr, err := gw.Addr(ctx)
	if err == nil {
		printBanner(out, "http://"+addr, cfg.TemporalUIURL, cfg.TemporalHostPort, cfg.Namespace, token, stateDir)
	}
	select {
	case <-ctx.Done():
	case <-ts.Exited():
		say("Temporal dev server exited unexpectedly:\n%s", ts.LogTail())
		cancel()
	}
	say("stopping…")
	wg.Wait()
	return errors.Join(errs...)
}

// bootstrap migrates, creates the default project and makes sure an admin
// token exists. The token is kept in <state>/admin-token so restarts print
// the same one.
func bootstrap(ctx context.Context, cfg config.Config, stateDir string) (string, error) {
	s, err := store.Open(ctx, cfg.DatabaseURL, store.WithApplicationName("atelier-dev"))
	if err != nil {
		return "", err
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return "", err
	}
	if _, err := s.CreateProject(ctx, catalog.Project{Name: DefaultProject, Description: "Created by atelier dev"}); err != nil && !errors.Is(err, catalog.ErrConflict) {
		return "", fmt.Errorf("create default project: %w", err)
	}
	path := filepath.Join(stateDir, "admin-token")
	secret := ""
	if b, err := os.ReadFile(path); err == nil {
		secret = strings.TrimSpace(string(b))
	}
	if secret == "" {
		secret, _ = tokens.New()
		if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("save admin token: %w", err)
		}
	}
	if err := s.EnsureAdminToken(ctx, "dev-admin", tokens.Hash(secret)); err != nil {
		return "", fmt.Errorf("bootstrap admin token: %w", err)
	}
	return secret, nil
}

// devSecretsKey is the dev stack's key for project secrets, made once
// into <state>/secrets-key (0600) as a base64key:// URL. Losing it loses
// every secret of the dev stack (docs/operations.md).
func devSecretsKey(stateDir string) (string, error) {
	path := filepath.Join(stateDir, "secrets-key")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	u, err := secretbox.NewLocalKeyURL()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(u+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save the secrets key: %w", err)
	}
	return u, nil
}

func printBanner(out io.Writer, api, ui, temporal, ns, token, stateDir string) {
	fmt.Fprintf(out, `
Atelier is running. Ctrl-C stops everything.

  Web UI       %[1]s/ui/   (sign in with the admin token)
  REST API     %[1]s   (OpenAPI: %[1]s/openapi.json)
  Metrics      %[1]s/metrics   (gateway, worker and Temporal SDK; Grafana: deploy/grafana/atelier.json)
  Temporal UI  %[2]s/namespaces/%[4]s/workflows
  Temporal     %[3]s   namespace %[4]s   (temporal workflow list --address %[3]s --namespace %[4]s)
  Admin token  %[5]s   (also in %[6]s/admin-token)

Try it:

  export ATELIER_URL=%[1]s ATELIER_TOKEN=%[5]s
  curl -sS -H "Authorization: Bearer $ATELIER_TOKEN" -H 'Content-Type: application/yaml' \
    --data-binary @examples/pipelines/train-evaluate.yaml \
    $ATELIER_URL/v1/projects/default/pipelines/train-evaluate/versions
  curl -sS -H "Authorization: Bearer $ATELIER_TOKEN" -H 'Content-Type: application/json' \
    -d '{"pipeline":"train-evaluate","params":{"dataset":"iris"}}' \
    $ATELIER_URL/v1/projects/default/runs

Run ray/spark steps on a Kubernetes cluster by starting its worker:

  go run ./cmd/atelier worker --cluster my-k8s --kubeconfig ~/.kube/config \
    --temporal %[3]s --database-url "$(cat %[6]s/database-url)"

`, api, ui, temporal, ns, token, stateDir)
}

// devDataDir is <state>/data, unless steps run as another user (the dev
// stack runs as root) who cannot reach it, as in a clone under /root: then
// a directory of its own under the system temp dir, so `make dev` works
// from any clone.
func devDataDir(stateDir, stepUser string, say func(string, ...any)) string {
	dir := filepath.Join(stateDir, "data")
	u, err := local.ParseStepUser(stepUser, os.Geteuid())
	if err != nil || u == nil || fsperm.Reachable(dir, u.UID, u.GID) == nil {
		return dir // a bad step user is reported when the worker starts
	}
	sum := sha256.Sum256([]byte(stateDir))
	alt := filepath.Join(os.TempDir(), "atelier-data-"+hex.EncodeToString(sum[:6]))
	say("steps run as uid %d, which cannot reach %s; step data goes to %s", u.UID, dir, alt)
	return alt
}
