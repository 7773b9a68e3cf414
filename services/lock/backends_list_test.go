package lock_test

import (
	"slices"
	"testing"

	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/services/lock/lockservice"
)

// TestConformanceCoversEveryBackend: the conformance table (backends) runs a row for every
// backend lockservice can open, by the same name, so a backend added to the list without
// conformance rows fails here.
func TestConformanceCoversEveryBackend(t *testing.T) {
	t.Parallel()
	var table []string
	for _, bc := range backends {
		table = append(table, bc.name)
	}
	list := service.Preference(lockservice.Backends)
	slices.Sort(table)
	slices.Sort(list)
	if !slices.Equal(table, list) {
		t.Fatalf("conformance table runs %v, lockservice.Backends has %v: want a row for every backend in the list", table, list)
	}
}
