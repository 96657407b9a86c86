//go:build unix

package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureHelmBuildsThePinnedVersion(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	fakeGo(t, `echo "$@" > "`+args+`"
printf '#!/bin/sh\necho fake helm\n' > "$GOBIN/helm"
chmod +x "$GOBIN/helm"
`)
	t.Setenv(EnvHelm, "")
	var logs []string
	path, err := EnsureHelm(context.Background(), func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	want, _ := HelmPath()
	if path != want || filepath.Base(filepath.Dir(path)) != "helm-"+HelmVersion {
		t.Errorf("path %q, want %q in helm-%s/", path, want, HelmVersion)
	}
	b, _ := os.ReadFile(args)
	for _, w := range []string{
		"install", "helm.sh/helm/v3/cmd/helm@" + HelmVersion,
		"internal/version.version=" + HelmVersion,
		"chartutil.k8sVersionMinor=" + helmKubeMinor,
	} {
		if !strings.Contains(string(b), w) {
			t.Errorf("go %s: no %q", b, w)
		}
	}
	if !strings.Contains(strings.Join(logs, "\n"), "building helm "+HelmVersion) {
		t.Errorf("no progress message: %q", logs)
	}

	exe := filepath.Join(t.TempDir(), "helm")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvHelm, exe)
	if p, err := EnsureHelm(context.Background(), nil); err != nil || p != exe {
		t.Errorf("with %s: %q, %v", EnvHelm, p, err)
	}
}
