//go:build unix

package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureVersityGWBuildsThePinnedVersion(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	fakeGo(t, `echo "$@" > "`+args+`"
printf '#!/bin/sh\necho fake versitygw\n' > "$GOBIN/versitygw"
chmod +x "$GOBIN/versitygw"
`)
	t.Setenv(EnvVersityGW, "")
	path, err := EnsureVersityGW(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := VersityGWPath(); path != want || filepath.Base(filepath.Dir(path)) != "versitygw-"+VersityGWVersion {
		t.Errorf("path %q, want %q in versitygw-%s/", path, want, VersityGWVersion)
	}
	b, _ := os.ReadFile(args)
	for _, w := range []string{
		"install", "github.com/versity/versitygw/cmd/versitygw@" + VersityGWVersion,
		"main.Version=" + VersityGWVersion,
	} {
		if !strings.Contains(string(b), w) {
			t.Errorf("go %s: no %q", b, w)
		}
	}

	exe := filepath.Join(t.TempDir(), "versitygw")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvVersityGW, exe)
	if p, err := EnsureVersityGW(context.Background(), nil); err != nil || p != exe {
		t.Errorf("with %s: %q, %v", EnvVersityGW, p, err)
	}
}
