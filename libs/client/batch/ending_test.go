package batch

import (
	"context"
	"errors"
	"testing"
	"time"
)

// noDone is a context whose deadline has passed but which has no Done channel, so nothing
// will ever mark it done.
type noDone struct{ context.Context }

func (noDone) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestEnding pins how a context has ended, including the moment after its deadline before
// its timer has fired (a real one is waited for, so its cause is kept).
func TestEnding(t *testing.T) {
	cause := errors.New("the caller's cause")
	canceled, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	// Due in a moment: Ending may be asked before its timer fires, and must wait for it.
	due, cancelDue := context.WithDeadlineCause(context.Background(), time.Now().Add(time.Millisecond), cause)
	defer cancelDue()
	time.Sleep(2 * time.Millisecond)
	future, cancelFuture := context.WithTimeout(context.Background(), time.Hour)
	defer cancelFuture()
	tests := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"live", context.Background(), nil},
		{"deadline ahead", future, nil},
		{"canceled with a cause", canceled, cause},
		{"deadline passed, with a cause", due, cause},
		{"deadline passed, no Done channel", noDone{context.Background()}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ending(tt.ctx); !errors.Is(got, tt.want) || (tt.want == nil) != (got == nil) {
				t.Fatalf("Ending = %v, want %v", got, tt.want)
			}
		})
	}
}
