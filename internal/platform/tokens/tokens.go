package tokens

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Prefix starts every secret so that leaked tokens are easy to recognise
// (secret scanners, logs) and malformed ones are rejected without a lookup.
const Prefix = "atl_"

// secretBytes of randomness: 256 bits.
const secretBytes = 32

// encodedLen is the length of a secret: prefix + unpadded base64url.
var encodedLen = len(Prefix) + base64.RawURLEncoding.EncodedLen(secretBytes)

// New returns a fresh secret and its hash. Show the secret once; store the hash.
func New() (secret string, hash []byte) {
	b := make([]byte, secretBytes)
	// crypto/rand.Read never returns an error (it panics if the OS fails).
	_, _ = rand.Read(b)
	secret = Prefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, Hash(secret)
}

// Hash is the SHA-256 of a secret, as stored and looked up.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// WellFormed reports whether s could be a secret made by New, so garbage is
// rejected before it costs a database round trip.
func WellFormed(s string) bool {
	if len(s) != encodedLen || !strings.HasPrefix(s, Prefix) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s[len(Prefix):])
	return err == nil
}
