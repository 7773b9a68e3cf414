package taskpick

import (
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client/subject"
	"google.golang.org/protobuf/encoding/protojson"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// TestAvailableCountWakes: an available event for n tasks, in the form the bus publishes it
// (protobuf JSON), wakes n waiting Picks of the pool at once, not one that then wakes the
// next in turn.
func TestAvailableCountWakes(t *testing.T) {
	s := &Service{waiters: newWaiters()}
	const backend, pool = "sqlite", "p"
	var line []*waiter
	for range 5 {
		line = append(line, s.waiters.add(backend, pool))
	}
	data, err := protojson.Marshal(&taskpickv1.AvailableEvent{Backend: backend, Pool: pool, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.onAvailable(subject.TaskAvailable(backend, pool), data)
	woken := 0
	for _, w := range line {
		select {
		case <-w.ch:
			woken++
		case <-time.After(10 * time.Millisecond):
		}
	}
	if woken != 3 {
		t.Fatalf("an event for 3 tasks woke %d of 5 waiters, want 3", woken)
	}
}
