package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client/batch"
)

// timerPending is a context whose deadline has passed but whose timer has not yet marked it
// done: the moment in which a batch's own timer for the same deadline can fail it first.
type timerPending struct{ context.Context }

func (timerPending) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestCallError pins how a call that did not get its own answer fails: as the unary client
// would, including a deadline that has passed before its timer fired.
func TestCallError(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cause := errors.New("shutting down")
	expired, cancelExpired := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), cause)
	defer cancelExpired()
	tests := []struct {
		name      string
		ctx       context.Context
		err       error
		want      connect.Code
		wantCause error
	}{
		{"a connect error keeps its code", context.Background(), connect.NewError(connect.CodeNotFound, errors.New("x")), connect.CodeNotFound, nil},
		{"canceled", canceled, context.Canceled, connect.CodeCanceled, nil},
		{"deadline with a cause", expired, context.DeadlineExceeded, connect.CodeDeadlineExceeded, cause},
		{"deadline passed, its timer not yet fired", timerPending{context.Background()}, context.DeadlineExceeded, connect.CodeDeadlineExceeded, nil},
		{"short answer", context.Background(), fmt.Errorf("%w: 1 operation, 0 results", batch.ErrShortAnswer), connect.CodeInternal, nil},
		{"anything else", context.Background(), errors.New("boom"), connect.CodeUnknown, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := callError(tt.ctx, tt.err)
			if got := connect.CodeOf(err); got != tt.want {
				t.Fatalf("callError = %v (%v), want %v", err, got, tt.want)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Fatalf("callError = %v, want it to wrap %v", err, tt.wantCause)
			}
		})
	}
}
