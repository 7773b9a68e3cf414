package snowflake

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// Errors the generator returns. ErrLeaseLost and ErrClockBackwards carry the Connect code a
// caller gets (server.NewError), unavailable: this instance cannot issue for now, another
// one may.
var (
	// ErrLeaseLost means the worker-id lease ended (taken over, or not renewed in time): the
	// generator issues nothing until the background renewal leases an id again.
	ErrLeaseLost = server.NewError(connect.CodeUnavailable, "snowflake: worker-id lease lost, not issuing")
	// ErrClockBackwards means the clock is further behind the last issued millisecond than
	// Config.MaxRollback, so waiting it out would stall every caller.
	ErrClockBackwards = server.NewError(connect.CodeUnavailable, "snowflake: clock moved backwards")
	// ErrOutOfRange means the clock is before Epoch or past what 41 bits hold.
	ErrOutOfRange = errors.New("snowflake: clock outside the ID layout's range")
)

// Defaults of Config.
const (
	// DefaultLeaseTTL is how long a worker-id lease lasts without renewal; it is renewed every
	// third of it, so two renewals may fail before the generator stops.
	DefaultLeaseTTL = 10 * time.Second
	// DefaultMaxRollback is the largest clock rollback the generator waits out instead of
	// failing: at start against the id's recorded last millisecond, and while running.
	DefaultMaxRollback = 5 * time.Second
)

// Config configures a Generator.
type Config struct {
	// Store leases the worker id. Required unless WorkerID is set.
	Store workerid.Store
	// WorkerID fixes the worker id without any lease. For tests and benchmarks only: two
	// generators with one id issue duplicates.
	WorkerID *int
	// LeaseTTL is the lease length; default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// MaxRollback is the largest clock rollback waited out; default DefaultMaxRollback.
	MaxRollback time.Duration
	// Clock reads the time the IDs carry; default time.Now. Tests move it.
	Clock func() time.Time
	// Logger logs lease changes; default slog.Default().
	Logger *slog.Logger
}

// Generator issues snowflake IDs. It is safe for concurrent use.
type Generator struct {
	store       workerid.Store
	ttl         time.Duration
	maxRollback time.Duration
	clock       func() time.Time
	realClock   bool // clock is time.Now, whose readings also time the lease
	log         *slog.Logger

	renewMu sync.Mutex // one renewal or re-lease at a time
	stop    context.CancelFunc
	done    chan struct{}

	mu         sync.Mutex
	worker     int
	owner      string    // lease owner secret; "" when the worker id is fixed
	held       bool      // whether the lease is held (always true for a fixed id)
	validUntil time.Time // monotonic: the lease ends here unless renewed
	lastMs     int64     // Unix ms of the last issued ID
	seq        int       // sequence of the last issued ID within lastMs
}

// Start returns a generator with a worker id: the fixed Config.WorkerID, or one leased from
// Config.Store and renewed in the background until Close. It fails when no id is free or the
// id's recorded last millisecond is more than MaxRollback ahead of the clock.
func Start(ctx context.Context, cfg Config) (*Generator, error) {
	g := &Generator{store: cfg.Store, ttl: cfg.LeaseTTL, maxRollback: cfg.MaxRollback, clock: cfg.Clock, log: cfg.Logger}
	if g.ttl <= 0 {
		g.ttl = DefaultLeaseTTL
	}
	if g.maxRollback <= 0 {
		g.maxRollback = DefaultMaxRollback
	}
	if g.clock == nil {
		g.clock, g.realClock = time.Now, true
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if cfg.WorkerID != nil {
		if *cfg.WorkerID < 0 || *cfg.WorkerID > MaxWorker {
			return nil, fmt.Errorf("snowflake: worker id %d is outside [0, %d]", *cfg.WorkerID, MaxWorker)
		}
		g.worker, g.held = *cfg.WorkerID, true
		return g, nil
	}
	if g.store == nil {
		return nil, errors.New("snowflake: no worker-id store and no fixed worker id")
	}
	if err := g.lease(ctx); err != nil {
		return nil, err
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	g.stop, g.done = stop, make(chan struct{})
	go g.renewLoop(loopCtx)
	return g, nil
}

// Worker returns the current worker id and whether the generator may issue with it.
func (g *Generator) Worker() (id int, held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.worker, g.usable(time.Now()) == nil
}

// lease takes a free worker id and waits until the clock has passed the id's recorded last
// millisecond, so no ID an earlier holder issued can come again.
func (g *Generator) lease(ctx context.Context) error {
	owner := rand.Text()
	l, err := g.store.Acquire(ctx, owner, g.ttl)
	if err != nil {
		return fmt.Errorf("snowflake: lease a worker id: %w", err)
	}
	if ahead := time.Duration(l.LastMillis-g.clock().UnixMilli()+1) * time.Millisecond; ahead > 0 {
		if ahead > g.maxRollback {
			// Keep the recorded millisecond: the id stays unusable for clocks this far behind.
			relErr := g.store.Release(context.WithoutCancel(ctx), l.ID, owner, l.LastMillis)
			return errors.Join(fmt.Errorf("%w: worker id %d last issued at %s, %v ahead of this clock (the limit is %v); fix the clock (NTP) before starting",
				ErrClockBackwards, l.ID, time.UnixMilli(l.LastMillis).UTC().Format(time.RFC3339Nano), ahead, g.maxRollback), relErr)
		}
		g.log.Warn("snowflake: clock behind the worker id's last timestamp, waiting", "worker_id", l.ID, "wait", ahead)
		if err := sleep(ctx, ahead); err != nil {
			relErr := g.store.Release(context.WithoutCancel(ctx), l.ID, owner, l.LastMillis)
			return errors.Join(err, relErr)
		}
	}
	// Record how far this holder may issue before anything is issued: Acquire kept the earlier
	// holder's millisecond, and a holder that dies, or cannot renew, before its first renewal
	// still issues until its lease ends; the next holder of the id must start after that.
	start := time.Now()
	g.mu.Lock()
	bound := max(l.LastMillis, g.lastMs, g.clock().Add(g.ttl).UnixMilli())
	g.mu.Unlock()
	if err := g.store.Renew(ctx, l.ID, owner, g.ttl, bound); err != nil {
		relErr := g.store.Release(context.WithoutCancel(ctx), l.ID, owner, l.LastMillis)
		return errors.Join(fmt.Errorf("snowflake: record worker id %d's last millisecond: %w", l.ID, err), relErr)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.worker, g.owner, g.held, g.validUntil = l.ID, owner, true, start.Add(g.ttl)
	// A full sequence makes the next ID wait for a later millisecond than both the recorded
	// one and this instance's last: with another worker id, an ID in the same millisecond
	// could be lower than the last one issued.
	g.lastMs, g.seq = max(g.lastMs, l.LastMillis), MaxSequence
	g.log.Info("snowflake: leased worker id", "worker_id", l.ID)
	return nil
}

// usable reports whether IDs may be issued now; t is the caller's reading of the clock,
// which times the lease too when the clock is the real one. It must be called with mu held.
func (g *Generator) usable(t time.Time) error {
	if g.owner == "" {
		if g.held {
			return nil // fixed worker id
		}
		return ErrLeaseLost
	}
	if !g.realClock {
		t = time.Now() // the lease runs on the real clock, whatever a test does to g.clock
	}
	if !g.held || !t.Before(g.validUntil) {
		g.held = false
		return fmt.Errorf("%w (worker id %d)", ErrLeaseLost, g.worker)
	}
	return nil
}

// Next returns n IDs in increasing order, taking whole runs of one millisecond's sequence at
// a time; 4096 IDs per millisecond at most, so a large batch spans a few milliseconds.
func (g *Generator) Next(ctx context.Context, n int) ([]int64, error) {
	rs, err := g.AppendRanges(ctx, nil, n)
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, n)
	for _, r := range rs {
		for id := r.Start; id < r.End; id++ {
			out = append(out, id)
		}
	}
	return out, nil
}

// Range is a run of consecutive IDs [Start, End): IDs of one worker's millisecond with
// consecutive sequence numbers are consecutive numbers.
type Range struct {
	// Start is the first ID.
	Start int64
	// End is one past the last ID.
	End int64
}

// AppendRanges is Next appending the n IDs to dst as ranges of consecutive IDs, one per
// millisecond run: the service's path, which allocates nothing for a single ID when dst has
// room. On error dst is returned as it was passed.
func (g *Generator) AppendRanges(ctx context.Context, dst []Range, n int) ([]Range, error) {
	out := dst
	g.mu.Lock()
	defer g.mu.Unlock()
	for left := n; left > 0; {
		// One clock reading serves the lease check and the ID's time when they are the same
		// clock: time.Now is the bulk of an ID's cost.
		t := g.clock()
		if err := g.usable(t); err != nil {
			return dst, err
		}
		now := t.UnixMilli()
		switch {
		case now > g.lastMs:
			g.lastMs, g.seq = now, -1
		case now < g.lastMs:
			back := time.Duration(g.lastMs-now) * time.Millisecond
			if back > g.maxRollback {
				return dst, fmt.Errorf("%w: %v behind the last issued ID (the limit is %v)", ErrClockBackwards, back, g.maxRollback)
			}
			if err := g.unlocked(func() error { return sleep(ctx, back) }); err != nil {
				return dst, err
			}
			continue
		case g.seq >= MaxSequence:
			// This millisecond's sequence is used up: wait for the next one. A timer would
			// wake up to a millisecond late (the runtime's poller sleeps in whole
			// milliseconds) and cost a good part of the next millisecond's IDs, so the wait,
			// under a millisecond, yields the processor in a loop instead, as bwmarrin's
			// does. It keeps mu: other callers park on it rather than spin too, and get
			// it the moment the new millisecond starts.
			if err := g.awaitAfter(ctx, g.lastMs); err != nil {
				return dst, err
			}
			continue
		}
		ms := g.lastMs - Epoch
		if ms <= 0 || ms > maxMillis {
			return dst, fmt.Errorf("%w: %s", ErrOutOfRange, time.UnixMilli(g.lastMs).UTC().Format(time.RFC3339))
		}
		k := min(left, MaxSequence-g.seq)
		first := Compose(ms, g.worker, g.seq+1)
		out = append(out, Range{Start: first, End: first + int64(k)})
		g.seq += k
		left -= k
	}
	return out, nil
}

// awaitAfter returns once the clock has left the millisecond ms, or with ctx's cause. A
// clock that stepped back leaves it too: the caller handles the rollback as it always does.
func (g *Generator) awaitAfter(ctx context.Context, ms int64) error {
	for i := 0; ; i++ {
		if g.clock().UnixMilli() != ms {
			return nil
		}
		if i%64 == 63 {
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
		}
		runtime.Gosched()
	}
}

// unlocked runs fn with mu released.
func (g *Generator) unlocked(fn func() error) error {
	g.mu.Unlock()
	defer g.mu.Lock()
	return fn()
}

// Renew renews the lease now, or leases a new worker id when the lease was lost. The
// background loop calls it every third of the lease TTL; a lease the store says is gone stops
// the generator at once.
func (g *Generator) Renew(ctx context.Context) error {
	if g.store == nil {
		return nil
	}
	g.renewMu.Lock()
	defer g.renewMu.Unlock()
	// Taken before the clock is read, so the lease never outlasts the recorded bound.
	start := time.Now()
	g.mu.Lock()
	id, owner, last, ok := g.worker, g.owner, g.lastMs, g.usable(time.Now()) == nil
	// Record the latest millisecond this holder may reach before the lease ends: if it dies
	// now, the next holder of the id must start after that, even with a clock behind ours.
	bound := max(g.lastMs, g.clock().Add(g.ttl).UnixMilli())
	g.mu.Unlock()
	if !ok {
		// Issuing stopped when the lease was lost, so lastMs is exact. The release is best
		// effort: the id may well be someone else's by now, and then it does nothing.
		g.store.Release(ctx, id, owner, last) //nolint:errcheck // see above
		return g.lease(ctx)
	}
	err := g.store.Renew(ctx, id, owner, g.ttl, bound)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		if g.owner == owner && g.held {
			g.validUntil = start.Add(g.ttl)
		}
		return nil
	case errors.Is(err, workerid.ErrLost):
		if g.owner == owner {
			g.held = false
		}
		g.log.Error("snowflake: worker-id lease lost, stopped issuing", "worker_id", id)
		return fmt.Errorf("%w (worker id %d): %w", ErrLeaseLost, id, err)
	}
	return fmt.Errorf("snowflake: renew worker id %d: %w", id, err)
}

func (g *Generator) renewLoop(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, g.ttl/3)
		if err := g.Renew(rctx); err != nil && ctx.Err() == nil {
			g.log.Warn("snowflake: renew", "error", err)
		}
		cancel()
	}
}

// Close stops renewing and frees the lease, recording the last millisecond really issued so
// that the next holder of the worker id can start without waiting.
func (g *Generator) Close() error {
	if g.stop == nil {
		return nil
	}
	g.stop()
	<-g.done
	g.renewMu.Lock()
	defer g.renewMu.Unlock()
	g.mu.Lock()
	id, owner, last, held := g.worker, g.owner, g.lastMs, g.usable(time.Now()) == nil
	g.held = false
	g.mu.Unlock()
	if !held {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.store.Release(ctx, id, owner, last); err != nil {
		return fmt.Errorf("snowflake: release worker id %d: %w", id, err)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
