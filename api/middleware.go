package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
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
		if r := s.routes[routeKey(c)]; r.launcher {
			return next(c) // streamed uploads of any size (launcher.go)
		}
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
