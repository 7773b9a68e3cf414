package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
)

// errSkipped marks the nodes a fan-out was not asked to call.
var errSkipped = errors.New("redlock: node not called")

// reply is one node's answer to one fan-out: a value, or the error that stood in for it
// (timeout, refused connection, script error).
type reply[T any] struct {
	val T
	err error
}

// fanOut calls every node i for which pick(i) is true (every node when pick is nil) at once,
// under one timeout, and waits for all of them. Waiting for all, rather than for a
// majority, costs at most one timeout and tells the caller every node's outcome, which it
// needs to undo partial work.
func fanOut[T any](ctx context.Context, b *Backend, timeout time.Duration, pick func(i int) bool,
	call func(ctx context.Context, i int, rdb redis.Scripter) (T, error)) []reply[T] {
	out := make([]reply[T], len(b.nodes))
	// The calls start together, so one deadline serves them all.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		if pick != nil && !pick(i) {
			out[i].err = errSkipped
			continue
		}
		wg.Go(func() {
			v, err := call(ctx, i, n.rdb)
			out[i] = reply[T]{val: v, err: err}
		})
	}
	wg.Wait()
	return out
}

// nodeErr is one node's failure, named for the operator.
type nodeErr struct {
	node string
	err  error
}

func joinNodeErrs(errs []nodeErr) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.node + ": " + e.err.Error()
	}
	return strings.Join(parts, "; ")
}

// failures lists the nodes of replies that were called and failed.
func failures[T any](b *Backend, replies []reply[T]) []nodeErr {
	var errs []nodeErr
	for i, r := range replies {
		if r.err != nil && !errors.Is(r.err, errSkipped) {
			errs = append(errs, nodeErr{b.nodes[i].name, r.err})
		}
	}
	return errs
}

// unavailable reports that too few nodes answered op, naming each failure, through the one
// mapping every backend shares (lock.Unavailable): when ctx ended, its cause is returned
// instead.
func (b *Backend) unavailable(ctx context.Context, op string, answered int, errs []nodeErr) error {
	return lock.Unavailable(ctx, engine, fmt.Errorf("%s: %d of %d nodes answered, %d needed (%s)",
		op, answered, len(b.nodes), b.quorum(), joinNodeErrs(errs)))
}

// refusal is the error of a Renew or Release that did not reach a majority of the owner's
// nodes. When the nodes that did not answer could have made up that majority, nobody can
// tell and the backend is unavailable; otherwise the answers decide between another owner
// and no owner.
func (b *Backend) refusal(ctx context.Context, op string, ok, notHeld, other int, errs []nodeErr) error {
	switch {
	case ok+len(errs) >= b.quorum():
		return b.unavailable(ctx, op, ok+notHeld+other, errs)
	case other > 0 && other >= notHeld:
		return fmt.Errorf("redlock: %s: %w", op, lock.ErrNotOwner)
	default:
		return fmt.Errorf("redlock: %s: %w", op, lock.ErrNotHeld)
	}
}

// quorumValue is the highest value that at least k of vals reach (the k-th largest), or the
// smallest when there are fewer than k: the value a majority vouches for when vals are the
// nodes' answers and k the quorum.
func quorumValue[T int64 | time.Duration](vals []T, k int) T {
	if len(vals) == 0 {
		return 0
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	slices.Reverse(s)
	return s[min(k, len(s))-1]
}

// holder is one owner as the nodes holding its lock describe it.
type holder struct {
	owner  string
	att    string // the identity of its newest lease (the highest fence)
	fence  uint64
	counts []int64
	pttls  []time.Duration
}

// holders groups the nodes' views of a held lock by owner.
type holders map[string]*holder

func (hs holders) add(owner, att string, fence uint64, count int64, pttl time.Duration) {
	h := hs[owner]
	if h == nil {
		h = &holder{owner: owner, att: att, fence: fence}
		hs[owner] = h
	}
	if fence > h.fence {
		h.att = att
	}
	h.fence = max(h.fence, fence)
	h.counts = append(h.counts, count)
	h.pttls = append(h.pttls, max(pttl, 0))
}

// top is the owner seen on most nodes, the higher token breaking ties, or nil.
func (hs holders) top() *holder {
	var best *holder
	for _, h := range hs {
		if best == nil || len(h.counts) > len(best.counts) ||
			len(h.counts) == len(best.counts) && (h.fence > best.fence || h.fence == best.fence && h.owner < best.owner) {
			best = h
		}
	}
	return best
}

// state is the public view of h with quorum k: its hold count as a majority counts it, and
// the moment fewer than a majority (or than the nodes it has, when fewer) still hold it.
func (h *holder) state(k int) lock.State {
	return lock.State{
		Held:         true,
		HolderID:     holderID(h.att),
		FencingToken: h.fence,
		ExpiresAt:    time.Now().Add(quorumValue(h.pttls, k)),
		HoldCount:    holdCount(quorumValue(h.counts, k)),
	}
}

// holderID is the public id of the lease whose identity is att, the random attempt id that
// started it: the same on every node of the lease, and on every instance. A node an older
// version wrote without one shows no holder id.
func holderID(att string) string {
	if att == "" {
		return ""
	}
	return lock.HolderIDOf(att)
}

// toInt reads one integer of a script's reply.
func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

// ints reads a script's reply of integers, checking its length.
func ints(script string, vals []any, n int) ([]int64, error) {
	if len(vals) < n {
		return nil, fmt.Errorf("redlock: %s script returned %d values, want %d", script, len(vals), n)
	}
	out := make([]int64, n)
	for i := range n {
		out[i] = toInt(vals[i])
	}
	return out, nil
}

// holdCount reports a node count as a hold count, clamped to [0, lock.MaxHoldCount]: racing
// re-entries at the limit can take a count past it for a moment, and it must not wrap.
func holdCount(n int64) uint32 {
	return uint32(min(max(n, 0), lock.MaxHoldCount))
}
