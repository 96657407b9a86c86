package redact

import (
	"bytes"
	"fmt"
	"testing"
)

func TestWriterAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, New(map[string]string{"k": "s3cret-value", "multi": "line-one\nline-two"}))
	for _, p := range []string{"a s3c", "ret-val", "ue b\nline-", "two and line-one\nend"} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	want := "a [secret k] b\n[secret multi] and [secret multi]\nend"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func TestShortValuesAndNil(t *testing.T) {
	if New(map[string]string{"x": "ab"}) != nil {
		t.Fatal("a 2-byte value is redacted")
	}
	var r *Redactor
	if r.String("abc") != "abc" || fmt.Sprint(r.Outputs(map[string]any{"a": "b"})) != "map[a:b]" {
		t.Fatal("a nil Redactor changed text")
	}
	var out bytes.Buffer
	w := NewWriter(&out, nil)
	_, _ = w.Write([]byte("as is"))
	w.Flush()
	if out.String() != "as is" {
		t.Fatalf("got %q", out.String())
	}
}

func TestLongestFirstAndOutputs(t *testing.T) {
	r := New(map[string]string{"short": "abcd", "long": "xxabcdxx"})
	if got := r.String("xxabcdxx abcd"); got != "[secret long] [secret short]" {
		t.Fatalf("got %q", got)
	}
	got := r.Outputs(map[string]any{"k": []any{"abcd", 1.0, map[string]any{"abcd": "xxabcdxx"}}})
	if fmt.Sprint(got) != "map[k:[[secret short] 1 map[[secret short]:[secret long]]]]" {
		t.Fatalf("outputs %v", got)
	}
}
