package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/internal/process/config"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`

func TestNewKubeRESTConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Cluster, cfg.Kubeconfig = "east", path
	// A kubeconfig given explicitly wins over in-cluster credentials.
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")

	rc, err := NewKubeRESTConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://a.example:6443" || rc.BearerToken != "secret" || rc.QPS != 100 || rc.Burst != 200 || rc.UserAgent != "atelier-worker/east" {
		t.Fatalf("%+v", rc)
	}
	cfg.KubeContext = "ctx-b"
	if rc, err = NewKubeRESTConfig(cfg); err != nil || rc.Host != "https://b.example:6443" {
		t.Fatalf("context ctx-b: %v %v", rc, err)
	}
	cfg.KubeContext = "nope"
	if _, err = NewKubeRESTConfig(cfg); err == nil {
		t.Fatal("unknown context accepted")
	}
	cfg.KubeContext, cfg.Kubeconfig = "", filepath.Join(t.TempDir(), "missing")
	if _, err = NewKubeRESTConfig(cfg); err == nil {
		t.Fatal("missing kubeconfig accepted")
	}

	// In a pod without a kubeconfig: the service account, which this test
	// process does not have.
	cfg.Kubeconfig = ""
	if _, err = NewKubeRESTConfig(cfg); err == nil || !strings.Contains(err.Error(), "in-cluster") {
		t.Fatalf("in-cluster: %v", err)
	}

	clients, err := NewKubeClients(rc)
	if err != nil || clients.Kube == nil || clients.Ray == nil || clients.Spark == nil {
		t.Fatalf("%+v %v", clients, err)
	}
}
