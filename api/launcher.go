package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"gocloud.dev/blob"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
)

// LauncherBytes is what the gateway does with artifact bytes for the
// launchers of Kubernetes steps (artifactstore.Store).
type LauncherBytes interface {
	ReadManifest(ctx context.Context, project, digest string) (artifactstore.Manifest, error)
	Reader(ctx context.Context, project, digest string) (*blob.Reader, error)
	SignedURL(ctx context.Context, project, digest string, expiry time.Duration) (string, error)
	SignedPutURL(ctx context.Context, project, digest string, size int64, contentType string, expiry time.Duration) (artifactstore.SignedPut, error)
	PutVerified(ctx context.Context, project, digest string, size int64, r io.Reader, contentType string, mem *semaphore.Weighted) error
	Fresh(ctx context.Context, project, digest string) (bool, error)
}

var _ LauncherBytes = (*artifactstore.Store)(nil)

// WithLauncher serves the launchers of Kubernetes steps (package launch):
// it opens their grants with box and signs URLs to b's objects (or moves
// the bytes itself when b cannot sign). Without it those routes answer
// 503 and Kubernetes steps with artifacts fail saying so.
func WithLauncher(box grant.Box, b LauncherBytes) Option {
	return func(s *server) { s.launchBox, s.launchBytes = box, b }
}

// ArtifactUsage reads how many bytes a project's artifacts hold.
type ArtifactUsage interface {
	ArtifactBytesUsed(ctx context.Context, project string) (int64, error)
}

// WithLauncherLimit caps every project's artifacts at limit bytes for the
// launchers' uploads (the local runtime's worker checks the same cap
// itself): a sign request whose outputs would pass it is refused (507),
// and the step fails naming the cap. 0: no cap.
func WithLauncherLimit(limit int64, usage ArtifactUsage) Option {
	return func(s *server) { s.launchLimit, s.launchUsage = limit, usage }
}

// maxSignedPut is the largest object a signed URL uploads: S3 takes at
// most 5 GiB in one PUT. Larger ones go through the gateway, which
// uploads them in parts.
const maxSignedPut = 5 << 30

// maxLauncherObject is the largest object a launcher may store (S3's
// limit on an object).
const maxLauncherObject = 5 << 40

// launcherUploadBudget bounds the memory of the uploads the gateway runs
// for launchers at once (each holds up to ~32 MiB of part buffers, see
// artifactstore): more wait for their turn.
const launcherUploadBudget = 128 << 20

// launcherURLExpiry is how long a signed URL works: a transfer must start
// within it (a started one runs to its end). Launchers use a URL they
// signed ahead (launch.Client.Presign) for a third of it.
const launcherURLExpiry = launch.URLExpiry

// launcherStats is how many stats of the store one sign request runs at
// once (a request names at most launch.MaxSign objects).
const launcherStats = 16

// launcherRoutes registers the launcher's routes. They are authenticated
// by a grant, not a token (launcherGrant), and stream their bodies.
func (s *server) launcherRoutes(e *echo.Echo) {
	s.routes["POST "+launch.SignPath] = route{launcher: true}
	s.routes["GET "+launch.ObjectsPath+":digest"] = route{launcher: true}
	s.routes["PUT "+launch.ObjectsPath+":digest"] = route{launcher: true}
	e.POST(launch.SignPath, s.launcherSign)
	e.GET(launch.ObjectsPath+":digest", s.launcherGet)
	e.PUT(launch.ObjectsPath+":digest", s.launcherPut)
}

// launcherGrant opens the request's grant and checks its run is still
// open: a grant dies with its run.
func (s *server) launcherGrant(c echo.Context) (grant.Grant, error) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || token == "" {
		return grant.Grant{}, newProblem(ptUnauthenticated, "a launcher sends its attempt's grant as a Bearer token").
			withHeader("WWW-Authenticate", `Bearer realm="atelier-launcher"`)
	}
	if s.launchBox == nil || s.launchBytes == nil {
		return grant.Grant{}, newProblem(ptUnavailable, "this gateway does not serve step launchers: it needs the secrets key (ATELIER_SECRETS_KEY_URL) and the artifact store (ATELIER_ARTIFACTS_URL)")
	}
	ctx := c.Request().Context()
	g, live, err := s.grants.open(ctx, s.launchBox, strings.TrimSpace(token), s.now())
	if err != nil {
		return grant.Grant{}, newProblem(ptUnauthenticated, "not a valid launcher grant, or it expired")
	}
	if live {
		return g, nil
	}
	if err := s.grantAlive(ctx, g); err != nil {
		return grant.Grant{}, err
	}
	s.grants.alive(strings.TrimSpace(token), s.now())
	return g, nil
}

// grantAlive checks what a grant belongs to still exists: a step's run
// has not ended, an endpoint is not deleted.
func (s *server) grantAlive(ctx context.Context, g grant.Grant) error {
	if g.Endpoint != "" {
		if s.endpoints == nil {
			return newProblem(ptUnavailable, "endpoints are not served by this gateway")
		}
		_, err := s.endpoints.Status(ctx, g.Project, g.Endpoint)
		switch {
		case errors.Is(err, endpointclient.ErrNotFound):
			return newProblem(ptUnauthenticated, "the grant's endpoint %s is gone", g.Endpoint)
		case err != nil:
			return internalError(err)
		}
		return nil
	}
	run, err := s.cat.GetRun(ctx, g.Project, g.Run)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return newProblem(ptUnauthenticated, "the grant's run %s is gone", g.Run)
	case err != nil:
		return internalError(err)
	case run.State.Terminal():
		return newProblem(ptUnauthenticated, "the grant's run %s has ended (%s)", g.Run, run.State)
	}
	return nil
}

// grantCache keeps opened grants by their token's hash until they
// expire (a launcher asks once per object, and opening may cost a KMS
// call), and when what they belong to was last found alive: that is
// checked again after grantRecheck. Refusals are not cached.
type grantCache struct {
	mu sync.Mutex
	m  map[[32]byte]cachedGrant
}

type cachedGrant struct {
	g       grant.Grant
	checked time.Time // zero: not yet
}

// maxCachedGrants bounds grantCache (a grant is a few hundred bytes).
const maxCachedGrants = 4096

// grantRecheck is how long a run or endpoint found alive is believed: a
// grant outlives its run by at most that.
const grantRecheck = 30 * time.Second

// open opens token, from the cache when it can; live says its run or
// endpoint was found alive less than grantRecheck ago.
func (c *grantCache) open(ctx context.Context, box grant.Box, token string, now time.Time) (grant.Grant, bool, error) {
	h := sha256.Sum256([]byte(token))
	c.mu.Lock()
	e, ok := c.m[h]
	c.mu.Unlock()
	if ok && now.Before(e.g.Expires) {
		return e.g, !e.checked.IsZero() && now.Sub(e.checked) < grantRecheck, nil
	}
	g, err := grant.Open(ctx, box, token, now)
	if err != nil {
		return grant.Grant{}, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedGrants {
		c.m = map[[32]byte]cachedGrant{}
	}
	c.m[h] = cachedGrant{g: g}
	return g, false, nil
}

// alive records that token's run or endpoint was found alive at now.
func (c *grantCache) alive(token string, now time.Time) {
	h := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[h]; ok {
		e.checked = now
		c.m[h] = e
	}
}

// launcherSign answers a launch.SignRequest.
func (s *server) launcherSign(c echo.Context) error {
	g, err := s.launcherGrant(c)
	if err != nil {
		return err
	}
	var req launch.SignRequest
	dec := json.NewDecoder(io.LimitReader(c.Request().Body, s.bodyLimit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return newProblem(ptMalformed, "the sign request is not JSON: %v", err)
	}
	if n := len(req.Get) + len(req.Put); n == 0 || n > launch.MaxSign {
		return newProblem(ptInvalid, "a sign request names 1 to %d objects, not %d", launch.MaxSign, n)
	}
	ctx := c.Request().Context()
	var res launch.SignResponse
	for i, d := range req.Get {
		if !launch.ValidDigest(d) {
			return newProblem(ptInvalid, "get[%d]: %q is not a sha256 digest", i, d)
		}
		if err := s.launcherReads(ctx, g, d); err != nil {
			return err
		}
		t := launch.Target{Method: http.MethodGet, URL: launch.ObjectsPath + d, Grant: true}
		switch u, err := s.launchBytes.SignedURL(ctx, g.Project, d, launcherURLExpiry); {
		case err == nil:
			t = launch.Target{Method: http.MethodGet, URL: u}
		case !errors.Is(err, artifactstore.ErrCannotSign):
			return internalError(fmt.Errorf("sign a URL for %s: %w", d, err))
		}
		res.Get = append(res.Get, t)
	}
	if len(req.Put) > 0 && !g.Writes() {
		return newProblem(ptForbidden, "an endpoint's grant reads its model and stores nothing")
	}
	if len(req.Put) > 0 {
		if err := s.launcherWithinLimit(ctx, g.Project, req); err != nil {
			return err
		}
	}
	for i, p := range req.Put {
		if !launch.ValidDigest(p.Digest) || p.Size < 0 || p.Size > maxLauncherObject || (p.ContentType != artifactstore.ManifestContentType && p.ContentType != "application/octet-stream") {
			return newProblem(ptInvalid, "put[%d]: a sha256 digest, a size of at most 5 TiB and the content type of a file or a manifest, please", i)
		}
	}
	// Whether each Put's bytes are stored: a stat of the store each (a
	// HEAD on S3), launcherStats at a time, so that a batch of hundreds
	// answers in a fraction of the launcher's time limit.
	fresh := make([]bool, len(req.Put))
	stats, sctx := errgroup.WithContext(ctx)
	stats.SetLimit(launcherStats)
	for i, p := range req.Put {
		stats.Go(func() (err error) {
			fresh[i], err = s.launchBytes.Fresh(sctx, g.Project, p.Digest)
			return err
		})
	}
	if err := stats.Wait(); err != nil {
		return internalError(err)
	}
	for i, p := range req.Put {
		if fresh[i] {
			res.Put = append(res.Put, launch.Target{Stored: true})
			continue
		}
		t := launch.Target{Method: http.MethodPut, URL: launch.ObjectsPath + p.Digest, Grant: true,
			Header: map[string]string{"Content-Type": p.ContentType}}
		if p.Size > maxSignedPut {
			res.Put = append(res.Put, t)
			continue
		}
		switch sp, err := s.launchBytes.SignedPutURL(ctx, g.Project, p.Digest, p.Size, p.ContentType, launcherURLExpiry); {
		case err == nil:
			t = launch.Target{Method: http.MethodPut, URL: sp.URL, Header: sp.Header}
		case !errors.Is(err, artifactstore.ErrCannotSign):
			return internalError(fmt.Errorf("sign an upload for %s: %w", p.Digest, err))
		}
		res.Put = append(res.Put, t)
	}
	return c.JSON(http.StatusOK, res)
}

// launcherWithinLimit refuses a request whose outputs (req.Storing, else
// the Puts' sizes) would take the project past the cap. Like the local
// runtime's check it counts the outputs' full size (some may be stored
// already) and reserves nothing: attempts storing at once may together
// pass it by what they store.
func (s *server) launcherWithinLimit(ctx context.Context, project string, req launch.SignRequest) error {
	if s.launchLimit <= 0 || s.launchUsage == nil {
		return nil
	}
	adding := req.Storing
	if adding <= 0 {
		for _, p := range req.Put {
			adding += p.Size
		}
	}
	used, err := s.launchUsage.ArtifactBytesUsed(ctx, project)
	if err != nil {
		return internalError(fmt.Errorf("read project %s's artifact usage: %w", project, err))
	}
	if used+adding > s.launchLimit {
		return newProblem(ptArtifactLimit, "storing the step's output artifacts (%s) would take project %s's artifacts to %s, over the limit of %s per project set by the operator (ATELIER_ARTIFACTS_PROJECT_LIMIT); delete old runs or ask for more",
			artifactstore.HumanBytes(adding), project, artifactstore.HumanBytes(used+adding), artifactstore.HumanBytes(s.launchLimit))
	}
	return nil
}

// launcherReads checks that the grant reads digest: one of its inputs, or
// a file of an input directory. Anything else is 404, as for bytes that
// do not exist.
func (s *server) launcherReads(ctx context.Context, g grant.Grant, digest string) error {
	if g.Reads(digest) {
		return nil
	}
	for _, in := range g.Inputs {
		if in.Files == 0 {
			continue
		}
		files, err := s.manifestFiles(ctx, g.Project, in.Digest)
		if err != nil {
			return err
		}
		if files[digest] {
			return nil
		}
	}
	return notFound("%s is not among the attempt's input artifacts", digest)
}

// manifestFiles is the set of file digests of a stored directory, cached:
// a launcher asks for each file of a directory input in turn.
func (s *server) manifestFiles(ctx context.Context, project, digest string) (map[string]bool, error) {
	key := project + "/" + digest
	s.manifests.mu.Lock()
	files, ok := s.manifests.m[key]
	s.manifests.mu.Unlock()
	if ok {
		return files, nil
	}
	// One read per manifest however many of a launcher's parallel
	// requests ask at once.
	v, err, _ := s.manifests.reads.Do(key, func() (any, error) {
		m, err := s.launchBytes.ReadManifest(context.WithoutCancel(ctx), project, digest)
		if err != nil {
			return nil, err
		}
		files := make(map[string]bool, len(m.Files))
		for _, f := range m.Files {
			files[f.Digest] = true
		}
		s.manifests.mu.Lock()
		defer s.manifests.mu.Unlock()
		if s.manifests.m == nil || len(s.manifests.m) >= maxCachedManifests {
			s.manifests.m = map[string]map[string]bool{} // content-addressed: dropping is only a re-read
		}
		s.manifests.m[key] = files
		return files, nil
	})
	if errors.Is(err, artifactstore.ErrNotFound) {
		return nil, notFound("input artifact %s is no longer in the artifact store", digest)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return v.(map[string]bool), nil
}

// maxCachedManifests bounds the manifests the gateway keeps (each up to
// its directory's file count of digests).
const maxCachedManifests = 16

// manifestCache holds manifestFiles' sets.
type manifestCache struct {
	mu    sync.Mutex
	m     map[string]map[string]bool
	reads singleflight.Group
}

// launcherGet streams an object to a launcher (a store that cannot sign).
func (s *server) launcherGet(c echo.Context) error {
	g, err := s.launcherGrant(c)
	if err != nil {
		return err
	}
	d := c.Param("digest")
	if !launch.ValidDigest(d) {
		return notFound("%q is not a sha256 digest", d)
	}
	ctx := c.Request().Context()
	if err := s.launcherReads(ctx, g, d); err != nil {
		return err
	}
	r, err := s.launchBytes.Reader(ctx, g.Project, d)
	if errors.Is(err, artifactstore.ErrNotFound) {
		return notFound("%s is no longer in the artifact store", d)
	}
	if err != nil {
		return internalError(err)
	}
	defer r.Close()
	w := c.Response()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(r.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, r)
	return err
}

// launcherPut stores an object a launcher sends (a store that cannot
// sign), streaming: the bytes are checked against the digest as they go
// and nothing is stored when they do not match.
func (s *server) launcherPut(c echo.Context) error {
	g, err := s.launcherGrant(c)
	if err != nil {
		return err
	}
	if !g.Writes() {
		return newProblem(ptForbidden, "an endpoint's grant reads its model and stores nothing")
	}
	d := c.Param("digest")
	req := c.Request()
	ct := req.Header.Get("Content-Type")
	switch {
	case !launch.ValidDigest(d):
		return newProblem(ptInvalid, "%q is not a sha256 digest", d)
	case req.ContentLength < 0 || req.ContentLength > maxLauncherObject:
		return newProblem(ptInvalid, "an upload needs a Content-Length of at most 5 TiB")
	case ct != artifactstore.ManifestContentType && ct != "application/octet-stream":
		return newProblem(ptUnsupportedMedia, "an upload is a file (application/octet-stream) or a manifest (%s)", artifactstore.ManifestContentType)
	}
	if err := s.launchBytes.PutVerified(req.Context(), g.Project, d, req.ContentLength, req.Body, ct, s.launchUploads); err != nil {
		switch {
		case req.Context().Err() != nil:
			return newProblem(ptMalformed, "the upload was cut short")
		case errors.Is(err, artifactstore.ErrMismatch):
			return newProblem(ptInvalid, "%s was not stored: %v", d, err)
		}
		return internalError(fmt.Errorf("store %s for a launcher: %w", d, err))
	}
	return c.NoContent(http.StatusNoContent)
}
