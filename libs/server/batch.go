package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"connectrpc.com/connect"
)

// MaxBatchOperations is the most operations one Batch call of any service may carry.
const MaxBatchOperations = 1000

// CheckBatch refuses a batch of n operations that is empty or larger than
// MaxBatchOperations, naming field.
func CheckBatch(field string, n int) error {
	switch {
	case n == 0:
		return InvalidField(field, "a batch needs at least one operation")
	case n > MaxBatchOperations:
		return InvalidField(field, "%d operations; a batch carries at most %d", n, MaxBatchOperations)
	}
	return nil
}

// RunBatch runs op(i) for every i in [0, n) at once, the last on the calling goroutine and
// the others on workers (see workers.go), and returns when all have returned. Running them
// together is what lets a backend that pipelines concurrent calls pay one round trip for the
// batch. A panic in one operation is recovered and handed to recovered with its index, so it
// fails that operation alone (as a panic in a single call is answered internal) instead of
// the whole process or batch.
func RunBatch(n int, op func(i int), recovered func(i int, p any)) {
	run := func(i int) {
		defer func() {
			if p := recover(); p != nil {
				recovered(i, p)
			}
		}()
		op(i)
	}
	var wg sync.WaitGroup
	wg.Add(max(n-1, 0))
	for i := range n - 1 {
		goWork(func() {
			defer wg.Done()
			run(i)
		})
	}
	if n > 0 {
		run(n - 1)
	}
	wg.Wait()
}

// ErrPanic is the error of a batched operation that panicked: answered internal, as the
// server answers a single call that panics.
var ErrPanic = connect.NewError(connect.CodeInternal, errors.New("internal error"))

// LogPanic logs a recovered panic of a batched operation the way the server logs one of a
// single call.
func LogPanic(ctx context.Context, log *slog.Logger, service string, p any) {
	log.ErrorContext(ctx, "panic in batched operation", "service", service, "panic", fmt.Sprint(p))
}

// OperationError is the Connect code and message an operation's error reaches its caller
// with when the operation is sent alone: Error's mapping, so a batched operation fails
// exactly as the single call would.
func OperationError(ctx context.Context, err error) (connect.Code, string) {
	err = Error(ctx, err)
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code(), ce.Message()
	}
	return connect.CodeInternal, err.Error()
}

// LogBatchFailures logs, in one line per batch, the operations of a batch that failed on
// the server's side (internal, unknown, unavailable or data loss, as the logging interceptor
// logs a single call's failure): how many, and the first one's error. Client mistakes and
// operations ended by the caller or the shutdown are not logged.
func LogBatchFailures(ctx context.Context, log *slog.Logger, service string, errs []error) {
	var first error
	n := 0
	for _, err := range errs {
		if err == nil || Ended(err) {
			continue
		}
		switch connect.CodeOf(Error(ctx, err)) {
		case connect.CodeInternal, connect.CodeUnknown, connect.CodeUnavailable, connect.CodeDataLoss:
			if first == nil {
				first = err
			}
			n++
		}
	}
	if n > 0 {
		log.WarnContext(ctx, "batched operations failed", "service", service, "failed", n, "of", len(errs), "first_error", first)
	}
}
