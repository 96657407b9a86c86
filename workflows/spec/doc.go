// Package spec defines the declarative pipeline format (a JSON/YAML DAG), its
// strict parser, its validator (which reports every problem with its path) and
// the template/condition evaluation the generic pipeline workflow relies on.
//
// Everything here is pure and deterministic so it can run inside workflow code.
package spec
