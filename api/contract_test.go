package api

import (
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog/catalogtest"
)

// The in-memory fake the API tests use behaves like the Postgres store
// (internal/store runs the same contract).
func TestFakeCatalogHonoursTheCatalogueContract(t *testing.T) {
	catalogtest.Contract(t, func(*testing.T) catalogtest.Catalog { return newFakeCatalog() })
}
