package main

import (
	"testing"

	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
)

// TestTaskBenchCoversEveryBackend fails when the task service gains a backend that
// `coordbench task` cannot give a connection to.
func TestTaskBenchCoversEveryBackend(t *testing.T) {
	t.Parallel()
	for _, b := range taskpickservice.Backends {
		if taskBenchDeps[b.Name] == nil {
			t.Errorf("backend %q of taskpickservice.Backends has no entry in taskBenchDeps", b.Name)
		}
	}
	if len(taskBenchDeps) != len(taskpickservice.Backends) {
		t.Errorf("taskBenchDeps has %d entries, taskpickservice.Backends %d", len(taskBenchDeps), len(taskpickservice.Backends))
	}
}
