package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// shiftExpiry is a client interceptor that moves every expires_at of a Pick or Extend answer
// by skew, as a service whose wall clock is skew ahead of the client's would report it.
func shiftExpiry(skew time.Duration) connect.UnaryInterceptorFunc {
	shift := func(ts *timestamppb.Timestamp) *timestamppb.Timestamp {
		return timestamppb.New(ts.AsTime().Add(skew))
	}
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err != nil {
				return res, err
			}
			switch m := res.Any().(type) {
			case *taskpickv1.PickResponse:
				for _, lt := range m.GetTasks() {
					lt.ExpiresAt = shift(lt.GetExpiresAt())
				}
			case *taskpickv1.ExtendResponse:
				m.ExpiresAt = shift(m.GetExpiresAt())
			}
			return res, err
		}
	}
}

// TestWorkLeaseDeadlineFromSendTime: the handler's lease is reckoned from when the Pick was
// sent, on the client's clock, whatever the service's wall clock says: with the service's
// clock 5s ahead, no check of the handler's context (or of Task.Err) made once the lease
// really ended says held; with it 5s behind, the lease is not lost at once. Extend never
// answers, so only the deadline can end the lease.
func TestWorkLeaseDeadlineFromSendTime(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	for _, skew := range []time.Duration{-5 * time.Second, 5 * time.Second} {
		t.Run("service clock "+skew.String(), func(t *testing.T) {
			t.Parallel()
			f := &fakeTasks{queue: []*taskpickv1.LeasedTask{leased("a", 1)}, silentExtend: true}
			c := serveFake(t, f, client.WithConnectOptions(connect.WithInterceptors(shiftExpiry(skew))))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stats client.WorkStats
			handler := func(hctx context.Context, task *client.Task) error {
				defer cancel()
				f.mu.Lock()
				realEnd := f.pickTaken.Add(ttl) // the service may hand the task on from here
				f.mu.Unlock()
				for {
					now := time.Now()
					ctxErr, taskErr := hctx.Err(), task.Err()
					switch {
					case ctxErr == nil && !now.Before(realEnd):
						t.Errorf("the handler's context says held %v after the lease really ended (deadline %v after it)",
							now.Sub(realEnd), task.Deadline().Sub(realEnd))
						return nil
					case ctxErr != nil && now.Before(realEnd.Add(-ttl/2)):
						t.Errorf("lost %v before the lease's end, with half of it left: %v", realEnd.Sub(now), context.Cause(hctx))
						return nil
					case ctxErr != nil:
						if !errors.Is(context.Cause(hctx), client.ErrLeaseLost) || !errors.Is(taskErr, client.ErrLeaseLost) {
							t.Errorf("lost: cause %v, Task.Err %v; want both ErrLeaseLost", context.Cause(hctx), taskErr)
						}
						return nil
					case taskErr != nil:
						t.Errorf("Task.Err = %v while the context says held", taskErr)
						return nil
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
			if err := c.Work(ctx, "p", handler, client.WithLeaseTTL(ttl), client.WithPollWait(time.Second), client.WithWorkStats(&stats)); err != nil {
				t.Fatalf("Work = %v", err)
			}
			if _, acks, nacks := f.snapshot(); len(acks) != 0 || len(nacks) != 0 || stats.LeasesLost.Load() != 1 {
				t.Fatalf("acks %v, nacks %v, LeasesLost %d; want none, none, 1", acks, nacks, stats.LeasesLost.Load())
			}
		})
	}
}
