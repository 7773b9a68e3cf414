// Package block hands out IDs from reserved ranges with a double buffer, for the engines that
// reserve ranges from a store (segment: a database row; redisincr: a Redis counter). Each tag
// has a current range and a next one: once 10% of the current range is used, the next is
// reserved in the background, so requests almost never wait for the store (Meituan Leaf's
// SegmentBuffer). IDs of one tag strictly increase within a Pool: ranges are reserved one at
// a time and used in the order they were reserved, and a store only ever hands out higher
// ranges.
//
// A request that the current range can serve takes its IDs with one atomic add on the range,
// without a lock; only moving to the next range, reserving, and starting the background
// reservation take the tag's mutex.
package block

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
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

	buffers sync.Map // tag → *buffer, read without a lock by every request
	// last is the buffer of the tag asked for last: most requests ask for the same tag as
	// the one before, and a string compare is cheaper than the map's hash.
	last atomic.Pointer[buffer]
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
	return &Pool{cfg: cfg, ctx: ctx, cancel: cancel}
}

// errRetired is what a request gets from a buffer that left the pool while it waited: it
// goes on with the tag's current buffer.
var errRetired = errors.New("block: buffer retired")

// Next returns n strictly increasing IDs of tag. They come from the current range, then the
// next; a batch larger than both is served by one reservation of the whole remainder.
func (p *Pool) Next(ctx context.Context, tag string, n int) ([]int64, error) {
	rs, err := p.AppendRanges(ctx, nil, tag, n)
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

// AppendRanges is Next appending the n IDs to dst as ranges of consecutive IDs, in order:
// a single ID from the current range costs no allocation when dst has room. On error dst is
// returned as it was passed.
func (p *Pool) AppendRanges(ctx context.Context, dst []Range, tag string, n int) ([]Range, error) {
	out, left := dst, int64(n)
	for {
		b := p.buffer(tag)
		var err error
		out, left, err = b.take(ctx, out, left)
		if !errors.Is(err, errRetired) {
			if err != nil {
				return dst, err
			}
			return out, nil
		}
		p.last.CompareAndSwap(b, nil) // a lookup may have cached it after it was retired
	}
}

// buffer returns tag's buffer, creating it on first use.
func (p *Pool) buffer(tag string) *buffer {
	if b := p.last.Load(); b != nil && b.tag == tag {
		return b
	}
	v, ok := p.buffers.Load(tag)
	if !ok {
		v, _ = p.buffers.LoadOrStore(tag, &buffer{pool: p, tag: tag})
	}
	b := v.(*buffer)
	p.last.Store(b)
	return b
}

// Drop discards tag's buffered ranges, for a tag deleted from the store: the next request
// reserves afresh, and gets the store's answer (not found, or a range of a tag created again,
// which the store puts above every earlier range). A request running concurrently may still
// take an ID reserved before the deletion, which is as unique as any other.
//
// The buffer's ranges are used up before it leaves the pool: a new buffer, and so any ID
// above the old ranges, exists only once no claim on them can succeed, so a request that
// starts after another returned never gets an older ID than it.
func (p *Pool) Drop(tag string) {
	v, ok := p.buffers.Load(tag)
	if !ok {
		return
	}
	b := v.(*buffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.cur.Load(); s != nil {
		s.exhaust()
	}
	b.next, b.nextSpan, b.hasNext = Range{}, nil, false
	b.retire()
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
	v, ok := p.buffers.Load(tag)
	if !ok {
		return State{}, false
	}
	b := v.(*buffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.cur.Load()
	if s == nil || b.lastRefill.IsZero() {
		return State{}, false
	}
	return State{
		Current: s.Range, Position: min(s.pos.Load(), s.End), Next: b.next, NextLoaded: b.hasNext,
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

// span is a range being handed out: requests claim IDs from it with one atomic add.
type span struct {
	Range
	// pos is the next unclaimed ID. A claim adds its count whether or not the range holds
	// it, so pos runs past End once the range is used up and stays there.
	pos atomic.Int64
	// mark is where 10% of the range is used: a claim reaching it starts the background
	// reservation of the next range.
	mark int64
	// prefetched says that the range after this one is reserved or being reserved; a failed
	// background reservation clears it, so the next claim tries again.
	prefetched atomic.Bool
}

func newSpan(r Range) *span {
	s := &span{Range: r, mark: r.Start + (r.End-r.Start+9)/10}
	s.pos.Store(r.Start)
	return s
}

// claim takes up to n IDs from the front of s: [first, first+k), k == 0 when s is used up.
func (s *span) claim(n int64) (first, k int64) {
	p := s.pos.Add(n) - n
	if p >= s.End {
		return p, 0
	}
	return p, min(n, s.End-p)
}

// exhaust makes every later claim find s used up.
func (s *span) exhaust() {
	for {
		p := s.pos.Load()
		if p >= s.End || s.pos.CompareAndSwap(p, s.End) {
			return
		}
	}
}

// buffer is one tag's double buffer.
type buffer struct {
	pool *Pool
	tag  string
	cur  atomic.Pointer[span] // the range handed out now; nil before the first reservation

	mu         sync.Mutex
	retired    bool // left the pool: requests that waited for mu go on with a new buffer
	next       Range
	nextSpan   *span // next, ready to be handed out: the switch allocates nothing
	hasNext    bool
	loading    chan struct{} // non-nil while a background reservation runs; closed when it ends
	step       int64         // the policy's current step; 0 before the first reservation
	minStep    int64
	lastRefill time.Time
}

// take appends up to n IDs to dst and returns how many it could not hand out: 0, or the
// rest with an error. The common case, n IDs left in the current range, takes no lock.
func (b *buffer) take(ctx context.Context, dst []Range, n int64) ([]Range, int64, error) {
	if s := b.cur.Load(); s != nil {
		first, k := s.claim(n)
		if k == n {
			if first+k >= s.mark && !s.prefetched.Load() {
				b.mu.Lock()
				b.prefetch(s)
				b.mu.Unlock()
			}
			return append(dst, Range{Start: first, End: first + k}), 0, nil
		}
		if k > 0 { // the tail of the range: this request alone got it
			dst, n = append(dst, Range{Start: first, End: first + k}), n-k
		}
	}
	return b.takeSlow(ctx, dst, n)
}

// takeSlow hands out what the current range could not, under mu: it moves to the next range,
// waits for the background reservation, or reserves in the foreground.
func (b *buffer) takeSlow(ctx context.Context, dst []Range, n int64) ([]Range, int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for n > 0 {
		if b.retired {
			return dst, n, errRetired
		}
		// Another request may have moved to a new range while this one waited for mu.
		if s := b.cur.Load(); s != nil {
			if first, k := s.claim(n); k > 0 {
				dst, n = append(dst, Range{Start: first, End: first + k}), n-k
				if first+k >= s.mark {
					b.prefetch(s)
				}
				continue
			}
		}
		if b.hasNext {
			b.cur.Store(b.nextSpan)
			b.next, b.nextSpan, b.hasNext = Range{}, nil, false
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
				return dst, n, context.Cause(ctx)
			}
			continue // installed, or failed: then the next round reserves in the foreground
		}
		// Nothing buffered: reserve in the foreground, enough for the rest of the batch.
		want := b.nextStep()
		r, err := b.pool.cfg.Reserver.Reserve(ctx, b.tag, max(want, n))
		if err != nil {
			// A tag that never got a range (it does not exist, or the store is down) keeps
			// no buffer, so requests for made-up tags cannot grow the map. Requests waiting
			// for mu see it retired and go on with a new buffer, never fill this one.
			if b.lastRefill.IsZero() {
				b.retire()
			}
			return dst, n, err
		}
		b.install(r, want)
		b.cur.Store(newSpan(r.Range))
	}
	return dst, 0, nil
}

// retire takes b out of the pool. It must be called with mu held.
func (b *buffer) retire() {
	b.retired = true
	b.pool.buffers.CompareAndDelete(b.tag, b)
	b.pool.last.CompareAndSwap(b, nil)
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

// prefetch starts the background reservation of the range after s, once 10% of s is used,
// unless it is reserved or being reserved. It must be called with mu held.
func (b *buffer) prefetch(s *span) {
	if b.retired || b.cur.Load() != s || s.prefetched.Load() || b.hasNext || b.loading != nil {
		return
	}
	p := b.pool
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	s.prefetched.Store(true) // also after Close: the pool reserves only in the foreground then
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
				p.cfg.Logger.Warn(p.cfg.Name+": background reservation failed; the next request tries again",
					"tag", b.tag, "error", err)
				s.prefetched.Store(false)
			}
			return
		}
		b.install(r, want)
		b.next, b.nextSpan, b.hasNext = r.Range, newSpan(r.Range), true
	}()
}
