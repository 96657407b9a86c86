// Package fsperm answers permission questions about the file system that
// the standard library does not: whether another user can reach a
// directory. The dev stack asks it before running Postgres as an
// unprivileged user, the local runtime before running steps as one.
package fsperm
