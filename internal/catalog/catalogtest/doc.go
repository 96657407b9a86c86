// Package catalogtest is the behaviour every implementation of the
// catalogue must share: the Postgres store (internal/store) and the API's
// in-memory fake (api tests) run the same Contract, so the fast API tests
// cannot drift from what Postgres does (idempotent creates, digest dedup,
// keyset paging, tenant scoping).
package catalogtest
