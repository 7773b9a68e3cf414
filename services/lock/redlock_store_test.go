package lock_test

import (
	"testing"

	"github.com/coordkit/coordkit/services/lock"
)

func redlockStore(t *testing.T) func(t *testing.T) lock.Backend {
	t.Fatal("redlock backend: not implemented yet")
	return nil
}
