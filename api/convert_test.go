package api

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/runstate"
)

// The JSON of every conversion equals, byte for byte, what the gateway
// sent when internal structs were encoded directly (testdata/*.json were
// written by that encoding, before the REST types existed).
func TestConversionsKeepTheWireJSON(t *testing.T) {
	s := &server{eng: newFakeEngine(), now: func() time.Time { return fxStart }}
	full := fullRunStatus()
	cases := map[string]any{
		"runstatus-full":          runStatusView(full),
		"runstatus-minimal":       runStatusView(minimalRunStatus()),
		"runstatus-nilsteps":      runStatusView(nilStepsRunStatus()),
		"runevent-full":           runEvent(full),
		"run-full":                s.runView(fullRunRow(), &full),
		"project-full":            projectView(fullProject()),
		"project-minimal":         projectView(catalog.Project{Name: "beta", CreatedAt: fxStart}),
		"token-full":              tokenView(fullToken()),
		"token-minimal":           tokenView(catalog.Token{ID: "tok-2", Name: "root", Role: tokens.RoleAdmin, CreatedAt: fxStart}),
		"createdtoken-full":       gen.CreatedToken{Token: tokenView(fullToken()), Secret: "atl_x"},
		"pipelineversion-full":    pipelineVersionView(fullPipelineVersion()),
		"pipelineversion-minimal": pipelineVersionView(catalog.PipelineVersion{Project: "alpha", Pipeline: "p", Version: 1, Spec: json.RawMessage(`{}`), Digest: "sha256:x", CreatedAt: fxStart}),
		"pipeline-full":           pipelineView(fullPipeline()),
		"goworkflow-full":         goWorkflowViews([]catalog.GoWorkflow{fullGoWorkflow()})[0],
		"goworkflow-minimal":      goWorkflowViews([]catalog.GoWorkflow{{Name: "etl", TaskQueue: "q", UpdatedAt: fxStart}})[0],
		"capacity-full":           capacityView(ptr(fullClusterCapacity())),
		"capacity-nilgpus":        capacityView(&catalog.ClusterCapacity{}),
		"cacheentry-full":         cacheEntryView(fullCacheEntry()),
		"cacheentry-minimal":      cacheEntryView(catalog.CacheEntry{Project: "alpha", Key: "k", Pipeline: "p", Step: "s", RunID: "r", Attempt: 1, CreatedAt: fxStart}),
		"schedule-pipeline":       scheduleView(pipelineSchedule()),
		"schedule-go":             scheduleView(goSchedule()),
	}
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(cases) {
		t.Errorf("%d golden files, %d cases: every golden file needs a case", len(files), len(cases))
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile("testdata/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			// The gateway encodes responses with json.Encoder (HTML
			// escaping on, trailing newline), as the golden files were.
			var got bytes.Buffer
			if err := json.NewEncoder(&got).Encode(v); err != nil {
				t.Fatal(err)
			}
			if os.Getenv("ATELIER_UPDATE_GOLDEN") != "" {
				// Regenerate after a deliberate change of the wire format
				// (and after merging branches that each changed it).
				if err := os.WriteFile("testdata/"+name+".json", got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if diff := cmp.Diff(string(want), got.String()); diff != "" {
				t.Errorf("wire JSON changed (-golden +now):\n%s", diff)
			}
		})
	}
}

// The full fixtures set every field of every internal struct they contain,
// so a field added to runstate.Status (or any catalogue type the API
// shows) fails here until it is set in the fixture, converted (or
// deliberately left out) and the golden files regenerated.
func TestFixturesSetEveryInternalField(t *testing.T) {
	seen := map[reflect.Type]map[string]bool{}
	for _, v := range []any{fullRunStatus(), fullRunRow(), fullProject(), fullToken(), fullPipelineVersion(),
		fullPipeline(), fullGoWorkflow(), fullCluster(), fullCacheEntry()} {
		markSet(reflect.ValueOf(v), seen)
	}
	for typ, set := range seen {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			if !set[f.Name] {
				t.Errorf("no fixture sets %s.%s: set it in fixtures_test.go, convert it in convert.go (and declare it in openapi.yaml) or decide it stays internal", typ, f.Name)
			}
		}
	}
}

// markSet records, per struct type, which fields hold a non-zero value
// somewhere in v.
func markSet(v reflect.Value, seen map[reflect.Type]map[string]bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			markSet(v.Elem(), seen)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			markSet(v.Index(i), seen)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			markSet(v.MapIndex(k), seen)
		}
	case reflect.Struct:
		typ := v.Type()
		if typ.PkgPath() == "time" {
			return
		}
		if seen[typ] == nil {
			seen[typ] = map[string]bool{}
		}
		for i := range typ.NumField() {
			if !typ.Field(i).IsExported() {
				continue
			}
			if !v.Field(i).IsZero() {
				seen[typ][typ.Field(i).Name] = true
			}
			markSet(v.Field(i), seen)
		}
	}
}

// Enum values are converted by type conversion; the spec's enums and the
// constants declared in Go must therefore be the same sets.
func TestEnumsMatchTheSpec(t *testing.T) {
	doc, err := gen.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ schema, dir, goType string }{
		{"RunState", "../runstate", "State"},
		{"StepState", "../runstate", "StepState"},
		{"Role", "../internal/platform/tokens", "Role"},
	} {
		var inSpec []string
		for _, v := range doc.Components.Schemas[c.schema].Value.Enum {
			inSpec = append(inSpec, v.(string))
		}
		inGo := stringConsts(t, c.dir, c.goType)
		slices.Sort(inSpec)
		if diff := cmp.Diff(inSpec, inGo); diff != "" {
			t.Errorf("%s: spec enum (-) and Go constants of %s (+) differ:\n%s", c.schema, c.goType, diff)
		}
	}
}

// stringConsts returns the sorted values of the string constants of type
// typ declared in the non-test files of dir.
func stringConsts(t *testing.T, dir, typ string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out = append(out, s)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestConversions(t *testing.T) {
	s := &server{eng: newFakeEngine(), now: func() time.Time { return fxStart.Add(time.Minute) }, publicURL: "https://atelier.example"}
	code := 0
	cases := []struct {
		name string
		got  any
		want any
	}{{
		name: "attempt: zero values stay absent, exit code 0 does not",
		got:  attemptView(runstate.Attempt{Number: 1, State: runstate.StepSucceeded, ExitCode: &code, Links: map[string]string{}}),
		want: gen.Attempt{Number: 1, State: gen.StepStateSUCCEEDED, ExitCode: &code},
	}, {
		name: "step: empty attempts and items stay absent",
		got:  stepView(runstate.StepStatus{Name: "a", Kind: "container", State: runstate.StepPending, Attempts: []runstate.Attempt{}, Items: []runstate.StepStatus{}}),
		want: gen.StepStatus{Name: "a", Kind: "container", State: gen.StepStatePENDING},
	}, {
		name: "step: forEach items nest",
		got: stepView(runstate.StepStatus{Name: "a", Kind: "container", State: runstate.StepRunning, Item: nil,
			Items: []runstate.StepStatus{{Name: "a[0]", State: runstate.StepSucceeded, Item: "x", Outputs: map[string]any{"n": 1}}}}),
		want: gen.StepStatus{Name: "a", Kind: "container", State: gen.StepStateRUNNING,
			Items: &[]gen.StepStatus{{Name: "a[0]", State: gen.StepStateSUCCEEDED, Item: "x", Outputs: map[string]any{"n": 1}}}},
	}, {
		name: "run status: no steps yet stays null, empty params absent",
		got:  runStatusView(runstate.Status{RunID: "r", Project: "p", Workflow: "w", State: runstate.Pending, Params: map[string]any{}}),
		want: gen.RunStatus{RunId: "r", Project: "p", Workflow: "w", State: gen.RunStatePENDING},
	}, {
		name: "run status: cancel request",
		got:  runStatusView(runstate.Status{RunID: "r", State: runstate.Cancelling, Steps: []runstate.StepStatus{}, Cancel: &runstate.CancelRequest{Reason: "x", Requester: "y", At: fxStart}}),
		want: gen.RunStatus{RunId: "r", State: gen.RunStateCANCELLING, Steps: []gen.StepStatus{}, Cancel: &gen.CancelRequest{Reason: "x", Requester: "y", At: fxStart}},
	}, {
		name: "run event of a Go workflow: no pipeline, no version",
		got:  runEvent(runstate.Status{RunID: "r", Project: "p", Workflow: "etl", State: runstate.Running, Seq: 2}),
		want: gen.RunEvent{RunId: "r", Project: "p", Workflow: "etl", State: gen.RunStateRUNNING, Seq: 2},
	}, {
		name: "run event of a pipeline keeps its version, even 0",
		got:  runEvent(runstate.Status{RunID: "r", Pipeline: "train", State: runstate.Running}),
		want: gen.RunEvent{RunId: "r", Pipeline: ptr("train"), Version: ptr(0), State: gen.RunStateRUNNING},
	}, {
		name: "run row without status: links, no status",
		got:  s.runView(catalog.Run{ID: "r1", Project: "alpha", Workflow: "etl", State: runstate.Pending, CreatedAt: fxStart, UpdatedAt: fxStart}, nil),
		want: gen.Run{Id: "r1", Project: "alpha", Workflow: "etl", State: gen.RunStatePENDING, CreatedAt: fxStart, UpdatedAt: fxStart,
			Links: gen.RunLinks{Self: "https://atelier.example/v1/projects/alpha/runs/r1", Events: "https://atelier.example/v1/projects/alpha/runs/r1/events",
				TemporalUI: ptr("http://temporal-ui/namespaces/default/workflows/r1")}},
	}, {
		name: "run state comes from the status when there is one",
		got: s.runView(catalog.Run{ID: "r1", Project: "alpha", Workflow: "etl", State: runstate.Running},
			&runstate.Status{RunID: "r1", State: runstate.Succeeded}).State,
		want: gen.RunStateSUCCEEDED,
	}, {
		name: "cluster: online, capacity converted",
		got:  s.clusterView(fullCluster()),
		want: gen.Cluster{Name: "east", Description: ptr("GPU pool"), Labels: map[string]string{"region": "east"}, TaskQueue: "atelier-k8s-east",
			CreatedAt: fxStart, UpdatedAt: fxStart, LastSeenAt: &fxStart, Online: true,
			Capacity: &gen.ClusterCapacity{
				Gpus:        map[string]gen.ResourceAmount{"NVIDIA-A100-SXM4-80GB": {Total: 16, Free: 9}, "unknown": {Total: 1}},
				CpuMillis:   gen.ResourceAmount{Total: 128000, Free: 64000},
				MemoryBytes: gen.ResourceAmount{Total: 1 << 40, Free: 1 << 39}, Nodes: 2,
				GpuNodes: &[]gen.GPUNode{
					{Name: "a100-1", GpuType: ptr("NVIDIA-A100-SXM4-80GB"), GpuMemoryMiB: ptr[int64](81920), Gpus: 8, GpusInUse: 2, Ready: true, Unschedulable: true,
						Mig:    &[]gen.MIGSlices{{Profile: "nvidia.com/mig-1g.10gb", Allocatable: 7, InUse: 1}},
						Taints: &[]gen.NodeTaint{{Key: "nvidia.com/gpu", Value: ptr("present"), Effect: "NoSchedule"}}},
					{Name: "l4-1", Gpus: 1},
				},
				KueueQueue: ptr("team-q"),
			}},
	}, {
		name: "cluster: never reported, no labels",
		got:  s.clusterView(catalog.Cluster{Name: "new", TaskQueue: "q", CreatedAt: fxStart, UpdatedAt: fxStart}),
		want: gen.Cluster{Name: "new", Labels: map[string]string{}, TaskQueue: "q", CreatedAt: fxStart, UpdatedAt: fxStart},
	}, {
		name: "token of an admin: no project",
		got:  tokenView(catalog.Token{ID: "t", Name: "root", Role: tokens.RoleAdmin, CreatedAt: fxStart}),
		want: gen.Token{Id: "t", Name: "root", Role: gen.RoleAdmin, CreatedAt: fxStart},
	}, {
		name: "lists are never null",
		got:  []any{projectViews(nil), pipelineViews(nil), goWorkflowViews(nil)},
		want: []any{[]gen.Project{}, []gen.Pipeline{}, []gen.GoWorkflow{}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, c.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
