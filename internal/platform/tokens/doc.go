// Package tokens is the identity domain: API token secrets (made and hashed
// here) and the roles they grant (Role, Rank, Allows), which the catalogue,
// the gateway and the pipeline language (approval rules) all use.
//
// Only the SHA-256 of a secret is stored: a leaked database does not leak
// usable tokens, and a plain hash suffices because secrets carry 256 bits of
// randomness (no salt or slow hash is needed against guessing).
package tokens
