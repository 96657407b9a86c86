package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

// KMS is a running local-kms (devstack.EnsureLocalKMS) with one symmetric
// key: the AWS KMS API on loopback, for code that wraps keys through
// gocloud.dev/secrets/awskms.
type KMS struct {
	// Endpoint is the server's base URL, http://127.0.0.1:<port>.
	Endpoint string
	// Region is the region the server says it is in.
	Region string
	// KeyID is the ID of the server's symmetric (AES-256) key.
	KeyID string
	// Log is the file the server's output goes to.
	Log string
}

// StartKMS starts a local-kms for this test, seeded with one key whose
// material is new for each server, and stops it when the test ends; on a
// failed test its output is written to the test log. It skips the test
// with -short.
func StartKMS(t testing.TB) *KMS {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a local-kms server; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := devstack.EnsureLocalKMS(ctx, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "s3test: "+format+"\n", args...)
	})
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	dir := t.TempDir()
	material := make([]byte, 32)
	if _, err := rand.Read(material); err != nil {
		t.Fatal(err)
	}
	k := &KMS{Region: "us-east-1", KeyID: "6b3ad1d2-6d0e-4f1c-9a61-7f3b2c0e9d10", Log: filepath.Join(dir, "local-kms.log")}
	seed := fmt.Sprintf("Keys:\n  Symmetric:\n    Aes:\n      - Metadata:\n          KeyId: %s\n        BackingKeys:\n          - %s\n",
		k.KeyID, hex.EncodeToString(material))
	if err := os.WriteFile(filepath.Join(dir, "seed.yaml"), []byte(seed), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	k.Endpoint = "http://" + addr
	logF, err := os.Create(k.Log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	// Only what it needs: a developer's AWS_* or KMS_* must not change it.
	cmd.Env = []string{"PORT=" + strconv.Itoa(port), "KMS_REGION=" + k.Region, "KMS_ACCOUNT_ID=111122223333",
		"KMS_DATA_PATH=" + filepath.Join(dir, "data"), "KMS_SEED_PATH=" + filepath.Join(dir, "seed.yaml")}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logF, logF
	done, err := start(cmd)
	logF.Close()
	if err != nil {
		t.Fatalf("s3test: start local-kms: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); <-done }) }
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			logTail(t, k.Log)
		}
	})
	// local-kms has no health route: any answer means it serves.
	if err := waitHTTP(ctx, k.Endpoint, done, func(int) bool { return true }); err != nil {
		t.Fatalf("s3test: local-kms on %s: %v", addr, err)
	}
	return k
}

// KeyURL is the gocloud.dev/secrets URL of the server's key through the
// awskms driver (import it, blank, where the URL is opened); credentials
// come from the environment (SetenvKMS).
func (k *KMS) KeyURL() string {
	return "awskms://" + k.KeyID + "?" + url.Values{"region": {k.Region}, "endpoint": {k.Endpoint}}.Encode()
}

// Setenv gives the in-process AWS SDK credentials for the server (which
// checks none, but the SDK signs every request) for the rest of the test.
func (k *KMS) Setenv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", "atelier-test-access")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "atelier-test-secret")
	t.Setenv("AWS_REGION", k.Region)
}
