package client

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// idRange is a run of consecutive numeric IDs [start, end).
type idRange struct{ start, end int64 }

// idBlock is one fetched block: strings (UUIDs, or numeric IDs from a service without
// ranges) or ranges, and how far it is handed out.
type idBlock struct {
	strs   []string
	ranges []idRange
	i      int   // the next string, or the range holding the next ID
	pos    int64 // the next ID of ranges[i]
	left   int   // IDs not handed out yet
	mark   int   // once left is down to mark, 10% is handed out: fetch the next block
}

// take hands out the next ID: a string, or a number to format (s == "").
func (b *idBlock) take() (s string, id int64) {
	b.left--
	if b.strs != nil {
		s = b.strs[b.i]
		b.strs[b.i] = "" // the caller keeps it; the block must not
		b.i++
		return s, 0
	}
	id = b.pos
	if b.pos++; b.pos == b.ranges[b.i].end && b.left > 0 {
		b.i++
		b.pos = b.ranges[b.i].start
	}
	return "", id
}

// fetch is one call to the service for a block; done is closed once the block is installed
// or err set.
type fetch struct {
	done chan struct{}
	err  error
}

// idBuffer is the double buffer of one (mode, tag).
type idBuffer struct {
	ids *IDs
	key idKey

	mu       sync.Mutex
	cur      idBlock // handed out now
	next     idBlock // fetched ahead; left == 0 when there is none
	fetching *fetch  // the fetch running, nil when none
	size     int     // the next fetch's count
	fetched  time.Time
	failures int       // background fetches failed in a row
	retryAt  time.Time // no background fetch before this after a failure
}

// one hands out one ID, fetching when both blocks are used up.
func (b *idBuffer) one(ctx context.Context) (string, error) {
	b.mu.Lock()
	for b.cur.left == 0 {
		if err := b.refill(ctx); err != nil {
			b.mu.Unlock()
			return "", err
		}
	}
	s, id := b.cur.take()
	b.prefetch()
	b.mu.Unlock()
	if s == "" {
		s = strconv.FormatInt(id, 10)
	}
	return s, nil
}

// many hands out n IDs in order; on an error, those it took come with it.
func (b *idBuffer) many(ctx context.Context, n int) ([]string, error) {
	out := make([]string, 0, n)
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(out) < n {
		if b.cur.left == 0 {
			if err := b.refill(ctx); err != nil {
				return out, err
			}
			continue
		}
		for b.cur.left > 0 && len(out) < n {
			s, id := b.cur.take()
			if s == "" {
				s = strconv.FormatInt(id, 10)
			}
			out = append(out, s)
		}
		b.prefetch()
	}
	return out, nil
}

// refill makes cur hold IDs: the next block when there is one, else the one being fetched,
// else a new fetch. It returns with mu held and cur non-empty, or with the error of the
// fetch it waited for or the end of ctx. It must be called with mu held and cur empty.
func (b *idBuffer) refill(ctx context.Context) error {
	if b.next.left > 0 {
		b.cur, b.next = b.next, idBlock{}
		return nil
	}
	f := b.fetching
	if f == nil {
		f = b.startFetch()
	}
	b.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
	}
	b.mu.Lock()
	if b.cur.left > 0 || b.next.left > 0 {
		return nil // the fetch, or one after it, installed a block: take from it
	}
	if err := ctx.Err(); err != nil {
		return ctxError(ctx)
	}
	if f.err != nil {
		return f.err
	}
	return nil // the block went to other callers: the caller goes round again
}

// prefetch starts the background fetch of the next block once 10% of cur is handed out,
// unless one runs or has arrived, or a failed one is still pausing. It must be called with
// mu held.
func (b *idBuffer) prefetch() {
	if b.cur.left > b.cur.mark || b.next.left > 0 || b.fetching != nil {
		return
	}
	if b.failures > 0 && time.Now().Before(b.retryAt) {
		return
	}
	b.startFetch()
}

// startFetch starts fetching a block in a goroutine of its own: it installs the block as
// cur when cur is used up, else as next. It must be called with mu held, and with no fetch
// running and next empty.
func (b *idBuffer) startFetch() *fetch {
	f := &fetch{done: make(chan struct{})}
	b.fetching = f
	now := time.Now()
	if !b.fetched.IsZero() {
		// The time since the last fetch is about how long a block lasts.
		switch age := now.Sub(b.fetched); {
		case age < idFastBlock:
			b.size = min(b.size*2, b.ids.maxBlock)
		case age >= idSlowBlock:
			b.size = max(b.size/2, b.ids.minBlock)
		}
	}
	b.fetched = now
	n := b.size
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), idFetchTimeout)
		blk, err := b.ids.fetch(ctx, b.key, n)
		cancel()
		b.mu.Lock()
		b.fetching = nil
		switch {
		case err != nil:
			f.err = err
			b.failures++
			b.retryAt = time.Now().Add(min(10*time.Millisecond<<min(b.failures-1, 7), time.Second))
		case b.cur.left == 0:
			b.failures, b.cur = 0, blk
		default:
			b.failures, b.next = 0, blk
		}
		b.mu.Unlock()
		close(f.done)
	}()
	return f
}
