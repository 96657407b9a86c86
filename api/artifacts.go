package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"time"

	"gocloud.dev/blob"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
)

// ArtifactLineage reads what the run mirror recorded about artifacts
// (internal/store). Every method is scoped by project: another tenant's
// artifact is catalog.ErrNotFound.
type ArtifactLineage interface {
	GetArtifact(ctx context.Context, project, id string) (catalog.ArtifactLineage, error)
	RunArtifacts(ctx context.Context, project, run string) ([]catalog.StoredArtifact, []catalog.ConsumedArtifact, error)
}

// ArtifactBytes reads stored artifacts (artifactstore.Store).
type ArtifactBytes interface {
	ReadManifest(ctx context.Context, project, digest string) (artifactstore.Manifest, error)
	Reader(ctx context.Context, project, digest string) (*blob.Reader, error)
	SignedURL(ctx context.Context, project, digest string, expiry time.Duration) (string, error)
}

var _ ArtifactBytes = (*artifactstore.Store)(nil)

// WithArtifacts serves artifact lineage from l and their bytes from b.
// Without it the artifact routes answer 503; with a nil b, lineage is
// served and downloads answer 503.
func WithArtifacts(l ArtifactLineage, b ArtifactBytes) Option {
	return func(s *server) { s.lineage, s.artifactBytes = l, b }
}

func (s *server) artifactsOn() error {
	if s.lineage == nil {
		return newProblem(ptUnavailable, "artifacts are not served by this gateway")
	}
	return nil
}

func artifactErr(project, id string, err error) error {
	if errors.Is(err, catalog.ErrNotFound) || errors.Is(err, artifactstore.ErrNotFound) {
		return notFound("artifact %s not found in project %q", id, project)
	}
	return internalError(err)
}

// ListRunArtifacts serves what a run wrote and read.
func (s *server) ListRunArtifacts(ctx context.Context, req gen.ListRunArtifactsRequestObject) (gen.ListRunArtifactsResponseObject, error) {
	if err := s.artifactsOn(); err != nil {
		return nil, err
	}
	if _, err := s.getRun(ctx, req.Project, req.Run); err != nil {
		return nil, err
	}
	produced, consumed, err := s.lineage.RunArtifacts(ctx, req.Project, req.Run)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.ListRunArtifacts200JSONResponse{
		Produced: views(produced, storedArtifactView),
		Consumed: views(consumed, consumedArtifactView),
	}, nil
}

// GetArtifact serves one artifact and its lineage.
func (s *server) GetArtifact(ctx context.Context, req gen.GetArtifactRequestObject) (gen.GetArtifactResponseObject, error) {
	if err := s.artifactsOn(); err != nil {
		return nil, err
	}
	l, err := s.lineage.GetArtifact(ctx, req.Project, req.Artifact)
	if err != nil {
		return nil, artifactErr(req.Project, req.Artifact, err)
	}
	return gen.GetArtifact200JSONResponse{
		Artifact:  storedArtifactView(l.Artifact),
		MadeFrom:  views(l.MadeFrom, consumedArtifactView),
		Consumers: views(l.Consumers, artifactUseView),
	}, nil
}

func (s *server) bytesOn() error {
	if s.artifactBytes == nil {
		return newProblem(ptUnavailable, "this gateway has no artifact store (ATELIER_ARTIFACTS_URL): artifact bytes cannot be read here")
	}
	return nil
}

// ListArtifactFiles serves a directory artifact's manifest.
func (s *server) ListArtifactFiles(ctx context.Context, req gen.ListArtifactFilesRequestObject) (gen.ListArtifactFilesResponseObject, error) {
	if err := s.artifactsOn(); err != nil {
		return nil, err
	}
	l, err := s.lineage.GetArtifact(ctx, req.Project, req.Artifact)
	if err != nil {
		return nil, artifactErr(req.Project, req.Artifact, err)
	}
	a := l.Artifact
	if a.Files == 0 {
		return gen.ListArtifactFiles200JSONResponse{Files: []gen.ArtifactFile{{Path: "", Digest: a.Digest, Size: a.Size}}}, nil
	}
	if err := s.bytesOn(); err != nil {
		return nil, err
	}
	m, err := s.artifactBytes.ReadManifest(ctx, req.Project, a.Digest)
	if err != nil {
		return nil, artifactErr(req.Project, req.Artifact, err)
	}
	out := gen.ArtifactFileList{Files: make([]gen.ArtifactFile, len(m.Files))}
	for i, f := range m.Files {
		out.Files[i] = gen.ArtifactFile{Path: f.Path, Digest: f.Digest, Size: f.Size, Executable: opt(f.Executable)}
	}
	return gen.ListArtifactFiles200JSONResponse(out), nil
}

// GetArtifactContent redirects to a signed URL of the bytes, or streams
// them (with Range support) where the store cannot sign.
func (s *server) GetArtifactContent(ctx context.Context, req gen.GetArtifactContentRequestObject) (gen.GetArtifactContentResponseObject, error) {
	if err := s.artifactsOn(); err != nil {
		return nil, err
	}
	l, err := s.lineage.GetArtifact(ctx, req.Project, req.Artifact)
	if err != nil {
		return nil, artifactErr(req.Project, req.Artifact, err)
	}
	if err := s.bytesOn(); err != nil {
		return nil, err
	}
	a, p := l.Artifact, req.Params
	digest, size, name := a.Digest, a.Size, a.Name
	switch {
	case a.Files == 0 && p.Path != nil:
		return nil, newProblem(ptInvalid, "artifact %s is a file: path applies to directory artifacts", a.ID).
			withErrors([]gen.FieldError{{Path: "query.path", Message: "not a directory artifact"}})
	case a.Files > 0 && p.Path == nil:
		return nil, newProblem(ptInvalid, "artifact %s is a directory of %d files: name one with path (…/files lists them)", a.ID, a.Files).
			withErrors([]gen.FieldError{{Path: "query.path", Message: "required for a directory artifact"}})
	case a.Files > 0:
		m, err := s.artifactBytes.ReadManifest(ctx, req.Project, a.Digest)
		if err != nil {
			return nil, artifactErr(req.Project, req.Artifact, err)
		}
		found := false
		for _, f := range m.Files {
			if f.Path == *p.Path {
				digest, size, name, found = f.Digest, f.Size, path.Base(f.Path), true
				break
			}
		}
		if !found {
			return nil, notFound("artifact %s has no file %q", a.ID, *p.Path)
		}
	}
	if derefOr(p.Redirect, true) {
		expiry := time.Duration(derefOr(p.ExpiresIn, 300)) * time.Second
		u, err := s.artifactBytes.SignedURL(ctx, req.Project, digest, expiry)
		switch {
		case err == nil:
			return artifactRedirect(u), nil
		case !errors.Is(err, artifactstore.ErrCannotSign):
			return nil, internalError(fmt.Errorf("sign a URL for %s: %w", digest, err))
		}
	}
	r, err := s.artifactBytes.Reader(ctx, req.Project, digest)
	if err != nil {
		return nil, artifactErr(req.Project, req.Artifact, err)
	}
	return artifactStream{r: r, req: requestFrom(ctx), name: name, size: size, digest: digest, modTime: l.Artifact.CreatedAt}, nil
}

type artifactRedirect string

func (u artifactRedirect) VisitGetArtifactContentResponse(w http.ResponseWriter) error {
	w.Header().Set("Location", string(u))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTemporaryRedirect)
	return nil
}

// artifactStream streams stored bytes with http.ServeContent: Range and
// If-Range requests get 206, and nothing is buffered beyond a copy
// buffer, whatever the size.
type artifactStream struct {
	r       *blob.Reader
	req     *http.Request
	name    string
	size    int64
	digest  string
	modTime time.Time
}

func (a artifactStream) VisitGetArtifactContentResponse(w http.ResponseWriter) error {
	defer a.r.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", "attachment; filename="+strconv.Quote(a.name))
	h.Set("ETag", strconv.Quote(a.digest)) // content-addressed: the digest is the version
	if a.req == nil {
		h.Set("Content-Length", strconv.FormatInt(a.size, 10))
		w.WriteHeader(http.StatusOK)
		_, err := io.Copy(w, a.r)
		return err
	}
	http.ServeContent(w, a.req, "", a.modTime, a.r)
	return nil
}
