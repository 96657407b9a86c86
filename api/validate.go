package api

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"
	echomw "github.com/oapi-codegen/echo-middleware"

	"github.com/atelier-ml/atelier/api/gen"
)

// validator checks every request against openapi.yaml before a handler runs
// and turns kin-openapi's findings into one 400 problem listing each field.
func (s *server) validator(doc *openapi3.T) (echo.MiddlewareFunc, error) {
	base := openapi3filter.Options{
		MultiError: true,
		// Auth already ran (see authenticate); the spec's security is
		// documentation for clients.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}
	opts := &echomw.Options{Options: base, SilenceServersWarning: true}
	// Pipeline specs are parsed by pipeline.Parse, which reports every problem
	// with its path (422); letting kin-openapi decode them first would turn
	// the same mistakes into terser 400s.
	rawBody := &echomw.Options{Options: base, SilenceServersWarning: true}
	rawBody.Options.ExcludeRequestBody = true

	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			rt, ok := s.routes[routeKey(c)]
			if !ok || rt.proxied || rt.static || rt.launcher {
				return next(c) // echo answers 404/405; the engine judges its own requests; the UI is files
			}
			o := opts
			if rt.rawBody {
				o = rawBody
			}
			if he := echomw.ValidateRequestFromContext(c, matched{rt.spec, c}, o); he != nil {
				return requestProblem(he)
			}
			if rt.rawBody {
				if p := rawMediaType(c, rt); p != nil {
					return p
				}
			}
			return next(c)
		}
	}, nil
}

// matched is the route echo matched, as kin-openapi's router: echo has
// already found the operation and its path parameters, and matching the
// path again against every route of the spec was a measurable part of a
// start's CPU (bench/starts).
type matched struct {
	route *routers.Route
	c     echo.Context
}

func (m matched) FindRoute(*http.Request) (*routers.Route, map[string]string, error) {
	names, values := m.c.ParamNames(), m.c.ParamValues()
	params := make(map[string]string, len(names))
	for i, n := range names {
		if i < len(values) {
			// Echo keeps path values as sent; the handlers' binding
			// unescapes them, so the schema must judge them unescaped
			// too (a scheduled run's ID holds colons, which clients may
			// send as %3A).
			v, err := url.PathUnescape(values[i])
			if err != nil {
				v = values[i]
			}
			params[n] = v
		}
	}
	return m.route, params, nil
}

// requestProblem converts a validation failure. Content-type and syntax
// errors make the rest moot and are reported alone; schema errors are
// collected so the client can fix every field in one go.
func requestProblem(he *echo.HTTPError) *problem {
	var errs []error
	var me openapi3.MultiError
	if errors.As(he.Internal, &me) {
		errs = flatten(me)
	} else if he.Internal != nil {
		errs = []error{he.Internal}
	}
	if len(errs) == 0 {
		if he.Code == 404 {
			return notFound("no such route")
		}
		return newProblem(ptInvalid, "%v", he.Message)
	}
	var fields []gen.FieldError
	for _, e := range errs {
		var re *openapi3filter.RequestError
		if !errors.As(e, &re) {
			fields = append(fields, gen.FieldError{Path: "", Message: e.Error()})
			continue
		}
		if re.RequestBody != nil {
			switch {
			case strings.HasPrefix(re.Reason, "header Content-Type has unexpected value"):
				return newProblem(ptUnsupportedMedia, "Content-Type must be one of %s", strings.Join(contentTypes(re.RequestBody), ", "))
			case re.Reason == "failed to decode request body":
				return newProblem(ptMalformed, "request body is not valid %s: %s", syntaxName(re.Input), causeMessage(re.Err))
			case errors.Is(re.Err, openapi3filter.ErrInvalidRequired):
				fields = append(fields, gen.FieldError{Path: "body", Message: "a request body is required"})
				continue
			}
		}
		fields = append(fields, requestFieldErrors(re)...)
	}
	return newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
}

// rawMediaType checks the Content-Type of a raw body against the content
// types the spec declares for it, as the validator does for other bodies.
func rawMediaType(c echo.Context, rt route) *problem {
	mt, _, err := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType))
	if err != nil || !slices.Contains(rt.mediaTypes, mt) {
		return newProblem(ptUnsupportedMedia, "Content-Type must be one of %s", strings.Join(rt.mediaTypes, ", "))
	}
	return nil
}

func summarize(fields []gen.FieldError) string {
	if len(fields) == 0 {
		return "the request does not match the API"
	}
	first := fields[0].Message
	if fields[0].Path != "" {
		first = fields[0].Path + ": " + first
	}
	if len(fields) == 1 {
		return first
	}
	return fmt.Sprintf("%d problems; first: %s", len(fields), first)
}

// requestFieldErrors locates each problem: "query.pageSize", "path.run",
// "header.Idempotency-Key" for parameters, a body path such as
// "params.lr" for bodies.
func requestFieldErrors(re *openapi3filter.RequestError) []gen.FieldError {
	prefix := ""
	if p := re.Parameter; p != nil {
		prefix = p.In + "." + p.Name
	}
	var out []gen.FieldError
	for _, e := range flatten(openapi3.MultiError{re.Err}) {
		var se *openapi3.SchemaError
		if errors.As(e, &se) {
			ptr, msg := se.JSONPointer(), se.Reason
			switch {
			case unsupported.MatchString(msg):
				// kin-openapi locates an unknown property at its parent
				// object; point at the property, like the spec parser does.
				ptr, msg = append(ptr, unsupported.FindStringSubmatch(msg)[1]), "unknown field"
			case missing.MatchString(msg):
				msg = "required"
			case se.SchemaField == "format" && se.Schema != nil:
				// The default message embeds the format's whole regexp.
				msg = "must be " + formatHint(se.Schema.Format)
			}
			out = append(out, gen.FieldError{Path: joinPath(prefix, ptr), Message: msg})
			continue
		}
		msg := re.Reason
		if e != nil {
			msg = causeMessage(e)
		}
		out = append(out, gen.FieldError{Path: joinPath(prefix, nil), Message: msg})
	}
	return out
}

var (
	unsupported = regexp.MustCompile(`^property "(.*)" is unsupported$`)
	missing     = regexp.MustCompile(`^property "(.*)" is missing$`)
)

func formatHint(format string) string {
	if format == "date-time" {
		return "an RFC 3339 date-time such as 2025-06-01T12:00:00Z"
	}
	return "a valid " + format
}

// joinPath renders a JSON pointer like the spec package does:
// steps[2].name.
func joinPath(prefix string, pointer []string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, seg := range pointer {
		if _, err := strconv.Atoi(seg); err == nil {
			b.WriteString("[" + seg + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// causeMessage prefers the short reason of a parse error over kin-openapi's
// chained text.
func causeMessage(err error) string {
	var pe *openapi3filter.ParseError
	if errors.As(err, &pe) {
		switch {
		case pe.Reason != "" && pe.Cause != nil:
			return pe.Reason + " (" + pe.Cause.Error() + ")"
		case pe.Reason != "":
			return pe.Reason
		case pe.Cause != nil:
			return pe.Cause.Error()
		}
	}
	if err == nil {
		return "invalid value"
	}
	return err.Error()
}

// flatten expands nested multi-errors (kin-openapi nests them per layer).
func flatten(me openapi3.MultiError) []error {
	var out []error
	for _, e := range me {
		var inner openapi3.MultiError
		if errors.As(e, &inner) && !isSingle(e) {
			out = append(out, flatten(inner)...)
			continue
		}
		out = append(out, e)
	}
	return out
}

// isSingle reports whether e is itself a located error (a RequestError or
// SchemaError) that merely wraps a MultiError; those must keep their
// location, so they are expanded by requestFieldErrors instead.
func isSingle(e error) bool {
	switch e.(type) {
	case *openapi3filter.RequestError, *openapi3.SchemaError:
		return true
	}
	return false
}

func syntaxName(in *openapi3filter.RequestValidationInput) string {
	if in != nil && in.Request != nil && strings.Contains(in.Request.Header.Get("Content-Type"), "yaml") {
		return "YAML"
	}
	return "JSON"
}

func contentTypes(rb *openapi3.RequestBody) []string {
	var out []string
	for ct := range rb.Content {
		out = append(out, ct)
	}
	if len(out) == 0 {
		out = []string{"application/json"}
	}
	slices.Sort(out)
	return out
}
