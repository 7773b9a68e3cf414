package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/services/lock"
)

// errClosed is why calls on a closed backend fail.
var errClosed = errors.New("zklock: backend closed")

// stateWatch turns the client's session events into a channel that is closed on every change,
// so any number of waiters can select on "the session changed" without a goroutine each.
type stateWatch struct {
	mu   sync.Mutex
	ch   chan struct{}
	last atomic.Int32 // last zk.State seen, to log transitions rather than every retry
}

func (s *stateWatch) init() { s.ch = make(chan struct{}) }

// changed returns a channel closed at the next state change. Take it before checking the
// state, so a change between the check and the select is not missed.
func (s *stateWatch) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *stateWatch) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

// onEvent receives the client's events; it runs on the client's goroutines and must not block
// or call the client.
func (b *Backend) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	prev := zk.State(b.state.last.Swap(int32(ev.State)))
	switch {
	case ev.State == zk.StateExpired:
		b.log.Warn("zklock: ZooKeeper session expired: every lease it held is lost",
			"leases", b.timers.count(), "server", ev.Server)
	case ev.State == zk.StateDisconnected && prev == zk.StateHasSession && b.life.Err() == nil:
		b.log.Warn("zklock: lost the ZooKeeper connection: calls fail as unavailable until it is back",
			"server", ev.Server)
	case ev.State == zk.StateHasSession:
		b.log.Info("zklock: ZooKeeper session ready", "server", ev.Server)
	}
	b.state.broadcast()
}

// connected reports whether the backend has a live session right now.
func (b *Backend) connected() bool {
	return b.conn.State() == zk.StateHasSession
}

// ready fails fast when a call cannot be answered truthfully: without a session the backend
// cannot see the locks, and queueing the request until a reconnect would make the caller wait
// on a network it cannot reach.
func (b *Backend) ready(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if b.life.Err() != nil {
		return lock.Unavailable(ctx, engine, errClosed)
	}
	if st := b.conn.State(); st != zk.StateHasSession {
		return lock.Unavailable(ctx, engine, fmt.Errorf("zklock: no ZooKeeper session (%s)", st))
	}
	return nil
}

// call runs op, one ZooKeeper request, for a caller that waits only as long as ctx allows and
// the connection lasts: the client library takes no context. undo (optional) takes back a write the caller cannot rely
// on: it receives op's outcome when the answer was lost (uncertain), and, when the caller gave
// up first, whatever the outcome is once it arrives. The request's goroutine ends when the
// library answers, at the latest when Close closes the connection.
func call[T any](ctx context.Context, b *Backend, op func() (T, error), undo func(T, error)) (T, error) {
	var zero T
	changed := b.state.changed()
	if err := b.ready(ctx); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	out := make(chan result)
	gaveUp := make(chan struct{})
	started := b.goTracked(func() {
		v, err := op()
		select {
		case out <- result{v, err}:
		case <-gaveUp:
			if undo != nil {
				undo(v, err)
			}
		}
	})
	if !started {
		return zero, lock.Unavailable(ctx, engine, errClosed)
	}
	for {
		select {
		case r := <-out:
			if undo != nil && uncertain(r.err) {
				undo(r.v, r.err)
			}
			return r.v, r.err
		case <-ctx.Done():
			close(gaveUp)
			return zero, context.Cause(ctx)
		case <-changed:
			// A request queued as the connection dropped waits for the next reconnect
			// or the library's next flush (a second or more): answer unavailable now.
			changed = b.state.changed()
			if !b.connected() {
				close(gaveUp)
				return zero, lock.Unavailable(ctx, engine, errors.New("zklock: lost the ZooKeeper connection"))
			}
		}
	}
}

// fail maps an error no caller branch expected: the context's own end as is, a missing answer
// as lock.ErrUnavailable, and anything ZooKeeper refused (ACLs, bad data) as an internal error.
func fail(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(err, lock.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case refused(err):
		return fmt.Errorf("zklock: %w", err)
	default:
		return lock.Unavailable(ctx, engine, err)
	}
}

// refused reports whether err is the ensemble's answer (the request was processed and failed)
// rather than a missing answer.
func refused(err error) bool {
	for _, e := range []error{
		zk.ErrNoNode, zk.ErrNodeExists, zk.ErrBadVersion, zk.ErrNotEmpty, zk.ErrNoAuth,
		zk.ErrInvalidACL, zk.ErrNoChildrenForEphemerals, zk.ErrAPIError, zk.ErrBadArguments,
		zk.ErrInvalidPath, zk.ErrInvalidFlags, zk.ErrAuthFailed, zk.ErrUnknown,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// uncertain reports whether a failed write may still have been applied: the request left but
// its answer never came. Requests that never left (no session, no server), writes whose
// session is over (its ephemeral nodes are gone) and abandoned calls (call's undo takes care)
// are not.
func uncertain(err error) bool {
	if err == nil || refused(err) {
		return false
	}
	for _, e := range []error{
		zk.ErrNoServer, zk.ErrSessionExpired, zk.ErrClosing, lock.ErrUnavailable,
		context.Canceled, context.DeadlineExceeded, // call hands these to its undo
	} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}
