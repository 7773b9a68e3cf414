package redlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// closedAddr returns a loopback address nothing listens on: a node that is down.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestOpen(t *testing.T) {
	t.Parallel()
	up := testenv.RedlockAddrs()
	tests := []struct {
		name    string
		addrs   []string
		wantErr error // nil: opens; errAny: any error
	}{
		{name: "every node up", addrs: up},
		{name: "a minority down", addrs: []string{up[0], up[1], closedAddr(t)}},
		{name: "a majority down", addrs: []string{up[0], closedAddr(t), closedAddr(t)}, wantErr: lock.ErrUnavailable},
		{name: "a node listed twice", addrs: []string{up[0], up[0], up[1]}, wantErr: errAny},
		{name: "no nodes", wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			b, err := Open(context.Background(), tt.addrs, Config{Prefix: testenv.Prefix(t)})
			if err == nil {
				defer b.Close()
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Open(%v): %v, want it to open", tt.addrs, err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("Open(%v) error %v, want %v", tt.addrs, err, tt.wantErr)
			case err != nil && !strings.HasPrefix(err.Error(), "redlock: "):
				t.Fatalf("Open error %q does not start with redlock:", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("Open took %v with nodes down, want it bounded by the ping timeout", took)
			}
		})
	}
}

// errAny stands for "some error" in tables.
var errAny = errors.New("any error")

// TestNodeTimeout checks that a node that never answers costs one per-node timeout, capped
// by the ttl, rather than blocking the call.
func TestNodeTimeout(t *testing.T) {
	t.Parallel()
	// A listener that accepts connections and never answers: a hung node.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accepted []net.Conn // kept open, silent, until the test ends
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	up := testenv.RedlockAddrs()
	prefix := testenv.Prefix(t)
	for _, addr := range up[:2] {
		testenv.CleanRedis(t, testenv.Redis(t, addr), prefix)
	}
	b, err := Open(context.Background(), []string{up[0], up[1], ln.Addr().String()}, Config{Prefix: prefix, NodeTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open with one hung node: %v", err)
	}
	defer b.Close()
	tests := []struct {
		ttl     time.Duration
		maxTook time.Duration
	}{
		{ttl: 10 * time.Second, maxTook: 2*200*time.Millisecond + 300*time.Millisecond},      // NodeTimeout per round
		{ttl: 500 * time.Millisecond, maxTook: 2*50*time.Millisecond + 300*time.Millisecond}, // ttl/10 per round
	}
	for _, tt := range tests {
		start := time.Now()
		att, err := b.TryAcquire(context.Background(), "k"+tt.ttl.String(), "me", tt.ttl)
		took := time.Since(start)
		if err != nil || !att.Acquired {
			t.Fatalf("ttl %v: TryAcquire = %+v, %v; want acquired on the two live nodes", tt.ttl, att, err)
		}
		if took > tt.maxTook {
			t.Fatalf("ttl %v: TryAcquire took %v with a hung node, want at most %v", tt.ttl, took, tt.maxTook)
		}
	}
}
