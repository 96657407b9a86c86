package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/schema"
)

// ModelReader reads the model registry (internal/store).
type ModelReader interface {
	GetModel(ctx context.Context, project, name string) (Model, error)
	GetModelVersion(ctx context.Context, project, model, ref string) (ModelVersion, error)
}

// ResolveModel finds the version ref ("<model>@<alias|version>", or
// "<model>" for its latest) names in project. What does not exist (or is
// not a reference) is a problem, a sentence naming it for the user; an
// error is the registry's own failure (retry). Pipeline inputs, endpoint
// specs and endpoints following an alias all resolve through it, so they
// agree on what a reference names.
func ResolveModel(ctx context.Context, r ModelReader, project, ref string) (v ModelVersion, problem string, err error) {
	mr, err := schema.ParseModelRef(ref)
	if err != nil {
		return ModelVersion{}, err.Error(), nil
	}
	m, err := r.GetModel(ctx, project, mr.Model)
	switch {
	case errors.Is(err, ErrNotFound):
		return ModelVersion{}, fmt.Sprintf("no model %s in project %s", mr.Model, project), nil
	case err != nil:
		return ModelVersion{}, "", err
	}
	at := mr.Ref
	if at == "" {
		if m.Latest == 0 {
			return ModelVersion{}, fmt.Sprintf("model %s has no version yet", mr.Model), nil
		}
		at = strconv.Itoa(m.Latest)
	}
	v, err = r.GetModelVersion(ctx, project, mr.Model, at)
	switch {
	case errors.Is(err, ErrNotFound):
		return ModelVersion{}, fmt.Sprintf("model %s has no version or alias %q in project %s", mr.Model, at, project), nil
	case err != nil:
		return ModelVersion{}, "", err
	}
	return v, "", nil
}

// ResolveEndpointModel records in m.Registered the version m.Ref names
// (nil without a Ref; whatever Registered said before is replaced, so a
// spec read back from an endpoint and sent again is resolved afresh).
// problem and err are ResolveModel's.
func ResolveEndpointModel(ctx context.Context, r ModelReader, project string, m *inference.Model) (problem string, err error) {
	m.Registered = nil
	if m.Ref == "" {
		return "", nil
	}
	v, problem, err := ResolveModel(ctx, r, project, m.Ref)
	if problem != "" || err != nil {
		return problem, err
	}
	a := v.Artifact
	m.Registered = &inference.RegisteredModel{
		Model: v.Model, Version: v.Version, Alias: schema.SplitModelRef(m.Ref).Alias(),
		ArtifactID: a.ID, Digest: a.Digest, Size: a.Size, Files: a.Files,
		Run: a.Producer.Run, Step: a.Producer.Step,
	}
	return "", nil
}

// VersionNamedError refuses to delete a version that aliases name: move
// or remove them first. It is an ErrConflict.
type VersionNamedError struct {
	Model   string
	Version int
	Aliases []string
}

func (e *VersionNamedError) Error() string {
	return fmt.Sprintf("version %d of model %s is named by alias %s: move or remove it first", e.Version, e.Model, strings.Join(e.Aliases, ", "))
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *VersionNamedError) Is(target error) bool { return target == ErrConflict }

// ModelVersionRef records that an endpoint references a model version:
// a revision of the endpoint serves it, or an update in flight is about
// to (a reservation recorded before the update is submitted). While one
// exists the version cannot be deleted (VersionReferencedError).
type ModelVersionRef struct {
	Project    string
	Model      string
	Version    int
	Endpoint   string
	ReservedAt time.Time
}

// ModelReferrer records endpoints' references to model versions
// (internal/store). ReferenceModelVersion fails with ErrNotFound when the
// version does not exist or is deleted (also when it was deleted while
// the reference was being recorded): the two serialize on the version.
type ModelReferrer interface {
	ReferenceModelVersion(ctx context.Context, project, endpoint, model string, version int) error
}

// VersionReferencedError refuses to delete a version that endpoints
// reference (revisions they keep for rollback, or an update in flight).
// It is an ErrConflict.
type VersionReferencedError struct {
	Model     string
	Version   int
	Endpoints []string
}

func (e *VersionReferencedError) Error() string {
	return fmt.Sprintf("version %d of model %s is referenced by endpoint %s: an endpoint keeps every revision for rollback; delete the endpoint first",
		e.Version, e.Model, strings.Join(e.Endpoints, ", "))
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *VersionReferencedError) Is(target error) bool { return target == ErrConflict }

// ReferenceEndpointModel resolves m.Ref as ResolveEndpointModel does, then
// records that endpoint references the version before the caller submits
// the spec to the endpoint, so that the version cannot be deleted from
// then on. A version deleted between the resolution and the record is a
// problem, as one that does not exist is.
func ReferenceEndpointModel(ctx context.Context, r ModelReader, refs ModelReferrer, project, endpoint string, m *inference.Model) (problem string, err error) {
	if problem, err := ResolveEndpointModel(ctx, r, project, m); problem != "" || err != nil || m.Registered == nil {
		return problem, err
	}
	reg := m.Registered
	err = refs.ReferenceModelVersion(ctx, project, endpoint, reg.Model, reg.Version)
	if errors.Is(err, ErrNotFound) {
		m.Registered = nil
		return fmt.Sprintf("version %d of model %s was deleted while it was being resolved", reg.Version, reg.Model), nil
	}
	return "", err
}
