// Package storetest gives tests a fresh, empty Postgres database.
//
// The server comes from devstack.EnsurePostgres: $ATELIER_DATABASE_URL, else
// a server on 127.0.0.1:5432 that trusts user postgres or root, else a
// throwaway cluster kept in $ATELIER_TEST_PG_DIR (default
// ~/.cache/atelier/test-postgres). The throwaway cluster is left running
// when the tests end, so that later test binaries (including ones running in
// parallel) reuse it instead of paying initdb and startup again.
//
// When no Postgres can be had the test is skipped, except under CI=true
// where it fails.
package storetest
