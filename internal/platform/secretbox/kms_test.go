package secretbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// TestKeyInAWSKMS: a key held by AWS KMS (played by local-kms, the KMS
// API with real AES: AWS is out of reach here) through its awskms:// URL,
// as a production installation names it in ATELIER_SECRETS_KEY_URL. Data
// keys are wrapped by the server (the sealed data key is KMS ciphertext,
// which only the server opens); a rotation from a local key to the KMS key
// rewraps values without re-encrypting them; a KMS that cannot be reached
// fails a seal with an error that names no key material.
func TestKeyInAWSKMS(t *testing.T) {
	ctx := context.Background()
	kms := s3test.StartKMS(t)
	kms.Setenv(t)

	b, err := Open(ctx, kms.KeyURL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := b.Seal(ctx, []byte("hf_token_value"), "p/hf")
	if err != nil {
		t.Fatalf("Seal through KMS: %v", err)
	}
	if got, err := b.Open(ctx, s, "p/hf"); err != nil || string(got) != "hf_token_value" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if len(s.DataKey) <= 32 {
		t.Errorf("the stored data key is %d bytes: not a KMS ciphertext blob", len(s.DataKey))
	}
	// The sealed value does not open for another owner.
	if _, err := b.Open(ctx, s, "q/hf"); err == nil {
		t.Error("a value sealed for p/hf opened for q/hf")
	}

	// Rotation: a local key's values move to the KMS key.
	local, localURL := newBox(t)
	old, err := local.Seal(ctx, []byte("db-password"), "p/db")
	if err != nil {
		t.Fatal(err)
	}
	rot, err := Open(ctx, kms.KeyURL(), localURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rot.Close()
	moved, changed, err := rot.Rewrap(ctx, old)
	if err != nil || !changed || moved.KeyID != b.KeyID() {
		t.Fatalf("Rewrap to the KMS key = %+v, %v, %v", moved, changed, err)
	}
	if got, err := b.Open(ctx, moved, "p/db"); err != nil || string(got) != "db-password" {
		t.Fatalf("the KMS key alone opens the rewrapped value = %q, %v", got, err)
	}

	// A KMS that does not answer: the seal fails, naming neither the key
	// URL's endpoint credentials nor anything sealed.
	down, err := Open(ctx, "awskms://"+kms.KeyID+"?region=us-east-1&endpoint=http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	_, err = down.Seal(ctx, []byte("hf_token_value"), "p/hf")
	if err == nil || strings.Contains(err.Error(), "hf_token_value") {
		t.Fatalf("Seal with an unreachable KMS: %v", err)
	}
	if errors.Is(err, ErrUnknownKey) {
		t.Errorf("an unreachable KMS is not an unknown key: %v", err)
	}
}
