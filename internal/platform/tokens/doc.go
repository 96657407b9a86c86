// Package tokens makes and hashes API token secrets and orders roles.
//
// Only the SHA-256 of a secret is stored: a leaked database does not leak
// usable tokens, and a plain hash suffices because secrets carry 256 bits of
// randomness (no salt or slow hash is needed against guessing).
package tokens
