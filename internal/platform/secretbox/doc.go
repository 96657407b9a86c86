// Package secretbox seals values with envelope encryption: every value gets
// a fresh 256-bit data key that encrypts it (AES-256-GCM, with the value's
// owner as additional data, so a sealed value copied to another row does
// not open), and the data key is itself encrypted by a key encryption key
// held by a gocloud.dev/secrets keeper. `atelier dev` uses a local key
// (base64key://, generated into .atelier/ with mode 0600); a production
// installation names its key by URL (ATELIER_SECRETS_KEY_URL).
//
// Keys rotate without re-encrypting values: a Box opened with the new key
// and the previous ones (ATELIER_SECRETS_OLD_KEY_URLS) opens what either
// sealed, and Rewrap re-encrypts a value's data key with the current key.
// Each sealed value names its key by a fingerprint (KeyID), never by URL,
// since a local key's URL is the key itself.
package secretbox
