// Package block hands out IDs from reserved ranges with a double buffer, for the engines that
// reserve ranges from a store (segment: a database row; redisincr: a Redis counter). Each tag
// has a current range and a next one: once 10% of the current range is used, the next is
// reserved in the background, so requests almost never wait for the store (Meituan Leaf's
// SegmentBuffer). IDs of one tag strictly increase within a Pool: ranges are reserved one at
// a time and used in the order they were reserved, and a store only ever hands out higher
// ranges.
package block

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Range is a reserved run of IDs [Start, End).
type Range struct {
	// Start is the first ID.
	Start int64
	// End is one past the last ID.
	End int64
}

// Reservation is what a store answered to Reserve.
type Reservation struct {
	// Range is the reserved run of IDs.
	Range Range
	// MinStep is the tag's configured step: the policy never goes below it.
	MinStep int64
}

// Reserver reserves ranges from a store.
type Reserver interface {
	// Reserve reserves the next range of tag with at least want IDs and at least the tag's
	// configured step (want 0 asks for the configured step). Ranges of one tag never overlap,
	// whoever reserves them, and each is above every earlier one.
	Reserve(ctx context.Context, tag string, want int64) (Reservation, error)
}

// Policy returns the size of the next reservation from the current one, the configured
// minimum, and how long ago the last reservation was made.
type Policy func(step, minStep int64, sinceLast time.Duration) int64

// Leaf's dynamic step: aim at one reservation per 15 to 30 minutes.
const (
	// FastRefill is the age under which a range counts as used up fast: the step doubles.
	FastRefill = 15 * time.Minute
	// SlowRefill is the age over which a range counts as used up slowly: the step halves.
	SlowRefill = 30 * time.Minute
	// MaxStep caps the dynamic step, so one idle instance strands at most this many IDs.
	MaxStep = 1_000_000
)

// Leaf is Meituan Leaf's dynamic step: double under FastRefill up to MaxStep, halve over
// SlowRefill down to the configured step, keep it in between.
func Leaf(step, minStep int64, sinceLast time.Duration) int64 {
	switch {
	case sinceLast < FastRefill:
		step = min(step*2, max(MaxStep, minStep))
	case sinceLast >= SlowRefill:
		step /= 2
	}
	return max(step, minStep)
}

// Fixed always reserves the configured step.
func Fixed(_, minStep int64, _ time.Duration) int64 { return minStep }

// Config configures a Pool.
type Config struct {
	// Reserver is the store. Required.
	Reserver Reserver
	// Policy sizes reservations; default Leaf.
	Policy Policy
	// Clock times reservations for the policy; default time.Now. Tests move it.
	Clock func() time.Time
	// Logger logs failed background reservations; default slog.Default().
	Logger *slog.Logger
	// Name labels log lines ("segment", "redisincr").
	Name string
}

// Pool holds one double buffer per tag. It is safe for concurrent use.
type Pool struct {
	cfg    Config
	ctx    context.Context // background reservations; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeMu sync.Mutex // orders wg.Add in prefetch before Close's wg.Wait
	closed  bool

	mu      sync.Mutex
	buffers map[string]*buffer
}

// NewPool returns an empty pool.
func NewPool(cfg Config) *Pool {
	if cfg.Policy == nil {
		cfg.Policy = Leaf
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool{cfg: cfg, ctx: ctx, cancel: cancel, buffers: map[string]*buffer{}}
}

// Next returns n strictly increasing IDs of tag. They come from the current range, then the
// next; a batch larger than both is served by one reservation of the whole remainder.
func (p *Pool) Next(ctx context.Context, tag string, n int) ([]int64, error) {
	p.mu.Lock()
	b := p.buffers[tag]
	if b == nil {
		b = &buffer{pool: p, tag: tag}
		p.buffers[tag] = b
	}
	b.users++
	p.mu.Unlock()
	ids, err := b.take(ctx, n)
	p.mu.Lock()
	b.users--
	// A tag that never got a range (it does not exist, or the store is down) keeps no
	// buffer, so requests for made-up tags cannot grow the map. Not while another request
	// holds the buffer: it could still reserve a range there, and a second buffer of the tag
	// would hand out IDs out of order.
	if err != nil && b.users == 0 && p.buffers[tag] == b && b.empty() {
		delete(p.buffers, tag)
	}
	p.mu.Unlock()
	return ids, err
}

// Drop discards tag's buffered ranges, for a tag deleted from the store: the next request
// reserves afresh, and gets the store's answer (not found, or a range of a tag created again,
// which the store puts above every earlier range). A background reservation already running
// may still install its range, which the store reserved before the deletion, so it is as
// unique as any other.
func (p *Pool) Drop(tag string) {
	p.mu.Lock()
	b := p.buffers[tag]
	if b != nil && b.users == 0 {
		delete(p.buffers, tag)
	}
	p.mu.Unlock()
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur, b.pos, b.next, b.hasNext = Range{}, 0, Range{}, false
}

// State is a tag's buffer as one instance holds it.
type State struct {
	// Current is the range handed out now.
	Current Range
	// Position is the next ID of Current to hand out.
	Position int64
	// Next is the range reserved ahead of need, when NextLoaded.
	Next Range
	// NextLoaded says whether Next is reserved.
	NextLoaded bool
	// Step is the size of the next reservation.
	Step int64
	// LastRefill is when the last range was reserved.
	LastRefill time.Time
}

// State returns tag's buffer state, and false when this pool has not used the tag.
func (p *Pool) State(tag string) (State, bool) {
	p.mu.Lock()
	b := p.buffers[tag]
	p.mu.Unlock()
	if b == nil {
		return State{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lastRefill.IsZero() {
		return State{}, false
	}
	return State{
		Current: b.cur, Position: b.pos, Next: b.next, NextLoaded: b.hasNext,
		Step: b.nextStep(), LastRefill: b.lastRefill,
	}, true
}

// Close stops background reservations and waits for them. IDs still buffered are lost: the
// store has them as used, so they leave a gap and never come again.
func (p *Pool) Close() {
	p.closeMu.Lock()
	p.closed = true
	p.closeMu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// buffer is one tag's double buffer.
type buffer struct {
	pool  *Pool
	tag   string
	users int // Next calls holding the buffer; guarded by pool.mu

	mu         sync.Mutex
	cur        Range
	pos        int64 // next ID of cur
	next       Range
	hasNext    bool
	loading    chan struct{} // non-nil while a background reservation runs; closed when it ends
	step       int64         // the policy's current step; 0 before the first reservation
	minStep    int64
	lastRefill time.Time
}

func (b *buffer) empty() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastRefill.IsZero()
}

// take hands out n IDs.
func (b *buffer) take(ctx context.Context, n int) ([]int64, error) {
	out := make([]int64, 0, n)
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(out) < n {
		if b.pos < b.cur.End {
			k := min(int64(n-len(out)), b.cur.End-b.pos)
			for i := range k {
				out = append(out, b.pos+i)
			}
			b.pos += k
			b.prefetch()
			continue
		}
		if b.hasNext {
			b.cur, b.pos, b.hasNext = b.next, b.next.Start, false
			b.prefetch()
			continue
		}
		if ch := b.loading; ch != nil {
			b.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
			}
			b.mu.Lock()
			if err := ctx.Err(); err != nil {
				return nil, context.Cause(ctx)
			}
			continue // installed, or failed: then the next round reserves in the foreground
		}
		// Nothing buffered: reserve in the foreground, enough for the rest of the batch.
		want := b.nextStep()
		r, err := b.pool.cfg.Reserver.Reserve(ctx, b.tag, max(want, int64(n-len(out))))
		if err != nil {
			return nil, err
		}
		b.install(r, want)
		b.cur, b.pos, b.hasNext = r.Range, r.Range.Start, false
	}
	return out, nil
}

// nextStep is the size of the next reservation; 0 before the first, so the store's
// configured step applies. It must be called with mu held.
func (b *buffer) nextStep() int64 {
	if b.lastRefill.IsZero() {
		return 0
	}
	return b.pool.cfg.Policy(b.step, b.minStep, b.pool.cfg.Clock().Sub(b.lastRefill))
}

// install records a reservation's step (the policy's, not a large batch's) and time. It must
// be called with mu held.
func (b *buffer) install(r Reservation, want int64) {
	b.minStep = r.MinStep
	b.step = max(want, r.MinStep)
	b.lastRefill = b.pool.cfg.Clock()
}

// prefetch starts the background reservation of the next range once 10% of the current one
// is used. It must be called with mu held.
func (b *buffer) prefetch() {
	if b.hasNext || b.loading != nil || (b.pos-b.cur.Start)*10 < b.cur.End-b.cur.Start {
		return
	}
	p := b.pool
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return
	}
	want := b.nextStep()
	done := make(chan struct{})
	b.loading = done
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		defer cancel()
		r, err := p.cfg.Reserver.Reserve(ctx, b.tag, want)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.loading = nil
		if err != nil {
			if p.ctx.Err() == nil {
				p.cfg.Logger.Warn(p.cfg.Name+": background reservation failed; the next request reserves in the foreground",
					"tag", b.tag, "error", err)
			}
			return
		}
		b.install(r, want)
		b.next, b.hasNext = r.Range, true
	}()
}
