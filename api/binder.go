package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/api/gen"
)

// Bind is echo's Binder: the generated strict handlers call it to decode a
// JSON request body into its generated type. By then the validator has
// checked the body against the same schemas the type was generated from
// (required, types, unknown fields), so what is left here is the decoding
// itself: numbers stay json.Number (parameters keep their precision and
// the Idempotency-Key request hash its spelling), one JSON value only, and
// an empty body leaves the zero value (optional bodies; required ones were
// refused by the validator). Bodies of x-atelier-raw-body operations are
// kept as bytes for their own parser.
func (s *server) Bind(v any, c echo.Context) error {
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return newProblem(ptMalformed, "could not read the request body")
	}
	if s.routes[routeKey(c)].rawBody {
		raw, ok := v.(*json.RawMessage)
		if !ok {
			return internalError(fmt.Errorf("raw body bound to %T", v))
		}
		*raw = data
		return nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if dec.More() {
		return newProblem(ptMalformed, "request body has data after the JSON value")
	}
	return nil
}

func jsonProblem(err error) *problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return newProblem(ptMalformed, "request body is not valid JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		path := typ.Field
		if path == "" {
			path = "body"
		}
		return newProblem(ptInvalid, "%s: expected %s, got %s", path, typ.Type, typ.Value).
			withErrors([]gen.FieldError{{Path: path, Message: fmt.Sprintf("expected %s, got %s", typ.Type, typ.Value)}})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(ptMalformed, "request body is truncated JSON")
	}
	return newProblem(ptMalformed, "request body is not valid JSON")
}

type requestKey struct{}

// withRequest is the one strict middleware: it makes the *http.Request
// available to handlers that hand it on (GetMetrics: promhttp negotiates
// the format and compression from its headers).
func withRequest(f gen.StrictHandlerFunc, _ string) gen.StrictHandlerFunc {
	return func(c echo.Context, req any) (any, error) {
		r := c.Request()
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), requestKey{}, r)))
		return f(c, req)
	}
}

func requestFrom(ctx context.Context) *http.Request {
	r, _ := ctx.Value(requestKey{}).(*http.Request)
	return r
}
