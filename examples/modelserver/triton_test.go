package modelserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

func TestTritonInferShapes(t *testing.T) {
	f := start(t, Config{Backend: BackendTriton, Model: "resnet", ModelVersion: "3", Revision: "r9"})
	tests := []struct {
		name, path, body string
		want             []InferTensor // numbers as json.Number
	}{
		{
			"nested data comes back flat",
			"/v2/models/resnet/infer",
			`{"id":"req-1","inputs":[{"name":"INPUT0","shape":[2,2],"datatype":"FP32","data":[[1,2.5],[3,4]]}]}`,
			[]InferTensor{{Name: "OUTPUT0", Shape: []int64{2, 2}, Datatype: "FP32", Data: []any{json.Number("1"), json.Number("2.5"), json.Number("3"), json.Number("4")}}},
		},
		{
			"several inputs of every kind",
			"/v2/models/resnet/versions/3/infer",
			`{"inputs":[{"name":"A","shape":[2],"datatype":"BYTES","data":["x","y"]},
			            {"name":"B","shape":[1,3],"datatype":"BOOL","data":[true,false,true]},
			            {"name":"C","shape":[1],"datatype":"INT64","data":[9007199254740993]}]}`,
			[]InferTensor{
				{Name: "OUTPUT0", Shape: []int64{2}, Datatype: "BYTES", Data: []any{"x", "y"}},
				{Name: "OUTPUT1", Shape: []int64{1, 3}, Datatype: "BOOL", Data: []any{true, false, true}},
				{Name: "OUTPUT2", Shape: []int64{1}, Datatype: "INT64", Data: []any{json.Number("9007199254740993")}},
			},
		},
		{
			"requested outputs take the inputs in turn",
			"/v2/models/resnet/infer",
			`{"inputs":[{"name":"X","shape":[1],"datatype":"FP64","data":[7]}],"outputs":[{"name":"probs"},{"name":"labels"}]}`,
			[]InferTensor{
				{Name: "probs", Shape: []int64{1}, Datatype: "FP64", Data: []any{json.Number("7")}},
				{Name: "labels", Shape: []int64{1}, Datatype: "FP64", Data: []any{json.Number("7")}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, "POST", tt.path, tt.body)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			checkKeys(t, r.body, "model_name", "model_version", "outputs")
			var resp InferResponse
			dec := json.NewDecoder(bytes.NewReader(r.body))
			dec.DisallowUnknownFields()
			dec.UseNumber() // keeps INT64 exact
			if err := dec.Decode(&resp); err != nil {
				t.Fatal(err)
			}
			if resp.ModelName != "resnet" || resp.ModelVersion != "3" || resp.Parameters["revision"] != "r9" {
				t.Errorf("envelope %+v", resp)
			}
			if tt.name == "nested data comes back flat" && resp.ID != "req-1" {
				t.Errorf("id %q not echoed", resp.ID)
			}
			if !reflect.DeepEqual(resp.Outputs, tt.want) {
				t.Errorf("outputs\n got %#v\nwant %#v", resp.Outputs, tt.want)
			}
		})
	}
}

func TestTritonErrors(t *testing.T) {
	f := start(t, Config{Backend: BackendTriton})
	const ok = `{"inputs":[{"name":"I","shape":[1],"datatype":"FP32","data":[1]}]}`
	tests := []struct {
		name, method, path, body string
		header                   string
		want                     int
	}{
		{"unknown model", "POST", "/v2/models/other/infer", ok, "", 404},
		{"unknown version", "POST", "/v2/models/fake-model/versions/2/infer", ok, "", 404},
		{"unknown model ready", "GET", "/v2/models/other/ready", "", "", 404},
		{"no inputs", "POST", "/v2/models/fake-model/infer", `{"inputs":[]}`, "", 400},
		{"unnamed input", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, "", 400},
		{"bad datatype", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[1],"datatype":"FLOAT","data":[1]}]}`, "", 400},
		{"too few elements", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[2,2],"datatype":"FP32","data":[1,2,3]}]}`, "", 400},
		{"string in FP32", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[1],"datatype":"FP32","data":["1"]}]}`, "", 400},
		{"number in BYTES", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[1],"datatype":"BYTES","data":[1]}]}`, "", 400},
		{"negative dimension", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[-1],"datatype":"FP32","data":[1]}]}`, "", 400},
		{"no data", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[1],"datatype":"FP32"}]}`, "", 400},
		{"unnamed output", "POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{}]}`, "", 400},
		{"binary extension", "POST", "/v2/models/fake-model/infer", ok, "16", 400},
		{"not JSON", "POST", "/v2/models/fake-model/infer", `[`, "", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, f.url+tt.path, bytes.NewBufferString(tt.body))
			if tt.header != "" {
				req.Header.Set("Inference-Header-Content-Length", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e TritonError
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want || e.Error == "" {
				t.Errorf("status %d, error %q; want %d", resp.StatusCode, e.Error, tt.want)
			}
		})
	}
	if r := f.do(t, "GET", "/v1/models", ""); r.status != http.StatusNotFound {
		t.Errorf("a Triton fake serves vLLM routes: %d", r.status)
	}
}

func TestTritonMetadata(t *testing.T) {
	f := start(t, Config{Backend: BackendTriton, Model: "bert", ModelVersion: "2"})
	srv := decode[ServerMetadata](t, f.do(t, "GET", "/v2", ""))
	if srv.Name != "triton" {
		t.Errorf("server metadata %+v", srv)
	}
	for _, path := range []string{"/v2/models/bert", "/v2/models/bert/versions/2"} {
		m := decode[ModelMetadata](t, f.do(t, "GET", path, ""))
		if m.Name != "bert" || !reflect.DeepEqual(m.Versions, []string{"2"}) {
			t.Errorf("%s: %+v", path, m)
		}
	}
}
