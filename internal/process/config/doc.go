// Package config holds the settings of the atelier binary and binds them to
// flags and ATELIER_* environment variables, so `atelier gateway`, `atelier
// worker` and `atelier dev` share one vocabulary.
package config
