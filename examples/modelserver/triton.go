package modelserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// The KServe v2 (Open Inference Protocol) JSON shapes Triton serves. The
// binary tensor extension is not supported.

// InferRequest is the body of POST /v2/models/{name}/infer.
type InferRequest struct {
	ID         string                 `json:"id,omitempty"`
	Parameters map[string]any         `json:"parameters,omitempty"`
	Inputs     []InferTensor          `json:"inputs"`
	Outputs    []InferRequestedOutput `json:"outputs,omitempty"`
}

// InferTensor is an input or output tensor. Data holds the elements in
// row-major order, flat or nested; the fake answers flat.
type InferTensor struct {
	Name       string         `json:"name"`
	Shape      []int64        `json:"shape"`
	Datatype   string         `json:"datatype"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       any            `json:"data"`
}

// InferRequestedOutput names an output the client wants.
type InferRequestedOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// InferResponse answers an inference request. The fake echoes input i as
// output i (named OUTPUT<i>, or as the client's requested outputs, which
// take the inputs in turn). Parameters carries "revision".
type InferResponse struct {
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version,omitempty"`
	ID           string         `json:"id,omitempty"`
	Parameters   map[string]any `json:"parameters,omitempty"`
	Outputs      []InferTensor  `json:"outputs"`
}

// TritonError is Triton's error body.
type TritonError struct {
	Error string `json:"error"`
}

// ModelMetadata answers GET /v2/models/{name}.
type ModelMetadata struct {
	Name     string   `json:"name"`
	Versions []string `json:"versions"`
	Platform string   `json:"platform"`
}

// ServerMetadata answers GET /v2.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

func (s *Server) tritonRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v2/health/ready", s.tritonReady)
	mux.HandleFunc("GET /v2", func(w http.ResponseWriter, _ *http.Request) {
		respond(w, http.StatusOK, ServerMetadata{Name: "triton", Version: "fake", Extensions: []string{}})
	})
	mux.HandleFunc("GET /v2/models/{name}", s.tritonModelMetadata)
	mux.HandleFunc("GET /v2/models/{name}/versions/{version}", s.tritonModelMetadata)
	mux.HandleFunc("GET /v2/models/{name}/ready", s.tritonReady)
	mux.HandleFunc("GET /v2/models/{name}/versions/{version}/ready", s.tritonReady)
	mux.HandleFunc("POST /v2/models/{name}/infer", s.tritonInfer)
	mux.HandleFunc("POST /v2/models/{name}/versions/{version}/infer", s.tritonInfer)
}

func tritonError(w http.ResponseWriter, status int, msg string) {
	respond(w, status, TritonError{Error: msg})
}

// checkTritonModel answers 404 for a model or version the fake does not
// serve; the server-wide routes have neither path value.
func (s *Server) checkTritonModel(w http.ResponseWriter, r *http.Request) bool {
	name, version := r.PathValue("name"), r.PathValue("version")
	if (name != "" && name != s.cfg.Model) || (version != "" && version != s.cfg.ModelVersion) {
		tritonError(w, http.StatusNotFound,
			fmt.Sprintf("Request for unknown model: '%s' version %s is not found", name, version))
		return false
	}
	return true
}

func (s *Server) tritonReady(w http.ResponseWriter, r *http.Request) {
	if !s.checkTritonModel(w, r) {
		return
	}
	if !s.Loaded() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) tritonModelMetadata(w http.ResponseWriter, r *http.Request) {
	if !s.checkTritonModel(w, r) {
		return
	}
	respond(w, http.StatusOK, ModelMetadata{Name: s.cfg.Model, Versions: []string{s.cfg.ModelVersion}, Platform: "fake"})
}

func (s *Server) tritonInfer(w http.ResponseWriter, r *http.Request) {
	if !s.checkTritonModel(w, r) {
		return
	}
	if r.Header.Get("Inference-Header-Content-Length") != "" {
		tritonError(w, http.StatusBadRequest, "the fake model server does not support the binary tensor extension")
		return
	}
	var req InferRequest
	if err := decodeJSON(r, &req); err != nil {
		tritonError(w, http.StatusBadRequest, err.Error())
		return
	}
	outputs, err := s.echo(req)
	if err != nil {
		tritonError(w, http.StatusBadRequest, err.Error())
		return
	}
	t, err := s.acquire(r.Context())
	switch {
	case errors.Is(err, errNotLoaded):
		tritonError(w, http.StatusServiceUnavailable, "Request for unknown model: '"+s.cfg.Model+"' is not ready")
		return
	case errors.Is(err, errQueueFull):
		tritonError(w, http.StatusTooManyRequests, "Exceeds maximum queue size")
		return
	case t == nil:
		return
	case t.fail:
		crash := s.finish(t, outcome{})
		s.answer(w, http.StatusInternalServerError, TritonError{Error: "injected fault"}, crash)
		return
	}
	resp := InferResponse{ModelName: s.cfg.Model, ModelVersion: s.cfg.ModelVersion, ID: req.ID, Outputs: outputs}
	if s.cfg.Revision != "" {
		resp.Parameters = map[string]any{"revision": s.cfg.Revision}
	}
	crash := s.finish(t, outcome{ok: true})
	s.answer(w, http.StatusOK, resp, crash)
}

// echo validates the inputs and builds the outputs.
func (s *Server) echo(req InferRequest) ([]InferTensor, error) {
	if len(req.Inputs) == 0 {
		return nil, errors.New("inference request has no inputs")
	}
	flat := make([][]any, len(req.Inputs))
	for i, in := range req.Inputs {
		if in.Name == "" {
			return nil, fmt.Errorf("inputs[%d] has no name", i)
		}
		kind, ok := datatypes[in.Datatype]
		if !ok {
			return nil, fmt.Errorf("input '%s': unknown datatype %q", in.Name, in.Datatype)
		}
		want := int64(1)
		for _, d := range in.Shape {
			if d < 0 {
				return nil, fmt.Errorf("input '%s': negative dimension in shape %v", in.Name, in.Shape)
			}
			want *= d
		}
		elems, err := flatten(in.Data, kind, nil)
		if err != nil {
			return nil, fmt.Errorf("input '%s': %w", in.Name, err)
		}
		if int64(len(elems)) != want {
			return nil, fmt.Errorf("input '%s': shape %v needs %d elements, data has %d", in.Name, in.Shape, want, len(elems))
		}
		flat[i] = elems
	}
	tensor := func(name string, i int) InferTensor {
		in := req.Inputs[i]
		return InferTensor{Name: name, Shape: in.Shape, Datatype: in.Datatype, Data: flat[i]}
	}
	var out []InferTensor
	if len(req.Outputs) == 0 {
		for i := range req.Inputs {
			out = append(out, tensor("OUTPUT"+strconv.Itoa(i), i))
		}
		return out, nil
	}
	for j, o := range req.Outputs {
		if o.Name == "" {
			return nil, fmt.Errorf("outputs[%d] has no name", j)
		}
		out = append(out, tensor(o.Name, j%len(req.Inputs)))
	}
	return out, nil
}

type elemKind int

const (
	kindNumber elemKind = iota
	kindBool
	kindString
)

var datatypes = map[string]elemKind{
	"BOOL": kindBool, "BYTES": kindString,
	"UINT8": kindNumber, "UINT16": kindNumber, "UINT32": kindNumber, "UINT64": kindNumber,
	"INT8": kindNumber, "INT16": kindNumber, "INT32": kindNumber, "INT64": kindNumber,
	"FP16": kindNumber, "FP32": kindNumber, "FP64": kindNumber, "BF16": kindNumber,
}

// flatten appends the leaves of data (nested lists allowed) to dst,
// checking each has the datatype's JSON kind.
func flatten(data any, kind elemKind, dst []any) ([]any, error) {
	switch v := data.(type) {
	case []any:
		for _, e := range v {
			var err error
			if dst, err = flatten(e, kind, dst); err != nil {
				return nil, err
			}
		}
		return dst, nil
	case json.Number:
		if kind == kindNumber {
			return append(dst, v), nil
		}
	case bool:
		if kind == kindBool {
			return append(dst, v), nil
		}
	case string:
		if kind == kindString {
			return append(dst, v), nil
		}
	case nil:
		return nil, errors.New("data is missing")
	}
	return nil, fmt.Errorf("element %v does not match the datatype", data)
}
