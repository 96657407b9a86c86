package pipeline

import "testing"

// An input may name a URI to import; a literal one is checked when the
// spec is stored, a template when it is rendered (by the import).
func TestImportedInputs(t *testing.T) {
	ok, err := Parse([]byte(`
params: [{name: d, type: string}]
steps:
  - name: a
    container:
      command: ["true"]
      artifacts:
        inputs:
          - {name: data, uri: "s3://bucket/datasets/train/"}
          - {name: vocab, uri: "https://hf.co/org/m/vocab.txt"}
          - {name: t, uri: "{{ params.d }}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, problemsOf(t, Validate(ok, ValidateOptions{Kinds: []StepKind{KindContainer}})), nil)
	if in := ok.Steps[0].Container.Artifacts.Inputs[0]; !in.IsRef() || !in.IsImport() || in.Ref() != "uri:s3://bucket/datasets/train/" {
		t.Errorf("input %+v: want an import, shown as uri:<uri>", in)
	}

	bad, err := Parse([]byte(`
steps:
  - name: a
    container:
      command: ["true"]
      artifacts:
        inputs:
          - {name: a, uri: "ftp://host/x"}
          - {name: b, uri: "s3://bucket"}
          - {name: c, uri: "https://user:pw@host/x"}
          - {name: d, uri: "s3://bucket/x?region=us-east-1"}
          - {name: e, uri: "s3://bucket/a/../b"}
          - {name: f, uri: "s3://bucket/x", artifact: "0123456789abcdef0123456789abcdef"}
          - {name: g, uri: "{{ params.nope }}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, problemsOf(t, Validate(bad, ValidateOptions{Kinds: []StepKind{KindContainer}})), []want{
		{"steps[0].container.artifacts.inputs[0].uri", "the scheme must be one of s3, https, http"},
		{"steps[0].container.artifacts.inputs[1].uri", "names no object"},
		{"steps[0].container.artifacts.inputs[2].uri", "must not hold credentials"},
		{"steps[0].container.artifacts.inputs[3].uri", "no query or fragment"},
		{"steps[0].container.artifacts.inputs[4].uri", "must be clean"},
		{"steps[0].container.artifacts.inputs[5]", "exactly one of from"},
		{"steps[0].container.artifacts.inputs[6].uri", "params.nope"},
	})
}
