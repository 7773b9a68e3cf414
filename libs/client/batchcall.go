package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/coordkit/coordkit/libs/client/batch"
)

// batchBytes caps the encoded operations of one Batch call the SDK sends: half the service's
// default 1 MiB request limit. Operations that would pass it leave in further Batch calls, and
// one that passes it alone goes out as its own call, so batching never turns a call the
// service takes alone into a refused request.
const batchBytes = 512 << 10

// batchCalls is what the batching wrappers of every service share: calls go through a
// batch.Coalescer, one operation queued goes out as its own unary call and several as the
// service's Batch, and once the service answers Batch with unimplemented (an older version)
// every call goes out alone.
type batchCalls[Op proto.Message, Res any] struct {
	coalescer *batch.Coalescer[Op, Res]
	// batch sends ops as the service's Batch call and returns its results.
	batch func(ctx context.Context, ops []Op) ([]Res, error)
	// unary sends op as its own call and wraps the answer as a batch result.
	unary     func(ctx context.Context, op Op) (Res, error)
	unbatched atomic.Bool
	// lone sends a lone operation as a Batch of one too (WithLoneBatches).
	lone bool
}

// newBatchCalls returns the calls of one service; maxInFlight is how many requests may be in
// flight before calls start to queue into batches of at most maxBatch operations.
func newBatchCalls[Op proto.Message, Res any](maxInFlight, maxBatch int,
	batchCall func(context.Context, []Op) ([]Res, error), unary func(context.Context, Op) (Res, error)) *batchCalls[Op, Res] {
	b := &batchCalls[Op, Res]{batch: batchCall, unary: unary}
	b.coalescer = batch.New(b.send, batch.Config{MaxInFlight: maxInFlight, MaxBatch: maxBatch})
	return b
}

// do sends op through the coalescer and returns its result, or the error of a call that did
// not get its own answer (see callError). The result may still carry the operation's own
// error, which the caller unwraps with operationError. Once the service is known to have no
// Batch, op goes out as its own call on the caller's goroutine: nothing is gained by
// queueing it, and no caller then waits for another's answer (a slow call would hold a
// sending slot, and a batch sent one call at a time answers when its slowest call does).
func (b *batchCalls[Op, Res]) do(ctx context.Context, op Op) (Res, error) {
	var r Res
	var err error
	if !b.unbatched.Load() {
		r, err = b.coalescer.Do(ctx, op)
		if !errors.Is(err, errUnbatched) {
			if err != nil {
				return r, callError(ctx, err)
			}
			return r, nil
		}
		// The batch this call was in found out that the service has no Batch, and sent
		// none of it: the call goes out alone, below.
	}
	if ctx.Err() != nil { // as the coalescer answers a call made with an ended context
		return r, callError(ctx, context.Cause(ctx))
	}
	if r, err = b.unary(ctx, op); err != nil {
		return r, callError(ctx, err)
	}
	return r, nil
}

// errUnbatched fails every operation of a batch that was not sent because the service has
// no Batch: do sends each of them again alone, on its caller's goroutine and with its
// caller's context, so no caller waits for another's answer.
var errUnbatched = errors.New("client: the service has no Batch")

// send sends one operation as its own call, several as Batch calls of at most batchBytes
// each, at once.
func (b *batchCalls[Op, Res]) send(ctx context.Context, ops []Op) ([]batch.Result[Res], error) {
	if b.unbatched.Load() {
		return nil, errUnbatched // queued before the service was found to have no Batch
	}
	if len(ops) == 1 && !b.lone {
		return b.sendEach(ctx, ops), nil
	}
	parts := splitBatch(ops)
	if len(parts) == 1 {
		return b.sendBatch(ctx, ops)
	}
	out := make([]batch.Result[Res], len(ops))
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			var res []batch.Result[Res]
			if p.end-p.start == 1 {
				res = b.sendEach(ctx, ops[p.start:p.end])
			} else {
				var err error
				if res, err = b.sendBatch(ctx, ops[p.start:p.end]); err != nil {
					res = make([]batch.Result[Res], p.end-p.start)
					for i := range res {
						res[i].Err = err
					}
				}
			}
			copy(out[p.start:p.end], res)
		})
	}
	wg.Wait()
	return out, nil
}

// sendBatch sends ops as one Batch call, or each as its own call when the service has no
// Batch.
func (b *batchCalls[Op, Res]) sendBatch(ctx context.Context, ops []Op) ([]batch.Result[Res], error) {
	res, err := b.batch(ctx, ops)
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		// Nothing of the batch ran: each caller sends its own operation (see do).
		b.unbatched.Store(true)
		return nil, errUnbatched
	}
	if notSent(err) {
		// Nothing of the batch ran (one operation could not be encoded, or the service
		// refused the request as a whole): each operation goes out alone, so only the one
		// at fault fails, as it would have without batching.
		return b.sendEach(ctx, ops), nil
	}
	if err != nil {
		return nil, err
	}
	if len(res) != len(ops) {
		return nil, fmt.Errorf("%w: %d operations, %d results", batch.ErrShortAnswer, len(ops), len(res))
	}
	out := make([]batch.Result[Res], len(ops))
	for i, r := range res {
		out[i].Value = r
	}
	return out, nil
}

// sendEach sends every operation as its own unary call, at once; the last (a lone
// operation's only one) on the calling goroutine.
func (b *batchCalls[Op, Res]) sendEach(ctx context.Context, ops []Op) []batch.Result[Res] {
	out := make([]batch.Result[Res], len(ops))
	var wg sync.WaitGroup
	for i, op := range ops[:len(ops)-1] {
		wg.Go(func() { out[i].Value, out[i].Err = b.unary(ctx, op) })
	}
	last := len(ops) - 1
	out[last].Value, out[last].Err = b.unary(ctx, ops[last])
	wg.Wait()
	return out
}

// notSent says whether a failed Batch call is sure to have run none of its operations: the
// request could not be encoded (an error of this process, not the wire), or the service
// refused it before reading its operations (too large: resource_exhausted; not a valid
// batch: invalid_argument; a service answers every operation's own error inside the
// response, never as the call's). A call that failed any other way may have run some.
func notSent(err error) bool {
	if err == nil {
		return false
	}
	code := connect.CodeOf(err)
	if !connect.IsWireError(err) {
		return code == connect.CodeInternal
	}
	return code == connect.CodeResourceExhausted || code == connect.CodeInvalidArgument
}

// span is the operations [start, end) of a batch.
type span struct{ start, end int }

// splitBatch cuts ops, in order, into spans of at most batchBytes encoded bytes each; an
// operation larger than that is a span of its own.
func splitBatch[Op proto.Message](ops []Op) []span {
	var parts []span
	cur, size := span{}, 0
	for i, op := range ops {
		n := proto.Size(op) + 8 // the field tag and length of the operation in the request
		if i > cur.start && size+n > batchBytes {
			parts = append(parts, cur)
			cur, size = span{start: i}, 0
		}
		cur.end = i + 1
		size += n
	}
	return append(parts, cur)
}

// callError is the error a call that did not get its own answer returns, as a Connect error
// the way the unary client would return it: the caller's context ending is canceled or
// deadline_exceeded (decided by ctx.Err(), also when the context has a cause of its own,
// which the error then wraps too), a broken answer internal; errors of the request itself
// already are Connect errors.
func callError(ctx context.Context, err error) error {
	var ce *connect.Error
	var ended error
	if batch.Ending(ctx) != nil { // done, or its deadline passed (Ending waits out the timer)
		ended = ctx.Err()
		if ended == nil { // a context without a Done channel
			ended = context.DeadlineExceeded
		}
	}
	switch {
	case errors.As(err, &ce):
		return err
	case ended != nil && (errors.Is(err, ended) || errors.Is(err, context.Cause(ctx))):
		code := connect.CodeCanceled
		if errors.Is(ended, context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		if cause := context.Cause(ctx); cause != nil && cause != ended {
			return connect.NewError(code, fmt.Errorf("%w: %w", ended, cause))
		}
		return connect.NewError(code, ended)
	case errors.Is(err, batch.ErrShortAnswer):
		return connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewError(connect.CodeUnknown, err)
}

// batchError is a batched operation's error as every service's Batch answers it.
type batchError interface {
	GetCode() string
	GetMessage() string
}

// operationError is a batched operation's error as the unary call would have returned it.
func operationError(e batchError) error {
	var code connect.Code
	if code.UnmarshalText([]byte(e.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, errors.New(e.GetMessage()))
}

// mismatch is the error for a batch result that answers another kind of operation than the
// one sent (result is the result's oneof): a broken service, never a success.
func mismatch(sent string, result any) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("client: the service answered a batched %s with %T", sent, result))
}
