package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/coordkit/coordkit/libs/event/subject"
	"github.com/coordkit/coordkit/libs/server"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

// watchBuffer is how many events a watcher may leave unread before its stream is ended: a
// slow consumer must never hold up the subscription's delivery, and with it other watchers
// and waiters.
const watchBuffer = 256

// errSlowWatcher ends the stream of a watcher that fell watchBuffer events behind.
var errSlowWatcher = errors.New("lock: watcher fell 256 events behind; watch again and Inspect for the state")

// Watch implements LockServiceHandler: it subscribes to the key's (or prefix's) events
// before reading the key's state, so no event after the state is missed, then forwards
// events until the caller goes away, the server shuts down, or the watcher falls behind.
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
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("lock: this instance runs without events (no NATS), so it has nothing to watch"))
	}
	events := make(chan *lockv1.LockEvent, watchBuffer)
	overflow := make(chan struct{})
	var overflowed bool // only the subscription's delivery goroutine touches it
	subj := subject.LockPattern("*", name)
	if key != "" {
		subj = subject.Lock("*", name, key)
	}
	unsubscribe, err := s.bus.Subscribe(subj, func(subj string, data []byte) {
		if overflowed {
			return
		}
		_, _, k, ok := subject.ParseLock(subj)
		if !ok || !strings.HasPrefix(k, prefix) {
			return
		}
		ev := &lockv1.LockEvent{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, ev); err != nil || ev.GetKey() != k || ev.GetBackend() != name {
			return // not an event of ours: someone else published on our subject
		}
		if ev.GetKind() == lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED {
			s.trackExpiry(name, k, State{Held: true, FencingToken: ev.GetFencingToken(), ExpiresAt: ev.GetExpiresAt().AsTime()})
		} else {
			s.untrackExpiry(name, k, ev.GetFencingToken())
		}
		select {
		case events <- ev:
		default:
			overflowed = true
			close(overflow)
		}
	})
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	defer unsubscribe() //nolint:errcheck // the connection may be gone; nothing to do then
	if key != "" {
		defer s.watches.add(name, key, false)()
	} else {
		defer s.watches.add(name, prefix, true)()
	}
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
			return toConnect(ctx, err)
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
		case <-overflow:
			return connect.NewError(connect.CodeResourceExhausted, errSlowWatcher)
		case ev := <-events:
			if err := stream.Send(&lockv1.WatchResponse{Event: ev}); err != nil {
				return err
			}
		}
	}
}
