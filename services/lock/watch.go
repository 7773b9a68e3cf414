package lock

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// watchBuffer is how many events a watcher may leave unsent before its stream is ended: a
// slow consumer must never hold up the delivery of events to other watchers and waiters.
const watchBuffer = 1024

// DefaultLaggedWatchGrace is Config.LaggedWatchGrace by default.
const DefaultLaggedWatchGrace = 10 * time.Second

// Errors that end a Watch, with their codes.
var (
	// errSlowWatcher ends the stream of a watcher that fell watchBuffer events behind.
	errSlowWatcher = server.NewError(connect.CodeResourceExhausted, fmt.Sprintf(
		"lock: watcher fell %d events behind (its queue is full; events after it are not sent): watch again and Inspect for the state", watchBuffer))
	// errNoEvents refuses a Watch on an instance without events.
	errNoEvents = server.NewError(connect.CodeFailedPrecondition, "lock: this instance runs without events (no NATS), so it has nothing to watch")
)

// Watch implements LockServiceHandler: it subscribes to the key's (or prefix's) events
// before reading the key's state, so no event after the state is missed, then forwards
// events until the caller goes away, the server shuts down, or the watcher falls behind.
// Watchers share the instance's subscriptions (see watchHub).
func (s *Service) Watch(ctx context.Context, req *lockv1.WatchRequest, stream *connect.ServerStream[lockv1.WatchResponse]) error {
	key, prefix := req.GetKey(), req.GetPrefix()
	switch {
	case key == "" && prefix == "":
		return server.InvalidField("key", "must not be empty: set key, or prefix to watch every key starting with it")
	case key != "" && prefix != "":
		return server.InvalidField("prefix", "must be empty when key is set: watch one key or a prefix")
	case key != "":
		if err := validateKey(key); err != nil {
			return err
		}
	default:
		if err := server.CheckKey("prefix", prefix); err != nil {
			return err
		}
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return err
	}
	if s.bus == nil {
		return server.Error(ctx, errNoEvents)
	}
	w := &watcher{ctx: ctx, backend: name, key: key, events: make(chan *lockv1.LockEvent, watchBuffer), lagged: make(chan struct{})}
	if key == "" {
		w.key, w.prefix = prefix, true
	}
	leave, err := s.hub.join(w)
	if err != nil {
		return server.Error(ctx, fmt.Errorf("%w: events: %v", ErrUnavailable, err))
	}
	defer leave()
	defer s.watches.add(name, w.key, w.prefix)()
	if err := s.bus.Flush(ctx); err != nil {
		return server.Error(ctx, fmt.Errorf("%w: events: %v", ErrUnavailable, err))
	}
	// The response headers now, so a client knows the watch is in force before any event.
	if err := stream.Send(nil); err != nil {
		return err
	}
	if key != "" {
		st, err := b.Inspect(ctx, key)
		if err != nil {
			return server.Error(ctx, err)
		}
		s.trackExpiry(name, key, st) // its expiry is announced while the watch lasts
		if err := stream.Send(&lockv1.WatchResponse{State: stateToProto(key, name, st)}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return server.Error(ctx, context.Cause(ctx))
		case <-w.lagged:
			return server.Error(ctx, errSlowWatcher)
		case ev := <-w.events:
			if err := stream.Send(&lockv1.WatchResponse{Event: ev}); err != nil {
				return err
			}
		}
	}
}
