package proxy

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/atelier-ml/atelier/inference"
)

// recorder remembers the status code a response was written with.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush on the real writer
// (streamed completions).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

func sortTraffic(ts []inference.RevisionTraffic) {
	slices.SortFunc(ts, func(a, b inference.RevisionTraffic) int { return cmp.Compare(a.Revision, b.Revision) })
}
