package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDistIsBuiltFromSources recomputes the digest build.mjs writes to
// dist/SOURCE: a change to src/, the lockfile or the build committed
// without `make ui` (so without the matching dist/) fails here.
func TestDistIsBuiltFromSources(t *testing.T) {
	var inputs []string
	err := filepath.WalkDir("src", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			inputs = append(inputs, filepath.ToSlash(p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	inputs = append(inputs, "build.mjs", "package-lock.json", "package.json", "tsconfig.json")
	sort.Strings(inputs)
	h := sha256.New()
	for _, f := range inputs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\n%d\n", f, len(b))
		h.Write(b)
	}
	want := "sha256:" + hex.EncodeToString(h.Sum(nil))
	got, err := fs.ReadFile(dist, "dist/SOURCE")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != want {
		t.Fatalf("dist/ was built from other sources (dist/SOURCE %s, sources %s): run `make ui` and commit dist/", strings.TrimSpace(string(got)), want)
	}
}

// TestIndexReferencesBuiltFiles checks that every file index.html loads is
// in the embedded build.
func TestIndexReferencesBuiltFiles(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 3 {
		t.Fatalf("index.html references %d files, want app.js, app.css and the icon", len(refs))
	}
	for _, m := range refs {
		if _, err := fs.Stat(files, m[1]); err != nil {
			t.Errorf("index.html loads %s, which dist/ lacks", m[1])
		}
	}
}
