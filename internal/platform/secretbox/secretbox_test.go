package secretbox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func newBox(t *testing.T, old ...string) (*Box, string) {
	t.Helper()
	u, err := NewLocalKeyURL()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(context.Background(), u, old...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, u
}

func TestSealOpenRoundTrip(t *testing.T) {
	ctx := context.Background()
	b, _ := newBox(t)
	value := []byte("hunter2-and-more")
	s, err := b.Seal(ctx, value, "p/db")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Ciphertext, value) || bytes.Contains(s.DataKey, value) {
		t.Fatal("the value is in the sealed form")
	}
	got, err := b.Open(ctx, s, "p/db")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Another owner (a row copied to another project) does not open.
	if _, err := b.Open(ctx, s, "other/db"); err == nil {
		t.Fatal("opened for another owner")
	}
	// Tampering is detected.
	s.Ciphertext[0] ^= 1
	if _, err := b.Open(ctx, s, "p/db"); err == nil {
		t.Fatal("tampered value opened")
	}
	// Two seals of one value differ (fresh data key and nonce).
	s1, _ := b.Seal(ctx, value, "p/db")
	s2, _ := b.Seal(ctx, value, "p/db")
	if bytes.Equal(s1.Ciphertext, s2.Ciphertext) {
		t.Fatal("sealing is deterministic")
	}
}

func TestRotation(t *testing.T) {
	ctx := context.Background()
	old, oldURL := newBox(t)
	s, err := old.Seal(ctx, []byte("v1"), "p/k")
	if err != nil {
		t.Fatal(err)
	}
	// The new key alone cannot open what the old one sealed.
	alone, _ := newBox(t)
	if _, err := alone.Open(ctx, s, "p/k"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Open with another key: %v", err)
	}
	// New key plus the old one: opens, and Rewrap moves it to the new key.
	b, _ := newBox(t, oldURL)
	if got, err := b.Open(ctx, s, "p/k"); err != nil || string(got) != "v1" {
		t.Fatalf("Open during rotation = %q, %v", got, err)
	}
	r, changed, err := b.Rewrap(ctx, s)
	if err != nil || !changed || r.KeyID != b.KeyID() {
		t.Fatalf("Rewrap = %+v, %v, %v", r, changed, err)
	}
	if !bytes.Equal(r.Ciphertext, s.Ciphertext) {
		t.Fatal("Rewrap re-encrypted the value, not only its data key")
	}
	if _, again, _ := b.Rewrap(ctx, r); again {
		t.Fatal("Rewrap of a current value changed it")
	}
	// After rotation the old key is no longer needed.
	if got, err := b.Open(ctx, r, "p/k"); err != nil || string(got) != "v1" {
		t.Fatalf("Open after rewrap = %q, %v", got, err)
	}
}

func TestOpenRefusesKeylessAndHidesTheURL(t *testing.T) {
	for _, u := range []string{"", "base64key://", "nope"} {
		if _, err := Open(context.Background(), u); err == nil {
			t.Errorf("Open(%q) succeeded", u)
		}
	}
	_, err := Open(context.Background(), "base64key://not-a-key-at-all")
	if err == nil || strings.Contains(err.Error(), "not-a-key") {
		t.Fatalf("a bad key's error must not quote it: %v", err)
	}
}
