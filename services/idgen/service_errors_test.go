package idgen

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// TestToConnect pins the ID service's edge: its own errors keep their codes, and a store
// failure, a shutdown or a caller's ending reaches the client with the code every service
// uses. The worker-id store runs against a real Redis that is not there (a closed port) and
// the real one, so the errors are the ones the store really returns.
func TestToConnect(t *testing.T) {
	t.Parallel()
	live := context.Background()
	shutdown, stop := context.WithCancelCause(live)
	stop(server.ErrShutdown)
	canceled, cancel := context.WithCancel(live)
	cancel()

	nobody := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), MaxRetries: -1})
	t.Cleanup(func() { nobody.Close() })
	down := workerid.NewRedis(nobody, testenv.Prefix(t))
	up := workerid.NewRedis(testenv.Redis(t, ""), testenv.Prefix(t))
	storeErr := func(ctx context.Context, s workerid.Store) error {
		_, err := s.Acquire(ctx, "owner", time.Second)
		if err == nil {
			t.Fatal("worker-id Acquire succeeded, want a failure")
		}
		return err
	}

	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want connect.Code
	}{
		{"unknown tag", live, fmt.Errorf("next: %w", segment.ErrNotFound), connect.CodeNotFound},
		{"tag exists", live, segment.ErrExists, connect.CodeAlreadyExists},
		{"worker-id store down", live, storeErr(live, down), connect.CodeUnavailable},
		{"worker-id store during shutdown", shutdown, storeErr(shutdown, up), connect.CodeUnavailable},
		{"worker-id store, caller canceled", canceled, storeErr(canceled, up), connect.CodeCanceled},
		{"bare ctx.Err() of a shut-down request", shutdown, shutdown.Err(), connect.CodeUnavailable},
		{"a bug", live, errors.New("boom"), connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := connect.CodeOf(toConnect(tt.ctx, tt.err, "tag")); got != tt.want {
				t.Errorf("toConnect(%v) code = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	// The store itself reports the cause, not the bare ctx.Err(): whoever reads the error,
	// not only this edge, sees that it was the shutdown.
	if err := storeErr(shutdown, up); !errors.Is(err, server.ErrShutdown) {
		t.Errorf("worker-id store during shutdown = %v, want server.ErrShutdown", err)
	}
	if !errors.Is(workerid.ErrUnavailable, server.ErrUnavailable) {
		t.Error("workerid.ErrUnavailable does not wrap server.ErrUnavailable")
	}
}
