package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

const specJSON = `{
  "name": "train",
  "params": [
    {"name": "lr", "type": "number", "default": 0.1},
    {"name": "epochs", "type": "integer"}
  ],
  "steps": [
    {"name": "prep", "container": {"command": ["echo", "hi"]}},
    {"name": "fit", "dependsOn": ["prep"], "container": {"command": ["python", "fit.py"]}}
  ]
}`

// specYAML is specJSON in YAML with another key order: same canonical spec.
const specYAML = `
steps:
  - name: prep
    container: {command: [echo, hi]}
  - container: {command: [python, fit.py]}
    name: fit
    dependsOn: [prep]
name: train
params:
  - {name: lr, type: number, default: 0.1}
  - {type: integer, name: epochs}
`

func TestPipelineVersions(t *testing.T) {
	h := newHarness(t)
	base := "/v1/projects/alpha/pipelines/train"
	r := h.do("POST", base+"/versions", h.editor, specJSON)
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Location") != base+"/versions/1" {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	var v1 gen.PipelineVersion
	r.json(t, &v1)
	if v1.Version != 1 || !strings.HasPrefix(v1.Digest, "sha256:") || deref(v1.CreatedBy) != "ci" {
		t.Fatalf("%+v", v1)
	}

	// Same spec as YAML, other key order: no new version.
	r = h.do("POST", base+"/versions", h.editor, specYAML, "Content-Type", "application/yaml")
	wantStatus(t, r, http.StatusOK)
	var same gen.PipelineVersion
	r.json(t, &same)
	if same.Version != 1 || same.Digest != v1.Digest {
		t.Fatalf("%+v", same)
	}

	changed := strings.Replace(specJSON, `"hi"`, `"hello"`, 1)
	r = h.do("POST", base+"/versions", h.editor, changed)
	wantStatus(t, r, http.StatusCreated)

	var list gen.PipelineList
	h.do("GET", "/v1/projects/alpha/pipelines", h.viewer, nil).json(t, &list)
	if len(list.Pipelines) != 1 || list.Pipelines[0].LatestVersion != 2 {
		t.Fatalf("%+v", list)
	}
	var p gen.Pipeline
	h.do("GET", base, h.viewer, nil).json(t, &p)
	if p.LatestVersion != 2 {
		t.Fatalf("%+v", p)
	}
	var latest, first gen.PipelineVersion
	h.do("GET", base+"/versions/latest", h.viewer, nil).json(t, &latest)
	h.do("GET", base+"/versions/1", h.viewer, nil).json(t, &first)
	if latest.Version != 2 || first.Version != 1 || !json.Valid(first.Spec) {
		t.Fatalf("latest %d first %d", latest.Version, first.Version)
	}
	wantProblem(t, h.do("GET", base+"/versions/3", h.viewer, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", base+"/versions/0", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	wantProblem(t, h.do("GET", "/v1/projects/alpha/pipelines/nope", h.viewer, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", "/v1/projects/alpha/pipelines/Bad_Name", h.viewer, nil), http.StatusBadRequest, "invalid-request")
}

func TestInvalidSpecListsEveryProblem(t *testing.T) {
	h := newHarness(t)
	bad := `
steps:
  - name: a
    container: {command: [x]}
  - name: a
    dependsOn: [ghost]
    container: {command: [why]}
  - name: r
    kind: ray
    ray: {}
`
	r := h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, bad, "Content-Type", "application/yaml")
	p := wantProblem(t, r, http.StatusUnprocessableEntity, "invalid-spec")
	paths := errorPaths(p)
	for _, want := range []string{"steps[1].name", "steps[1].dependsOn[0]", "steps[2].kind"} {
		if !strings.Contains(strings.Join(paths, " "), want) {
			t.Errorf("no problem at %s in %s", want, r.body)
		}
	}
	if !strings.Contains(*p.Detail, "problems") {
		t.Errorf("detail %q", *p.Detail)
	}

	// Unknown fields and YAML syntax errors are spec problems too.
	r = h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, `{"steps": [{"name": "a", "comand": ["x"]}]}`)
	p = wantProblem(t, r, http.StatusUnprocessableEntity, "invalid-spec")
	if !strings.Contains(strings.Join(errorPaths(p), " "), "steps[0].comand") {
		t.Errorf("%s", r.body)
	}
	r = h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, "steps: [\n  - {", "Content-Type", "application/yaml")
	wantProblem(t, r, http.StatusUnprocessableEntity, "invalid-spec")
}

func TestSpecLimits(t *testing.T) {
	h := newHarness(t)
	path := "/v1/projects/alpha/pipelines/train/versions"
	big := `{"description": "` + strings.Repeat("x", 300<<10) + `", "steps": []}`
	p := wantProblem(t, h.do("POST", path, h.editor, big), http.StatusRequestEntityTooLarge, "payload-too-large")
	if !strings.Contains(*p.Detail, "262144") {
		t.Errorf("detail %q", *p.Detail)
	}
	huge := strings.Repeat(" ", 2<<20) + "{}"
	wantProblem(t, h.do("POST", path, h.editor, huge), http.StatusRequestEntityTooLarge, "payload-too-large")
	wantProblem(t, h.do("POST", path, h.editor, specJSON, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, "unsupported-media-type")
}

func TestListWorkflows(t *testing.T) {
	h := newHarness(t)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}
	var l gen.GoWorkflowList
	r := h.do("GET", "/v1/workflows", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &l)
	if len(l.Workflows) != 1 || l.Workflows[0].TaskQueue != "go-q" {
		t.Fatalf("%+v", l)
	}
}
