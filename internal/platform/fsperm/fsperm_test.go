package fsperm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReachable(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open", "a")
	closed := filepath.Join(base, "closed", "a")
	for _, d := range []string{open, closed} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{base, filepath.Dir(base), filepath.Dir(open)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(closed), 0o700); err != nil {
		t.Fatal(err)
	}
	const other = 65531 // owns nothing here
	if err := Reachable(filepath.Join(open, "not", "yet"), other, other); err != nil {
		t.Errorf("open: %v", err)
	}
	err := Reachable(closed, other, other)
	if err == nil || !strings.Contains(err.Error(), filepath.Dir(closed)) {
		t.Errorf("closed: %v, want an error naming %s", err, filepath.Dir(closed))
	}
}
