package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// locateModel makes a registered model's bytes (model.ref, resolved in
// model.registered) a local path the engine loads, downloaded by the
// worker: replicas, like steps, never hold the store's credentials. The
// bytes land once per project and digest under the data dir, shared by
// every revision and replica that serves them (artifactstore.Get puts
// them in place complete or not at all, so a download cut short is
// started again). A spec without a registered model is returned as is.
func (s *Serving) locateModel(ctx context.Context, project string, spec inference.EndpointSpec, wait func(string)) (inference.EndpointSpec, error) {
	reg := spec.Model.Registered
	if reg == nil {
		return spec, nil
	}
	if s.r.artifacts == nil {
		return spec, errors.New("this worker has no artifact store (ATELIER_ARTIFACTS_URL) to fetch the registered model from")
	}
	hexd, ok := strings.CutPrefix(reg.Digest, "sha256:")
	if !ok || len(hexd) != 64 || strings.ContainsAny(hexd, "/.") {
		return spec, fmt.Errorf("registered model %s version %d has no valid digest (%q)", reg.Model, reg.Version, reg.Digest)
	}
	if err := mkdirChain(s.r.dataDir, "models", project); err != nil {
		return spec, err
	}
	dest := filepath.Join(s.r.dataDir, "models", project, hexd)
	if _, err := os.Stat(dest); err != nil {
		// One download per digest, whoever asks: replicas of a revision,
		// or revisions serving the same version, wait for the same one;
		// another model's download goes on beside it.
		ch := s.fetches.DoChan(project+"/"+hexd, func() (any, error) {
			if _, err := os.Stat(dest); err == nil {
				return nil, nil
			}
			wait(fmt.Sprintf("fetching model %s version %d (%s) from the artifact store", reg.Model, reg.Version, artifactstore.HumanBytes(reg.Size)))
			o := artifactstore.Object{Digest: reg.Digest, Size: reg.Size, Files: reg.Files}
			// Not the asker's context: a replica stopped meanwhile must
			// not cut the download short for the others.
			return nil, s.r.artifacts.Get(context.WithoutCancel(ctx), project, o, dest)
		})
		select {
		case <-ctx.Done():
			return spec, ctx.Err()
		case res := <-ch:
			if res.Err != nil {
				return spec, fmt.Errorf("fetch model %s version %d: %w", reg.Model, reg.Version, res.Err)
			}
		}
	}
	spec.Model = spec.Model.Located(dest)
	return spec, nil
}

// replicaSecrets resolves the secrets spec names into environment entries
// for a replica, and a redactor for what Atelier reads back from its log
// (the last lines of an engine that exited reach the endpoint's status).
func (s *Serving) replicaSecrets(ctx context.Context, project string, spec inference.EndpointSpec) ([]string, *redact.Redactor, error) {
	if len(spec.Secrets) == 0 {
		return nil, nil, nil
	}
	if s.r.secrets == nil {
		return nil, nil, errors.New("the endpoint references secrets but this worker has no secrets key (ATELIER_SECRETS_KEY_URL)")
	}
	names := make([]string, 0, len(spec.Secrets))
	for _, sec := range spec.Secrets {
		if !slices.Contains(names, sec.Name) {
			names = append(names, sec.Name)
		}
	}
	values, err := s.r.secrets.Resolve(ctx, project, names)
	if err != nil {
		return nil, nil, fmt.Errorf("resolving the endpoint's secrets: %w", err)
	}
	env := make([]string, 0, len(spec.Secrets))
	for _, sec := range spec.Secrets {
		env = append(env, sec.Env+"="+values[sec.Name])
	}
	return env, redact.New(values), nil
}
