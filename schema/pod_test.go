package schema

import (
	"encoding/json"
	"testing"
)

// Patches of three levels (a pipeline's, a Ray step's, its head's) merge
// into one flat list, applied widest first.
func TestMergePodFlattensPatches(t *testing.T) {
	p := func(s string) *Pod { return &Pod{Patch: json.RawMessage(s)} }
	got, err := MergePod(MergePod(p(`{"a":1}`), p(`{"b":2}`)), p(`{"c":3}`)).Patches()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[0]) != `{"a":1}` || string(got[2]) != `{"c":3}` {
		t.Fatalf("patches %s", got)
	}
}
