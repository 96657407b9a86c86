package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/api/gen"
)

// observe records metrics and an access log line. It renders errors itself
// (c.Error) so the recorded status is the one the client got.
func (s *server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if _, ok := s.routes[routeKey(c)]; !ok {
			route = "unmatched" // keep label cardinality bounded
		}
		status := c.Response().Status
		s.metrics.observe(c.Request().Method, route, status, time.Since(start))
		if ce := s.log.Check(zap.DebugLevel, "request"); ce != nil {
			ce.Write(zap.String("method", c.Request().Method), zap.String("route", route),
				zap.Int("status", status), zap.Duration("duration", time.Since(start)),
				zap.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)))
		}
		return nil
	}
}

// recoverPanics turns a panic into a 500 problem; the panic value and stack
// go to the log only, since they may hold internals.
func (s *server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r) // net/http's deliberate abort; must propagate
			}
			s.log.Error("panic in handler", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()),
				zap.String("route", c.Path()),
				zap.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)))
			err = internalError(fmt.Errorf("panic: %v", r))
		}()
		return next(c)
	}
}

// limitBody buffers the body up to the limit. Buffering (bodies are small)
// gives one precise 413 whoever reads first, the validator or a handler.
func (s *server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.ContentLength > s.bodyLimit {
			return s.tooLarge()
		}
		if req.Body == nil || req.Body == http.NoBody {
			return next(c)
		}
		data, err := io.ReadAll(io.LimitReader(req.Body, s.bodyLimit+1))
		_ = req.Body.Close()
		if err != nil {
			return newProblem(ptMalformed, "could not read the request body")
		}
		if int64(len(data)) > s.bodyLimit {
			return s.tooLarge()
		}
		req.Body = io.NopCloser(bytes.NewReader(data))
		req.ContentLength = int64(len(data))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		return next(c)
	}
}

func (s *server) tooLarge() *problem {
	return newProblem(ptTooLarge, "request body exceeds the %d-byte limit", s.bodyLimit)
}

// decodeJSON decodes a JSON body strictly. The validator has already checked
// it against the schema; this is the typed decode, kept strict so a schema
// drift can never let an unknown field through silently.
func decodeJSON(c echo.Context, v any, optional bool) error {
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return newProblem(ptMalformed, "could not read the request body")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return newProblem(ptInvalid, "a request body is required").
			withErrors([]gen.FieldError{{Path: "body", Message: "a request body is required"}})
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
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
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return newProblem(ptInvalid, "unknown field %q", name).
			withErrors([]gen.FieldError{{Path: name, Message: "unknown field"}})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(ptMalformed, "request body is truncated JSON")
	}
	return newProblem(ptMalformed, "request body is not valid JSON: %s", err.Error())
}
