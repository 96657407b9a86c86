package store

import (
	"encoding/json"
	"testing"
)

func TestJSONBSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"x\x00y", "x\ufffdy"},
		{`a literal \u0000 stays`, `a literal \u0000 stays`},
		{"\\\x00", "\\\ufffd"},
	} {
		b, err := json.Marshal(map[string]string{"s": tc.in})
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		if err := json.Unmarshal(jsonbSafe(b), &got); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if got["s"] != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got["s"], tc.want)
		}
	}
}
