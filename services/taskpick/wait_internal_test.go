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

// TestOneTimerPerLine: of the waiters of a limited pool only one sleeps until its next
// chance; when it leaves the line, the next waiter is woken to take the timer.
func TestOneTimerPerLine(t *testing.T) {
	ws := newWaiters()
	a, b := ws.add("redis", "p"), ws.add("redis", "p")
	other := ws.add("redis", "q")
	if !ws.holdTimer(a, true) || ws.holdTimer(b, true) || !ws.holdTimer(a, true) {
		t.Fatal("the timer of a line went to more than one waiter")
	}
	if !ws.holdTimer(other, true) {
		t.Fatal("another pool's line shares the timer")
	}
	ws.remove(a)
	select {
	case <-b.ch:
	case <-time.After(time.Second):
		t.Fatal("the holder left the line without waking the next waiter")
	}
	if !ws.holdTimer(b, true) {
		t.Fatal("the next waiter cannot take the timer its holder left")
	}
	ws.holdTimer(b, false)
	c := ws.add("redis", "p")
	if !ws.holdTimer(c, true) {
		t.Fatal("a timer given up stays held")
	}
	ws.remove(b)
	select {
	case <-c.ch:
		t.Fatal("a waiter that held no timer woke another on leaving")
	default:
	}
}
