package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// The watchdog renews a held lock for as long as the work under it runs, and ends the work's
// context the moment it can no longer vouch for the lease. A slow or failed renewal is
// retried; Lost closes at once when the service says the lease is gone (here: released
// behind the holder's back with its owner secret), and otherwise no later than
// ExpiresAt() - SafetyMargin() when the service cannot be reached.
func Example_watchdog() {
	urls, stop := startExampleService(1)
	defer stop()
	c := client.New(urls[0])
	ctx := context.Background()

	l, err := c.Lock(ctx, "report:daily", client.WithTTL(time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("renews every third of the lease, gives up", l.SafetyMargin(), "before its expiry")

	// An operator frees the lock while the report is being written.
	if _, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "report:daily", Owner: l.Owner()}); err != nil {
		panic(err)
	}

	// The report's work runs under l.Context(), so it stops when the lease ends.
	work := l.Context()
	for work.Err() == nil {
		select {
		case <-work.Done():
		case <-time.After(10 * time.Millisecond): // write a few more rows
		}
	}
	fmt.Println("lost:", errors.Is(context.Cause(work), client.ErrLeaseLost), connect.CodeOf(l.Err()))
	fmt.Println("unlock reports the loss:", errors.Is(l.Unlock(ctx), client.ErrLeaseLost))
	// Output:
	// renews every third of the lease, gives up 100ms before its expiry
	// lost: true failed_precondition
	// unlock reports the loss: true
}
