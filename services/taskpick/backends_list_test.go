package taskpick_test

import (
	"slices"
	"testing"

	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
)

// TestConformanceCoversEveryBackend: the conformance table (backends) runs a row for every
// backend taskpickservice can open, by the same name, so a backend added to the list without
// conformance rows fails here.
func TestConformanceCoversEveryBackend(t *testing.T) {
	t.Parallel()
	var table []string
	for _, bc := range backends {
		table = append(table, bc.name)
	}
	list := service.Preference(taskpickservice.Backends)
	slices.Sort(table)
	slices.Sort(list)
	if !slices.Equal(table, list) {
		t.Fatalf("conformance table runs %v, taskpickservice.Backends has %v: want a row for every backend in the list", table, list)
	}
}
