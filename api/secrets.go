package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/schema"
)

// Secrets is the project secrets vault (internal/vault implements it):
// values go in sealed and never come back out; every method is scoped by
// project, so another tenant's secret is not found.
type Secrets interface {
	Put(ctx context.Context, project, name string, value []byte, actor string) (catalog.Secret, bool, error)
	Delete(ctx context.Context, project, name, actor string) error
	Get(ctx context.Context, project, name string) (catalog.Secret, error)
	List(ctx context.Context, project string) ([]catalog.Secret, error)
	Events(ctx context.Context, project string, max int) ([]catalog.SecretEvent, error)
}

// WithSecrets serves /secrets through v; without it they are 503 (no
// secrets key configured).
func WithSecrets(v Secrets) Option { return func(s *server) { s.secrets = v } }

var ptInvalidSecret = problemType{"invalid-secret", "Invalid secret", http.StatusUnprocessableEntity}

func (s *server) secretsOn() error {
	if s.secrets == nil {
		return newProblem(ptUnavailable, "secrets are not served by this gateway: it has no secrets key (ATELIER_SECRETS_KEY_URL)")
	}
	return nil
}

// PutSecret creates or replaces a secret; the value is never echoed.
func (s *server) PutSecret(ctx context.Context, req gen.PutSecretRequestObject) (gen.PutSecretResponseObject, error) {
	if err := s.secretsOn(); err != nil {
		return nil, err
	}
	value := deref(deref(req.Body).Value)
	var fields []gen.FieldError
	if !schema.ValidSecretName(req.Secret) {
		fields = append(fields, gen.FieldError{Path: "secret", Message: "lowercase letters, digits, '.', '_' and '-'; at most 63"})
	}
	switch {
	case value == "":
		fields = append(fields, gen.FieldError{Path: "value", Message: "must not be empty"})
	case len(value) > catalog.MaxSecretValue:
		fields = append(fields, gen.FieldError{Path: "value", Message: fmt.Sprintf("at most %d bytes, got %d", catalog.MaxSecretValue, len(value))})
	case strings.ContainsRune(value, 0):
		fields = append(fields, gen.FieldError{Path: "value", Message: "must not contain a NUL byte (it becomes an environment variable)"})
	}
	if len(fields) > 0 {
		return nil, newProblem(ptInvalidSecret, "%s", summarize(fields)).withErrors(fields)
	}
	sec, created, err := s.secrets.Put(ctx, req.Project, req.Secret, []byte(value), principal(ctx).Name)
	if err != nil {
		return nil, secretErr(req.Project, req.Secret, err)
	}
	if created {
		return gen.PutSecret201JSONResponse(secretView(sec)), nil
	}
	return gen.PutSecret200JSONResponse(secretView(sec)), nil
}

// GetSecret reads a secret's metadata.
func (s *server) GetSecret(ctx context.Context, req gen.GetSecretRequestObject) (gen.GetSecretResponseObject, error) {
	if err := s.secretsOn(); err != nil {
		return nil, err
	}
	sec, err := s.secrets.Get(ctx, req.Project, req.Secret)
	if err != nil {
		return nil, secretErr(req.Project, req.Secret, err)
	}
	return gen.GetSecret200JSONResponse(secretView(sec)), nil
}

// ListSecrets lists a project's secrets.
func (s *server) ListSecrets(ctx context.Context, req gen.ListSecretsRequestObject) (gen.ListSecretsResponseObject, error) {
	if err := s.secretsOn(); err != nil {
		return nil, err
	}
	list, err := s.secrets.List(ctx, req.Project)
	if err != nil {
		return nil, secretErr(req.Project, "", err)
	}
	out := gen.SecretList{Items: make([]gen.Secret, len(list))}
	for i, sec := range list {
		out.Items[i] = secretView(sec)
	}
	return gen.ListSecrets200JSONResponse(out), nil
}

// DeleteSecret deletes a secret.
func (s *server) DeleteSecret(ctx context.Context, req gen.DeleteSecretRequestObject) (gen.DeleteSecretResponseObject, error) {
	if err := s.secretsOn(); err != nil {
		return nil, err
	}
	if err := s.secrets.Delete(ctx, req.Project, req.Secret, principal(ctx).Name); err != nil {
		return nil, secretErr(req.Project, req.Secret, err)
	}
	return gen.DeleteSecret204Response{}, nil
}

// ListSecretEvents serves the secrets audit.
func (s *server) ListSecretEvents(ctx context.Context, req gen.ListSecretEventsRequestObject) (gen.ListSecretEventsResponseObject, error) {
	if err := s.secretsOn(); err != nil {
		return nil, err
	}
	n := 100
	if req.Params.PageSize != nil {
		n = *req.Params.PageSize
	}
	events, err := s.secrets.Events(ctx, req.Project, n)
	if err != nil {
		return nil, secretErr(req.Project, "", err)
	}
	out := gen.SecretEventList{Items: make([]gen.SecretEvent, len(events))}
	for i, e := range events {
		out.Items[i] = secretEventView(e)
	}
	return gen.ListSecretEvents200JSONResponse(out), nil
}

func secretErr(project, name string, err error) error {
	if errors.Is(err, catalog.ErrNotFound) {
		if name == "" {
			return notFound("project %q not found", project)
		}
		return notFound("secret %q not found in project %q", name, project)
	}
	return internalError(err)
}
