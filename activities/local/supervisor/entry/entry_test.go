package entry

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestSpecRoundTrip(t *testing.T) {
	want := Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "echo 'hé\"llo'\n"}, Env: []string{"A=1", "B=x=y", "EMPTY="},
		Dir: "/tmp/w", Credential: &Credential{UID: 65532, GID: 65532}, Request: "abc", Execution: 3,
		OrphanAfter: time.Minute, Grace: -1}
	b, err := EncodeSpec("/data/attempt-1", want)
	if err != nil {
		t.Fatal(err)
	}
	two := append(append([]byte(nil), b...), b...)
	dir, got, rest, err := decodeSpec(two)
	if err != nil || dir != "/data/attempt-1" || !reflect.DeepEqual(got, want) || string(rest) != string(b) {
		t.Fatalf("decoded %q %+v %v (rest %d bytes), want %+v", dir, got, err, len(rest), want)
	}
	if _, _, _, err := decodeSpec(b[:len(b)-1]); err != errIncomplete {
		t.Fatalf("a truncated spec: %v", err)
	}
	if _, err := EncodeSpec("/d", Spec{Path: "p", Args: []string{"a\x00b"}}); err == nil {
		t.Fatal("a NUL byte is encoded")
	}
}

// The hand-written records are JSON that encoding/json reads back.
func TestRecordsAreJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x01\n\t", "ünï"} {
		var got map[string]any
		if err := json.Unmarshal(object("s", str(s), "n", num(-42), "b", boolean(true)), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got["s"] != s || got["n"] != -42.0 || got["b"] != true {
			t.Fatalf("%q read back as %v", s, got)
		}
	}
}
