// Package catalog holds the activities through which workflows write to the
// Postgres catalogue. Workflows cannot do I/O themselves; keeping these
// activities thin (validate, call the store) keeps retries cheap and safe.
package catalog
