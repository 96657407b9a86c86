// Package vault keeps project secrets: values are sealed with
// internal/platform/secretbox before they reach Postgres (internal/store
// holds only the sealed form) and opened only where a step that references
// them runs (Resolve, called by the worker just before it starts the
// step's process). The gateway writes through it (Put) and never reads a
// value back: secrets are write-only.
//
// A sealed value is bound to its project and name, so a row copied to
// another project does not open. Rotate rewraps every value's data key
// with the current key, so the previous key can be retired.
package vault
