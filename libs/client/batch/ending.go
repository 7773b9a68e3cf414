package batch

import (
	"context"
	"time"
)

// Ending is how ctx has ended, or nil while it has not: context.Cause(ctx) once it is done,
// and the same from the moment its deadline passes, before its timer has marked it done
// (the timer is due, so Ending waits for it and keeps a cause given with the deadline; a
// context without a Done channel gets context.DeadlineExceeded). A batch goes out with the
// latest of its callers' deadlines on a timer of its own, which can fail the batch before a
// caller's timer has fired: that caller's failure is its deadline, not the batch's error.
// The coalescer, the services' backend errors (server.Unavailable) and the SDK's call
// errors all decide it here.
func Ending(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	d, ok := ctx.Deadline()
	if !ok || time.Now().Before(d) {
		return nil
	}
	if done := ctx.Done(); done != nil {
		<-done
		return context.Cause(ctx)
	}
	return context.DeadlineExceeded
}
