package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/inference/proxy"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// EndpointProxy forwards a request to an endpoint's replicas (implemented
// by inference/proxy). It returns a *proxy.Error, having written nothing,
// when no replica can answer.
type EndpointProxy interface {
	Serve(w http.ResponseWriter, r *http.Request, project, endpoint, path string) error
}

// WithEndpointProxy serves requests to endpoints through p.
func WithEndpointProxy(p EndpointProxy) Option { return func(s *server) { s.proxy = p } }

// invokePrefixes are the engines' API roots served under an endpoint:
// /v1 (OpenAI-compatible, vLLM) and /v2 (KServe v2 inference protocol,
// Triton). They cannot clash with the endpoint's REST operations
// (rollback, promote, abort), which are single words.
var invokePrefixes = []string{"v1", "v2"}

var (
	ptEndpointStarting = problemType{"endpoint-starting", "Endpoint starting", http.StatusTooManyRequests}
	ptEndpointNotReady = problemType{"endpoint-not-ready", "Endpoint not ready", http.StatusServiceUnavailable}
)

// invokeRoutes registers the proxied routes. They are not in openapi.yaml
// (OpenAPI has no catch-all paths), so their authorization is declared
// here: any token that may see the project, viewer included, may call its
// endpoints, so an application's token needs no right to change anything.
func (s *server) invokeRoutes(e *echo.Echo) {
	if s.proxy == nil {
		return
	}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}
	for _, prefix := range invokePrefixes {
		path := "/v1/projects/:project/endpoints/:endpoint/" + prefix + "/*"
		for _, m := range methods {
			s.routes[m+" "+path] = route{project: true, role: tokens.RoleViewer, proxied: true}
		}
		e.Match(methods, path, s.invoke)
	}
}

// invoke forwards one request to the endpoint.
func (s *server) invoke(c echo.Context) error {
	project, endpoint := c.Param("project"), c.Param("endpoint")
	// The path after the endpoint, as sent (project and endpoint names
	// have no characters that escape differently).
	path := strings.TrimPrefix(c.Request().URL.Path, "/v1/projects/"+project+"/endpoints/"+endpoint)
	err := s.proxy.Serve(c.Response(), c.Request(), project, endpoint, path)
	var pe *proxy.Error
	if !errors.As(err, &pe) {
		return err
	}
	var p *problem
	switch pe.Status {
	case http.StatusNotFound:
		p = notFound("%s", pe.Message)
	case http.StatusTooManyRequests:
		p = newProblem(ptEndpointStarting, "%s", pe.Message)
	case http.StatusBadRequest:
		p = newProblem(ptInvalid, "%s", pe.Message)
	default:
		p = newProblem(ptEndpointNotReady, "%s", pe.Message)
		p.body.Status = pe.Status
	}
	if pe.RetryAfter > 0 {
		p = p.withHeader("Retry-After", strconv.Itoa(pe.RetryAfter))
	}
	return p
}
