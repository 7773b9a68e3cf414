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
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// TestErrorCodes pins the ID service's edge: its own errors keep their codes, and a store
// failure, a shutdown or a caller's ending reaches the client with the code every service
// uses. The worker-id store runs against a real Redis that is not there (a closed port) and
// the real one, so the errors are the ones the store really returns.
func TestErrorCodes(t *testing.T) {
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
			if got := connect.CodeOf(server.Error(tt.ctx, namingTag(tt.err, "tag"))); got != tt.want {
				t.Errorf("server.Error(%v) code = %v, want %v", tt.err, got, tt.want)
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

// TestTagErrorMessages pins what a client reads for the engines' own errors: the code each
// error carries, and for the segment errors about a tag the message naming the tag as the
// request gave it, word for word as the edge has always said it.
func TestTagErrorMessages(t *testing.T) {
	t.Parallel()
	const tag = `orders "eu"`
	tests := []struct {
		name     string
		err      error
		wantCode connect.Code
		wantMsg  string
	}{
		{"unknown tag", fmt.Errorf("next: %w", fmt.Errorf("%w: %q", segment.ErrNotFound, tag)), connect.CodeNotFound,
			`tag: "orders \"eu\"" does not exist; create it with CreateTag (coord id create-tag)`},
		{"tag exists", fmt.Errorf("%w: %q", segment.ErrExists, tag), connect.CodeAlreadyExists,
			`tag: "orders \"eu\"" already exists`},
		{"below a deleted tag", &segment.BelowTombstone{Tag: tag, Start: 5, MaxID: 100}, connect.CodeFailedPrecondition,
			`start: 5 is below 100, where the deleted tag "orders \"eu\"" stopped: IDs below it may have been issued; leave start unset to continue there`},
		{"worker-id lease lost", fmt.Errorf("%w (worker id 3)", snowflake.ErrLeaseLost), connect.CodeUnavailable,
			"snowflake: worker-id lease lost, not issuing (worker id 3)"},
		{"clock backwards", fmt.Errorf("%w: 3s behind the last issued ID (the limit is 1s)", snowflake.ErrClockBackwards), connect.CodeUnavailable,
			"snowflake: clock moved backwards: 3s behind the last issued ID (the limit is 1s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := server.Error(context.Background(), namingTag(tt.err, tag))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != tt.wantCode || ce.Message() != tt.wantMsg {
				t.Fatalf("server.Error(namingTag(%v)) = %v, want %v %q", tt.err, err, tt.wantCode, tt.wantMsg)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("server.Error(namingTag(%v)) = %v, which no longer wraps the engine's error", tt.err, err)
			}
		})
	}
}
