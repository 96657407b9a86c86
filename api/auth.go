package api

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// TokenLookup resolves a bearer secret. The store returns ErrNotFound for
// unknown and revoked tokens alike; expiry is checked here.
type TokenLookup interface {
	TokenBySecretHash(ctx context.Context, hash []byte) (catalog.Token, error)
}

// route is what the spec says about one operation.
type route struct {
	public     bool        // security: [] — no token needed
	role       tokens.Role // x-atelier-role: least role allowed
	project    bool        // has a {project} path parameter
	rawBody    bool        // x-atelier-raw-body: the handler parses the body, not the validator
	mediaTypes []string    // the request body's content types (raw bodies: checked by the validator)
	proxied    bool        // forwarded to an inference endpoint: the engine's API, not Atelier's (invoke.go)
	static     bool        // the web UI's files (webui.go): not in the spec
	// launcher routes are a Kubernetes step's launcher's (launcher.go):
	// not in the spec, authenticated by an attempt's grant rather than a
	// token, their bodies streamed.
	launcher bool
	// spec is the operation for the validator (validate.go), found once
	// here rather than by matching every request's path again.
	spec *routers.Route
}

type principalKey struct{}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// routesFromSpec indexes operations by echo's route key, so authorization
// rules live in openapi.yaml next to the operations they protect.
func routesFromSpec(doc *openapi3.T) (map[string]route, error) {
	out := map[string]route{}
	for path, item := range doc.Paths.Map() {
		echoPath := pathParam.ReplaceAllString(path, ":$1")
		for method, op := range item.Operations() {
			r := route{
				public:  op.Security != nil && len(*op.Security) == 0,
				project: strings.Contains(path, "{project}"),
				spec:    &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op},
			}
			r.rawBody, _ = op.Extensions["x-atelier-raw-body"].(bool)
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				r.mediaTypes = contentTypes(op.RequestBody.Value)
			}
			if !r.public {
				role, _ := op.Extensions["x-atelier-role"].(string)
				r.role = tokens.Role(role)
				if !tokens.Valid(r.role) {
					return nil, fmt.Errorf("api: %s %s: secured operation needs a valid x-atelier-role, got %q", method, path, role)
				}
			}
			out[method+" "+echoPath] = r
		}
	}
	return out, nil
}

func routeKey(c echo.Context) string { return c.Request().Method + " " + c.Path() }

// authenticate resolves the bearer token, then enforces project scope and
// role. Scope is checked before role so a token never learns, through a 403,
// that another tenant's project exists.
func (s *server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r, ok := s.routes[routeKey(c)]
		if !ok || r.public || r.launcher {
			return next(c)
		}
		tok, err := s.bearer(c)
		if err != nil {
			return err
		}
		req := c.Request()
		c.SetRequest(req.WithContext(context.WithValue(req.Context(), principalKey{}, tok)))
		if r.project {
			if err := s.checkProject(c.Request().Context(), tok, c.Param("project")); err != nil {
				return err
			}
		}
		if !tokens.Allows(tok.Role, r.role) {
			return newProblem(ptForbidden, "this operation needs the %s role; the token has %s", r.role, tok.Role)
		}
		return next(c)
	}
}

func (s *server) bearer(c echo.Context) (catalog.Token, error) {
	const challenge = `Bearer realm="atelier"`
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if h == "" {
		return catalog.Token{}, newProblem(ptUnauthenticated, "missing Authorization header; send \"Authorization: Bearer <token>\"").
			withHeader("WWW-Authenticate", challenge)
	}
	scheme, secret, _ := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return catalog.Token{}, newProblem(ptUnauthenticated, "the Authorization header must use the Bearer scheme").
			withHeader("WWW-Authenticate", challenge+`, error="invalid_request"`)
	}
	invalid := func(why string) error {
		return newProblem(ptUnauthenticated, "%s", why).
			withHeader("WWW-Authenticate", fmt.Sprintf(`%s, error="invalid_token", error_description=%q`, challenge, why))
	}
	if !tokens.WellFormed(secret) {
		return catalog.Token{}, invalid("the token is malformed")
	}
	hash := tokens.Hash(secret)
	tok, ok := s.tokens.get(hash, s.now())
	if !ok {
		var err error
		tok, err = s.cat.TokenBySecretHash(c.Request().Context(), hash)
		if errors.Is(err, catalog.ErrNotFound) {
			return catalog.Token{}, invalid("the token is unknown or revoked")
		}
		if err != nil {
			return catalog.Token{}, internalError(err)
		}
		s.tokens.put(hash, tok, s.now())
	}
	if tok.ExpiresAt != nil && !s.now().Before(*tok.ExpiresAt) {
		return catalog.Token{}, invalid("the token expired at " + tok.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return tok, nil
}

// checkProject answers 404 for projects the token may not see, exactly as
// for projects that do not exist.
func (s *server) checkProject(ctx context.Context, tok catalog.Token, project string) error {
	if tok.Role != tokens.RoleAdmin {
		if tok.Project != project {
			return projectNotFound(project)
		}
		return nil
	}
	_, err := s.cat.GetProject(ctx, project)
	if errors.Is(err, catalog.ErrNotFound) {
		return projectNotFound(project)
	}
	if err != nil {
		return internalError(err)
	}
	return nil
}

func projectNotFound(project string) *problem {
	return notFound("project %q not found", project)
}

// principal is the authenticated token (authenticate put it in the
// request's context); handlers of secured routes only.
func principal(ctx context.Context) catalog.Token {
	tok, _ := ctx.Value(principalKey{}).(catalog.Token)
	return tok
}

// requester names a token in audit fields (created-by, cancel requester).
func requester(tok catalog.Token) string {
	return fmt.Sprintf("%s (%s)", tok.Name, tok.ID)
}
