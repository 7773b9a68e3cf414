package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

func testWatchdogKeepsLock(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	// A renewal must answer within ttl/3; on a loaded 2-core CI host under -race, 100ms was
	// sometimes too little for a healthy service. 1s keeps the test meaningful and stable.
	const ttl = time.Second
	l := must(a.Lock(ctx, "dog", client.WithTTL(ttl)))(t)
	deadline := time.Now().Add(5 * ttl)
	for time.Now().Before(deadline) {
		if _, err := b.TryLock(ctx, "dog"); !errors.Is(err, client.ErrNotAcquired) {
			t.Fatalf("another owner got the lock while the watchdog kept it: %v", err)
		}
		select {
		case <-l.Lost():
			t.Fatalf("lease lost while the service was up: %v", l.Err())
		case <-time.After(ttl / 4):
		}
	}
	if st := inspect(t, b, "dog"); st.GetFencingToken() != l.FencingToken() {
		t.Fatalf("token changed to %d while held with %d", st.GetFencingToken(), l.FencingToken())
	}
	noErr(t, l.Unlock(ctx))
	if !errors.Is(context.Cause(l.Context()), client.ErrUnlocked) {
		t.Fatalf("context cause after Unlock = %v, want ErrUnlocked", context.Cause(l.Context()))
	}
}

// testLostWhenServiceUnreachable cuts the client off from the service: the first renewal
// fails and Lost closes within one renewal interval.
func testLostWhenServiceUnreachable(t *testing.T, bc backendCase) {
	open := bc.store(t)
	inst := startInstance(t, bc.name, open(t))
	p := testenv.NewProxy(t, strings.TrimPrefix(inst.url, "http://"))
	proxied := client.New("http://" + p.Addr())
	const ttl = 600 * time.Millisecond
	l := must(proxied.Lock(context.Background(), "cut", client.WithTTL(ttl)))(t)
	p.Cut()
	within(t, l.Lost(), ttl/3+300*time.Millisecond, "Lost after the service became unreachable")
	if !errors.Is(l.Err(), client.ErrLeaseLost) || !errors.Is(context.Cause(l.Context()), client.ErrLeaseLost) {
		t.Fatalf("Err = %v, cause = %v; want ErrLeaseLost", l.Err(), context.Cause(l.Context()))
	}
	if err := l.Unlock(context.Background()); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Unlock after loss = %v, want ErrLeaseLost", err)
	}
}
