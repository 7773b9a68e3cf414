package block_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/idgen/block"
)

// errStoreDown is flakyStore's failure.
var errStoreDown = errors.New("store down")

// flakyStore reserves ranges of 10 from one counter per tag, after a short delay; the first
// reservation of every tag fails, as a store that is briefly down.
type flakyStore struct {
	mu    sync.Mutex
	top   map[string]int64
	calls map[string]int
}

func (s *flakyStore) Reserve(ctx context.Context, tag string, want int64) (block.Reservation, error) {
	time.Sleep(50 * time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[tag]++
	if s.calls[tag] == 1 {
		return block.Reservation{}, errStoreDown
	}
	size := max(want, 10)
	start := s.top[tag] + 1
	s.top[tag] += size
	return block.Reservation{Range: block.Range{Start: start, End: start + size}, MinStep: 10}, nil
}

// A failed first reservation must not drop a tag's buffer that other requests still hold:
// they would fill it while new requests fill a second one, and IDs would go back and forth.
// Every call counts: exactly one sees the store's failure, every other one gets an ID above
// every ID of a call that returned before it started, and no ID comes twice.
func TestFailedFirstReservationKeepsOrder(t *testing.T) {
	t.Parallel()
	const workers, calls = 8, 20
	store := &flakyStore{top: map[string]int64{}, calls: map[string]int{}}
	p := block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer p.Close()
	for i := range 150 {
		tag := fmt.Sprint("tag", i)
		var (
			mu       sync.Mutex
			highest  int64 // the highest ID of every call that has returned
			seen     = map[int64]bool{}
			failures []error
			problems []string
			wg       sync.WaitGroup
		)
		for range workers {
			wg.Go(func() {
				for range calls {
					mu.Lock()
					floor := highest
					mu.Unlock()
					ids, err := p.Next(context.Background(), tag, 1)
					mu.Lock()
					switch {
					case err != nil:
						failures = append(failures, err)
					case len(ids) != 1:
						problems = append(problems, fmt.Sprintf("got %v, want one ID", ids))
					case ids[0] <= floor:
						problems = append(problems, fmt.Sprintf("got %d after a call had returned %d", ids[0], floor))
					case seen[ids[0]]:
						problems = append(problems, fmt.Sprintf("got %d twice", ids[0]))
					}
					for _, id := range ids {
						seen[id] = true
						highest = max(highest, id)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(problems) > 0 {
			t.Fatalf("%s: %d of %d calls broke the order, first: %s", tag, len(problems), workers*calls, problems[0])
		}
		if len(failures) != 1 || !errors.Is(failures[0], errStoreDown) {
			t.Fatalf("%s: %d calls failed (%v); want exactly one, with the store's failure of the first reservation (%v)",
				tag, len(failures), errors.Join(failures...), errStoreDown)
		}
		if len(seen) != workers*calls-1 {
			t.Fatalf("%s: %d distinct IDs from %d successful calls", tag, len(seen), workers*calls-1)
		}
	}
}

// fgKey marks the contexts of the test's own Next calls, so a store can tell a foreground
// reservation (which gets the caller's context) from a background one (the pool's own).
type fgKey struct{}

// hangingStore reserves ranges of 10 from one counter per tag. Foreground reservations are
// answered at once; background ones hang until their context ends, and then take a moment to
// return, as a store does to notice. It records what Close must guarantee of them.
type hangingStore struct {
	mu       sync.Mutex
	top      map[string]int64
	running  int     // background reservations not yet returned
	begun    int     // background reservations ever begun
	ends     []error // how each background reservation's context ended
	closed   bool    // Close has returned
	lateOnes int     // background reservations begun after Close returned
}

func (s *hangingStore) Reserve(ctx context.Context, tag string, want int64) (block.Reservation, error) {
	if ctx.Value(fgKey{}) == nil {
		s.mu.Lock()
		s.running++
		s.begun++
		if s.closed {
			s.lateOnes++
		}
		s.mu.Unlock()
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		s.mu.Lock()
		s.running--
		s.ends = append(s.ends, ctx.Err())
		s.mu.Unlock()
		return block.Reservation{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	size := max(want, 10)
	start := s.top[tag] + 1
	s.top[tag] += size
	return block.Reservation{Range: block.Range{Start: start, End: start + size}, MinStep: 10}, nil
}

func (s *hangingStore) snapshot() (running, begun, lateOnes int, ends []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.begun, s.lateOnes, slices.Clone(s.ends)
}

// Close while background reservations run (each tag's prefetch hangs in the store, and
// requests wait for it) must cancel them, wait until every one has returned, start no more
// afterwards, and let the waiting requests go on in the foreground with their IDs still
// strictly increasing and unique.
func TestCloseDuringPrefetch(t *testing.T) {
	t.Parallel()
	const tags, calls = 4, 50
	for iter := range 20 {
		store := &hangingStore{top: map[string]int64{}}
		p := block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ctx := context.WithValue(context.Background(), fgKey{}, true)
		problems := make(chan string, tags*calls)
		var wg sync.WaitGroup
		for g := range tags {
			wg.Go(func() {
				tag := fmt.Sprint("tag", g)
				var last int64
				for range calls {
					ids, err := p.Next(ctx, tag, 3)
					if err != nil {
						problems <- fmt.Sprintf("%s: Next: %v", tag, err)
						return
					}
					for _, id := range ids {
						if id <= last {
							problems <- fmt.Sprintf("%s: got %d after %d", tag, id, last)
							return
						}
						last = id
					}
				}
			})
		}
		// Every tag's first call used 30% of its range and started a background reservation.
		deadline := time.Now().Add(30 * time.Second)
		for _, begun, _, _ := store.snapshot(); begun < tags; _, begun, _, _ = store.snapshot() {
			if time.Now().After(deadline) {
				t.Fatalf("iteration %d: %d background reservations began, want %d", iter, begun, tags)
			}
			time.Sleep(time.Millisecond)
		}

		p.Close()
		running, begun, _, ends := store.snapshot()
		if running != 0 {
			t.Fatalf("iteration %d: Close returned with %d of %d background reservations still running", iter, running, begun)
		}
		for _, err := range ends {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("iteration %d: a background reservation ended with %v, want canceled by Close", iter, err)
			}
		}
		store.mu.Lock()
		store.closed = true
		store.mu.Unlock()

		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("iteration %d: requests still blocked a minute after Close", iter)
		}
		close(problems)
		for msg := range problems {
			t.Fatalf("iteration %d: %s", iter, msg)
		}
		if _, _, late, _ := store.snapshot(); late != 0 {
			t.Fatalf("iteration %d: %d background reservations began after Close returned", iter, late)
		}
		p.Close() // twice is fine
	}
}

// countingStore reserves ranges of at least 10 from one counter per tag, at once.
type countingStore struct {
	mu  sync.Mutex
	top map[string]int64
}

func (s *countingStore) Reserve(_ context.Context, tag string, want int64) (block.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := max(want, 10)
	start := s.top[tag] + 1
	s.top[tag] += size
	return block.Reservation{Range: block.Range{Start: start, End: start + size}, MinStep: 10}, nil
}

// Requests claim IDs from the current range without a lock, so batches that straddle the end
// of a range race the requests that find it used up. Whatever the interleaving, and with the
// tag dropped now and then: no ID comes twice, every request's IDs strictly increase and lie
// above those of every request that returned before it started, and without drops nothing
// is skipped: the IDs handed out are exactly 1 to their count.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		drop bool
	}{{"no drops", false}, {"drops", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &countingStore{top: map[string]int64{}}
			p := block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			defer p.Close()
			const workers, calls = 8, 3000
			var (
				mu       sync.Mutex
				highest  int64 // the highest ID of every call that has returned
				seen     = map[int64]bool{}
				problems []string
				wg       sync.WaitGroup
				done     = make(chan struct{})
			)
			if tt.drop {
				go func() {
					for {
						select {
						case <-done:
							return
						case <-time.After(200 * time.Microsecond):
							p.Drop("t")
						}
					}
				}()
			}
			for w := range workers {
				wg.Go(func() {
					rs := make([]block.Range, 0, 4)
					for c := range calls {
						n := 1 + (w*calls+c)%23 // batches up to twice a range
						mu.Lock()
						floor := highest
						mu.Unlock()
						var err error
						rs, err = p.AppendRanges(context.Background(), rs[:0], "t", n)
						mu.Lock()
						if err != nil {
							problems = append(problems, fmt.Sprintf("AppendRanges: %v", err))
						}
						got, last := 0, floor
						for _, r := range rs {
							for id := r.Start; id < r.End; id++ {
								if id <= last {
									problems = append(problems, fmt.Sprintf("got %d after %d (the floor was %d)", id, last, floor))
								}
								if seen[id] {
									problems = append(problems, fmt.Sprintf("got %d twice", id))
								}
								seen[id], last = true, id
								got++
							}
						}
						if got != n {
							problems = append(problems, fmt.Sprintf("asked for %d IDs, got %d in %v", n, got, rs))
						}
						highest = max(highest, last)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(done)
			if len(problems) > 0 {
				t.Fatalf("%d problems, first: %v", len(problems), problems[:min(len(problems), 5)])
			}
			if !tt.drop {
				for id := int64(1); id <= int64(len(seen)); id++ {
					if !seen[id] {
						t.Fatalf("%d IDs handed out, but not %d: a claim skipped IDs", len(seen), id)
					}
				}
			}
		})
	}
}
