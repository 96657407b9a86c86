package store_test

import (
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog/catalogtest"
)

// The Postgres store honours the catalogue contract the API's fake is held
// to as well.
func TestStoreHonoursTheCatalogueContract(t *testing.T) {
	catalogtest.Contract(t, func(t *testing.T) catalogtest.Catalog { return newStore(t) })
}
