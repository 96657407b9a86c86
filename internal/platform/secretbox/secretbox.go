package secretbox

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"gocloud.dev/secrets"
	// AWS KMS keys (awskms://<key ID or ARN or alias>?region=…), tested
	// against local-kms (internal/stack/s3test.StartKMS).
	_ "gocloud.dev/secrets/awskms"
	"gocloud.dev/secrets/localsecrets"
)

// Sealed is a value as it is stored: its ciphertext, and the data key that
// encrypted it, itself encrypted by the key KeyID names.
type Sealed struct {
	KeyID      string
	DataKey    []byte
	Nonce      []byte
	Ciphertext []byte
}

// ErrUnknownKey is returned when a value was sealed with a key the Box was
// not opened with.
var ErrUnknownKey = errors.New("secretbox: sealed with a key this installation does not have")

// Box seals with its current key and opens with any of its keys.
type Box struct {
	current string
	keepers map[string]*secrets.Keeper
}

// Open opens the keepers of keyURL (the current key) and of oldKeyURLs
// (keys being rotated out). Local keys (base64key://) and AWS KMS keys
// (awskms://) are built in; a local key's URL must carry the key: an empty
// one would make a key that dies with the process.
func Open(ctx context.Context, keyURL string, oldKeyURLs ...string) (*Box, error) {
	b := &Box{keepers: map[string]*secrets.Keeper{}}
	for i, u := range append([]string{keyURL}, oldKeyURLs...) {
		id, k, err := openKeeper(ctx, u)
		if err != nil {
			b.Close()
			return nil, err
		}
		if i == 0 {
			b.current = id
		}
		if _, dup := b.keepers[id]; dup {
			k.Close()
			continue
		}
		b.keepers[id] = k
	}
	return b, nil
}

func openKeeper(ctx context.Context, raw string) (string, *secrets.Keeper, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme == "" {
		return "", nil, errors.New("secretbox: a key URL such as base64key://<32 bytes, base64> is required")
	}
	if u.Scheme == localsecrets.Scheme && u.Host == "" && u.Opaque == "" {
		return "", nil, errors.New("secretbox: base64key:// needs its key (an empty one would be a new key each start)")
	}
	k, err := secrets.OpenKeeper(ctx, u.String())
	if err != nil {
		// The error may quote the URL, which may be the key: say only its scheme.
		return "", nil, fmt.Errorf("secretbox: opening the %s:// key failed", u.Scheme)
	}
	return fingerprint(u.String()), k, nil
}

// fingerprint names a key without revealing it.
func fingerprint(keyURL string) string {
	h := sha256.Sum256([]byte("atelier-secretbox:" + keyURL))
	return hex.EncodeToString(h[:8])
}

// KeyID is the fingerprint of the current key.
func (b *Box) KeyID() string { return b.current }

// Seal encrypts value for owner (for example "project/name"), which must
// be given again to open it.
func (b *Box) Seal(ctx context.Context, value []byte, owner string) (Sealed, error) {
	dek := make([]byte, 32)
	if _, err := rand.Read(dek); err != nil {
		return Sealed{}, err
	}
	gcm, err := newGCM(dek)
	if err != nil {
		return Sealed{}, err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, err
	}
	wrapped, err := b.keepers[b.current].Encrypt(ctx, dek)
	if err != nil {
		return Sealed{}, fmt.Errorf("secretbox: wrapping the data key: %w", err)
	}
	return Sealed{KeyID: b.current, DataKey: wrapped, Nonce: nonce, Ciphertext: gcm.Seal(nil, nonce, value, []byte(owner))}, nil
}

// Open decrypts a value sealed for owner.
func (b *Box) Open(ctx context.Context, s Sealed, owner string) ([]byte, error) {
	dek, err := b.dataKey(ctx, s)
	if err != nil {
		return nil, err
	}
	gcm, err := newGCM(dek)
	if err != nil {
		return nil, err
	}
	v, err := gcm.Open(nil, s.Nonce, s.Ciphertext, []byte(owner))
	if err != nil {
		return nil, errors.New("secretbox: the value does not open (tampered, or sealed for another owner)")
	}
	return v, nil
}

// Rewrap re-encrypts s's data key with the current key (rotation); the
// value itself is untouched. It reports false when s already uses it.
func (b *Box) Rewrap(ctx context.Context, s Sealed) (Sealed, bool, error) {
	if s.KeyID == b.current {
		return s, false, nil
	}
	dek, err := b.dataKey(ctx, s)
	if err != nil {
		return s, false, err
	}
	wrapped, err := b.keepers[b.current].Encrypt(ctx, dek)
	if err != nil {
		return s, false, fmt.Errorf("secretbox: wrapping the data key: %w", err)
	}
	s.KeyID, s.DataKey = b.current, wrapped
	return s, true, nil
}

func (b *Box) dataKey(ctx context.Context, s Sealed) ([]byte, error) {
	k, ok := b.keepers[s.KeyID]
	if !ok {
		return nil, fmt.Errorf("%w (key %s)", ErrUnknownKey, s.KeyID)
	}
	dek, err := k.Decrypt(ctx, s.DataKey)
	if err != nil {
		return nil, fmt.Errorf("secretbox: unwrapping the data key (key %s) failed", s.KeyID)
	}
	return dek, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Close releases the keepers.
func (b *Box) Close() {
	for _, k := range b.keepers {
		k.Close()
	}
}

// NewLocalKeyURL makes a new local key, as a base64key:// URL (what
// `atelier dev` writes into .atelier/secrets-key).
func NewLocalKeyURL() (string, error) {
	k, err := localsecrets.NewRandomKey()
	if err != nil {
		return "", err
	}
	return localsecrets.Scheme + "://" + base64.URLEncoding.EncodeToString(k[:]), nil
}
