package uuidgen_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/coordkit/coordkit/services/idgen/uuidgen"
)

// Every UUID parses as the RFC 9562 version asked for, in the canonical lowercase form, and
// none comes twice, from single calls and batches, across pool refills.
func TestVersionsAndUniqueness(t *testing.T) {
	t.Parallel()
	g := uuidgen.New(nil)
	tests := []struct {
		name    string
		version uuid.Version
		make    func() []string
	}{
		{"v4", 4, func() []string { return []string{g.V4()} }},
		{"v7", 7, func() []string { return []string{g.V7()} }},
		{"v4 batch", 4, func() []string { return g.Append(nil, 333, false) }},
		{"v7 batch", 7, func() []string { return g.Append(nil, 333, true) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen := map[string]bool{}
			for len(seen) < 50000 {
				for _, s := range tt.make() {
					u, err := uuid.Parse(s)
					if err != nil || u.String() != s || u.Version() != tt.version || u.Variant() != uuid.RFC4122 {
						t.Fatalf("%q: parsed %v (%v), version %v, variant %v; want canonical version %d, RFC 9562 variant",
							s, u, err, u.Version(), u.Variant(), tt.version)
					}
					if seen[s] {
						t.Fatalf("%s twice", s)
					}
					seen[s] = true
				}
			}
		})
	}
}

// Version 7 UUIDs carry the clock's millisecond and strictly increase, from many goroutines
// at once, within one millisecond and when the clock steps back.
func TestV7Order(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		offset time.Duration
	)
	g := uuidgen.New(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(offset)
	})
	before := time.Now()
	first := g.V7()
	u, _ := uuid.Parse(first)
	sec, nsec := u.Time().UnixTime()
	if at := time.Unix(sec, nsec); at.Before(before.Truncate(time.Millisecond)) || at.After(time.Now()) {
		t.Fatalf("%s carries %v, want the time it was made (%v)", first, at, before)
	}

	const workers, each = 4, 5000
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if w == 0 && i == each/2 {
					mu.Lock()
					offset = -time.Second // the clock steps back
					mu.Unlock()
				}
				got[w] = append(got[w], g.V7())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{first: true}
	for w, ids := range got {
		for i, s := range ids {
			if (i > 0 && s <= ids[i-1]) || (i == 0 && s <= first) {
				t.Fatalf("goroutine %d got %s after %s", w, s, ids[max(i-1, 0)])
			}
			if seen[s] {
				t.Fatalf("%s twice", s)
			}
			seen[s] = true
		}
	}
}
