// Package app holds the long-running processes of the atelier binary (the
// REST gateway, the worker and the all-in-one dev stack) as values with a
// Run(ctx) method. The wire injectors in wire/ build them; cmd/atelier only
// parses flags and calls Run, so every process stops cleanly when its
// context is cancelled.
package app
