package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
)

// rangeIDs answers every Next with the next count numbers.
type rangeIDs struct {
	idgenv1connect.UnimplementedIdServiceHandler
	next atomic.Int64
}

func (r *rangeIDs) Next(_ context.Context, req *idgenv1.NextRequest) (*idgenv1.NextResponse, error) {
	n := int64(req.GetCount())
	end := r.next.Add(n)
	return &idgenv1.NextResponse{Ranges: []*idgenv1.IdRange{{Start: end - n, End: end}}}, nil
}

// droppingServer serves ids, except that the first drop requests have their connection
// closed without an answer, as a connection the network or the server closed while it sat
// idle in the client's pool. It counts every request.
func droppingServer(t *testing.T, drop int64) (url string, requests *atomic.Int64) {
	t.Helper()
	requests = new(atomic.Int64)
	_, h := idgenv1connect.NewIdServiceHandler(&rangeIDs{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= drop {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, requests
}

// An ID fetch whose connection is closed under it is sent once more, and only once.
func TestIDFetchRetriedOnceWhenUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		drop         int64
		wantCode     connect.Code // 0: Next succeeds
		wantRequests int64
	}{
		{"first connection dropped", 1, 0, 2},
		{"every connection dropped", 1 << 30, connect.CodeUnavailable, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, requests := droppingServer(t, tt.drop)
			ids := client.New(url, client.WithIDBlock(10), client.WithIDMaxBlock(10)).IDs()
			id, err := ids.Next(context.Background(), idgenv1.Mode_MODE_SEGMENT, "orders")
			if got := connect.CodeOf(err); err != nil && got != tt.wantCode || err == nil && tt.wantCode != 0 {
				t.Fatalf("Next = %q, %v; want code %v", id, err, tt.wantCode)
			}
			if err == nil && id != "0" {
				t.Fatalf("Next = %q, want the first ID of the range, 0", id)
			}
			if got := requests.Load(); got != tt.wantRequests {
				t.Fatalf("the server saw %d requests, want %d", got, tt.wantRequests)
			}
		})
	}
}
