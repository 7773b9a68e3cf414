package lock

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// TestErrorCodes pins the lock's edge: its own errors get the codes they carry, and everything
// else goes through the same shared mapping, so a backend that reports a shutdown or a cancel
// in any of the ways engines do reaches the client with the same code.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	live := context.Background()
	shutdown, stop := context.WithCancelCause(live)
	stop(server.ErrShutdown)
	canceled, cancel := context.WithCancel(live)
	cancel()
	expired, cancelExpired := context.WithTimeout(live, 0)
	defer cancelExpired()

	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want connect.Code
	}{
		{"not held", live, fmt.Errorf("release: %w", ErrNotHeld), connect.CodeFailedPrecondition},
		{"other owner", live, fmt.Errorf("renew: %w", ErrNotOwner), connect.CodePermissionDenied},
		{"hold limit", live, fmt.Errorf("acquire: %w", ErrHoldLimit), connect.CodeResourceExhausted},
		{"backend down", live, Unavailable(live, "redis", errors.New("connection refused")), connect.CodeUnavailable},
		{"own sentinel wrapped by an engine", live, fmt.Errorf("redlock: acquire: %w: 1 of 3 nodes", ErrUnavailable), connect.CodeUnavailable},
		{"shutdown through Unavailable", shutdown, Unavailable(shutdown, "redis", errors.New("EOF")), connect.CodeUnavailable},
		{"shutdown reported as the bare ctx.Err()", shutdown, shutdown.Err(), connect.CodeUnavailable},
		{"caller canceled", canceled, Unavailable(canceled, "mysql", errors.New("bad conn")), connect.CodeCanceled},
		{"caller's deadline", expired, Unavailable(expired, "zookeeper", errors.New("timeout")), connect.CodeDeadlineExceeded},
		{"a bug", live, errors.New("boom"), connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := connect.CodeOf(server.Error(tt.ctx, tt.err)); got != tt.want {
				t.Errorf("server.Error(%v) code = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if !errors.Is(ErrUnavailable, server.ErrUnavailable) {
		t.Error("lock.ErrUnavailable does not wrap server.ErrUnavailable: other services' edges would not see it as unavailable")
	}
}
