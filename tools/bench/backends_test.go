package main

import (
	"slices"
	"testing"

	"github.com/coordkit/coordkit/services/lock/lockservice"
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

// TestLockBenchCoversEveryBackend fails when the lock service gains a backend that
// `coordbench lock` and `coordbench contend` do not measure.
func TestLockBenchCoversEveryBackend(t *testing.T) {
	t.Parallel()
	for _, b := range lockservice.Backends {
		target := "service/" + b.Name
		if !slices.Contains(allTargets(), target) {
			t.Errorf("backend %q of lockservice.Backends: coordbench lock has no target %s", b.Name, target)
		}
		if !slices.Contains(contendTargets(), target) {
			t.Errorf("backend %q of lockservice.Backends: coordbench contend has no target %s", b.Name, target)
		}
	}
}
