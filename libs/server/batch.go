package server

import (
	"context"
	"errors"
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

// RunBatch runs op(i) for every i in [0, n) at once, the last on the calling goroutine, and
// returns when all have returned. Running them together is what lets a backend that
// pipelines concurrent calls (Redis autopipelining) pay one round trip for the batch.
func RunBatch(n int, op func(i int)) {
	var wg sync.WaitGroup
	for i := range n - 1 {
		wg.Go(func() { op(i) })
	}
	if n > 0 {
		op(n - 1)
	}
	wg.Wait()
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
