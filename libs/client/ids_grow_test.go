package client

import (
	"context"
	"strconv"
	"sync"
	"testing"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
)

// counter is an ID service that hands out consecutive ranges and records each request's
// count.
type counter struct {
	idgenv1connect.IdServiceClient
	mu     sync.Mutex
	next   int64
	counts []uint32
}

func (c *counter) Next(_ context.Context, req *idgenv1.NextRequest) (*idgenv1.NextResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = append(c.counts, req.GetCount())
	start := c.next
	c.next += int64(req.GetCount())
	return &idgenv1.NextResponse{Ranges: []*idgenv1.IdRange{{Start: start, End: c.next}}}, nil
}

// TestIDBlocksGrowWhileUsedUpFast: blocks used up in under a second make the next fetch
// twice as large, up to the largest block, so a busy caller fetches rarely; and every ID is
// handed out once, in order.
func TestIDBlocksGrowWhileUsedUpFast(t *testing.T) {
	t.Parallel()
	svc := &counter{}
	const minBlock, maxBlock = 10, 640
	x := newIDs(svc, minBlock, maxBlock)
	var last int64 = -1
	for range 5000 {
		s, err := x.Next(context.Background(), idgenv1.Mode_MODE_SEGMENT, "grow")
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if id <= last {
			t.Fatalf("id %d after %d", id, last)
		}
		last = id
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.counts) < 3 || svc.counts[0] != minBlock || svc.counts[1] != 2*minBlock {
		t.Fatalf("fetch counts %v: want %d, then %d, ...", svc.counts, minBlock, 2*minBlock)
	}
	reached := false
	for i, n := range svc.counts {
		if n > maxBlock {
			t.Fatalf("fetch %d asked for %d, more than the largest block %d", i, n, maxBlock)
		}
		if i > 0 && n < svc.counts[i-1] {
			t.Fatalf("fetch counts %v shrink while blocks are used up within a second", svc.counts)
		}
		reached = reached || n == maxBlock
	}
	if !reached || len(svc.counts) > 20 {
		t.Fatalf("%d fetches for 5000 IDs (counts %v): blocks never reached %d", len(svc.counts), svc.counts, maxBlock)
	}
}
