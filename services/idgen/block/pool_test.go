package block_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/idgen/block"
)

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
		return block.Reservation{}, errors.New("store down")
	}
	size := max(want, 10)
	start := s.top[tag] + 1
	s.top[tag] += size
	return block.Reservation{Range: block.Range{Start: start, End: start + size}, MinStep: 10}, nil
}

// A failed first reservation must not drop a tag's buffer that other requests still hold:
// they would fill it while new requests fill a second one, and IDs would go back and forth.
func TestFailedFirstReservationKeepsOrder(t *testing.T) {
	t.Parallel()
	store := &flakyStore{top: map[string]int64{}, calls: map[string]int{}}
	p := block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer p.Close()
	for i := range 150 {
		tag := fmt.Sprint("tag", i)
		var mu sync.Mutex
		var highest int64 // the highest ID of every call that has returned
		var wg sync.WaitGroup
		var bad atomic.Value
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					mu.Lock()
					floor := highest
					mu.Unlock()
					ids, err := p.Next(context.Background(), tag, 1)
					if err != nil {
						continue
					}
					if ids[0] <= floor {
						bad.Store(fmt.Sprintf("tag %s: got %d after a call had returned %d", tag, ids[0], floor))
					}
					mu.Lock()
					highest = max(highest, ids[0])
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if msg := bad.Load(); msg != nil {
			t.Fatal(msg)
		}
	}
}

// Close may run while requests start background reservations; it must wait for every one.
func TestCloseDuringPrefetch(t *testing.T) {
	t.Parallel()
	for range 50 {
		store := &flakyStore{top: map[string]int64{}, calls: map[string]int{}}
		p := block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					p.Next(context.Background(), fmt.Sprint("tag", g), 3) //nolint:errcheck // only the race matters
				}
			}()
		}
		time.Sleep(time.Millisecond)
		p.Close()
		wg.Wait()
		p.Close() // twice is fine
	}
}
