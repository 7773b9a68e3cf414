package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// errDomain is a domain's unavailable sentinel, as lock.ErrUnavailable is.
var errDomain = fmt.Errorf("domain: %w", ErrUnavailable)

// endedCtx returns a context that has already ended with cause (nil: plain cancel).
func endedCtx(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}

// expiredCtx returns a context whose deadline has passed.
func expiredCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	t.Cleanup(cancel)
	return ctx
}

// timerPending is a context whose deadline has passed but whose timer has not yet marked it
// done: the moment in which a batch sent with a timer of its own can fail first.
type timerPending struct{ context.Context }

func (timerPending) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestUnavailable: a live context gets the engine's failure as the domain sentinel (and so
// the shared one), never the driver's own error kind; an ended one gets its cause, whatever
// the engine said, so every backend answers a shutdown or a cancel the same way.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	driverTimeout := fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		wantIs   []error
		wantNot  []error
		wantCode connect.Code
	}{
		{"live context", context.Background(), errors.New("connection refused"),
			[]error{errDomain, ErrUnavailable}, nil, connect.CodeUnavailable},
		{"driver timeout on a live context stays unavailable", context.Background(), driverTimeout,
			[]error{errDomain}, []error{os.ErrDeadlineExceeded}, connect.CodeUnavailable},
		{"caller canceled", endedCtx(nil), errors.New("connection reset"),
			[]error{context.Canceled}, []error{ErrUnavailable}, connect.CodeCanceled},
		{"caller's deadline passed", expiredCtx(t), driverTimeout,
			[]error{context.DeadlineExceeded}, []error{ErrUnavailable}, connect.CodeDeadlineExceeded},
		{"caller's deadline passed, its timer not yet fired", timerPending{context.Background()}, errors.New("batch: context deadline exceeded"),
			[]error{context.DeadlineExceeded}, []error{ErrUnavailable}, connect.CodeDeadlineExceeded},
		{"server shutting down", endedCtx(ErrShutdown), context.Canceled,
			[]error{ErrShutdown}, nil, connect.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Unavailable(tt.ctx, errDomain, "engine", tt.err)
			for _, want := range tt.wantIs {
				if !errors.Is(err, want) {
					t.Errorf("Unavailable = %v, want it to be %v", err, want)
				}
			}
			for _, not := range tt.wantNot {
				if errors.Is(err, not) {
					t.Errorf("Unavailable = %v, must not be %v", err, not)
				}
			}
			if got := connect.CodeOf(Error(tt.ctx, err)); got != tt.wantCode {
				t.Errorf("Error(Unavailable) code = %v, want %v", got, tt.wantCode)
			}
		})
	}
}

// TestError pins the one mapping every service's edge uses, including errors returned as
// the bare ctx.Err() by code that does not know about causes (connect-go's own check before
// calling a handler, or an engine that forgot context.Cause).
func TestError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want connect.Code
	}{
		{"connect error keeps its code", context.Background(), connect.NewError(connect.CodeNotFound, errors.New("x")), connect.CodeNotFound},
		{"wrapped connect error keeps its code", context.Background(), fmt.Errorf("w: %w", connect.NewError(connect.CodeAborted, errors.New("x"))), connect.CodeAborted},
		{"domain unavailable", context.Background(), fmt.Errorf("op: %w", errDomain), connect.CodeUnavailable},
		{"shutdown cause", context.Background(), ErrShutdown, connect.CodeUnavailable},
		{"canceled", context.Background(), context.Canceled, connect.CodeCanceled},
		{"deadline", context.Background(), fmt.Errorf("op: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{"os deadline", context.Background(), os.ErrDeadlineExceeded, connect.CodeDeadlineExceeded},
		{"bare ctx.Err of a shut-down request", endedCtx(ErrShutdown), context.Canceled, connect.CodeUnavailable},
		{"bare ctx.Err of a canceled request", endedCtx(nil), context.Canceled, connect.CodeCanceled},
		{"bare ctx.Err of an expired request", expiredCtx(t), context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{"an unrelated error on an ended request is still internal", endedCtx(ErrShutdown), errors.New("boom"), connect.CodeInternal},
		{"unmapped", context.Background(), errors.New("boom"), connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := connect.CodeOf(Error(tt.ctx, tt.err)); got != tt.want {
				t.Errorf("Error(%v) code = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if Error(context.Background(), nil) != nil {
		t.Error("Error(nil) != nil")
	}
}

// TestEnded: only the caller's own endings and the server's shutdown are "ended"; a failed
// backend is not, however it is wrapped.
func TestEnded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{context.Canceled, true},
		{context.DeadlineExceeded, true},
		{connect.NewError(connect.CodeDeadlineExceeded, errors.New("x")), true},
		{ErrShutdown, true},
		{connect.NewError(connect.CodeUnavailable, ErrShutdown), true},
		{errDomain, false},
		{connect.NewError(connect.CodeUnavailable, errDomain), false},
		{errors.New("boom"), false},
		{nil, false},
	} {
		if got := Ended(tt.err); got != tt.want {
			t.Errorf("Ended(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// errCoded is a domain's sentinel with its own code, as lock.ErrNotHeld is.
var errCoded = NewError(connect.CodeFailedPrecondition, "domain: not held")

// typedCoded is a domain's error type that carries its code, as segment.BelowTombstone does.
type typedCoded struct{ at int }

func (e *typedCoded) Error() string             { return fmt.Sprintf("domain: below %d", e.at) }
func (e *typedCoded) ConnectCode() connect.Code { return connect.CodeAlreadyExists }

// TestErrorCoded pins how Error answers an error that carries its own code: with that code
// wherever it sits in the chain, and with its text as the message, even when it is joined
// with a context's ending, a shutdown or an unavailable backend (it is the backend's answer,
// as each service's own mapping gave it before Error knew codes). A context's ending, a
// shutdown and an unavailable backend without a coded error keep their codes.
func TestErrorCoded(t *testing.T) {
	t.Parallel()
	shutdown := endedCtx(ErrShutdown)
	canceled := endedCtx(nil)
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		want    connect.Code
		wantMsg string
	}{
		{"coded", context.Background(), errCoded, connect.CodeFailedPrecondition, "domain: not held"},
		{"coded, wrapped", context.Background(), fmt.Errorf("release: %w", errCoded), connect.CodeFailedPrecondition, "release: domain: not held"},
		{"coded, wrapped twice", context.Background(), fmt.Errorf("op: %w", fmt.Errorf("release: %w", errCoded)), connect.CodeFailedPrecondition, "op: release: domain: not held"},
		{"coded type", context.Background(), fmt.Errorf("create: %w", &typedCoded{7}), connect.CodeAlreadyExists, "create: domain: below 7"},
		{"coded joined with a cancellation", canceled, errors.Join(errCoded, context.Canceled), connect.CodeFailedPrecondition, ""},
		{"cancellation joined with a coded error", canceled, errors.Join(context.Canceled, errCoded), connect.CodeFailedPrecondition, ""},
		{"coded wrapping a cancellation", canceled, fmt.Errorf("%w: %w", errCoded, context.Canceled), connect.CodeFailedPrecondition, ""},
		{"coded joined with a passed deadline", expiredCtx(t), errors.Join(errCoded, context.DeadlineExceeded), connect.CodeFailedPrecondition, ""},
		{"coded joined with the shutdown's ctx.Err", shutdown, errors.Join(errCoded, shutdown.Err()), connect.CodeFailedPrecondition, ""},
		{"coded joined with an unavailable backend", context.Background(), errors.Join(errDomain, errCoded), connect.CodeFailedPrecondition, ""},
		{"coded on an ended request", shutdown, errCoded, connect.CodeFailedPrecondition, "domain: not held"},
		{"coded unavailable", context.Background(), NewError(connect.CodeUnavailable, "domain: lease lost"), connect.CodeUnavailable, "domain: lease lost"},
		{"a connect error wins over a coded error", context.Background(), errors.Join(connect.NewError(connect.CodeAborted, errors.New("x")), errCoded), connect.CodeAborted, ""},
		{"no coded error: the shutdown's ctx.Err stays unavailable", shutdown, fmt.Errorf("release: %w", shutdown.Err()), connect.CodeUnavailable, ""},
		{"no coded error: a cancellation stays canceled", canceled, fmt.Errorf("release: %w", context.Canceled), connect.CodeCanceled, ""},
		{"no coded error: an unavailable backend stays unavailable", context.Background(), fmt.Errorf("release: %w", errDomain), connect.CodeUnavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Error(tt.ctx, tt.err)
			if got := connect.CodeOf(err); got != tt.want {
				t.Errorf("Error(%v) code = %v, want %v", tt.err, got, tt.want)
			}
			var ce *connect.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Error(%v) = %T, want a *connect.Error", tt.err, err)
			}
			if tt.wantMsg != "" && ce.Message() != tt.wantMsg {
				t.Errorf("Error(%v) message = %q, want %q", tt.err, ce.Message(), tt.wantMsg)
			}
			if code, ok := CodeOf(tt.err); ok && tt.ctx == context.Background() && code != tt.want {
				t.Errorf("CodeOf(%v) = %v, want %v, as Error", tt.err, code, tt.want)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("Error(%v) = %v, which does not wrap the error", tt.err, err)
			}
		})
	}
	if Ended(errCoded) || Ended(fmt.Errorf("w: %w", errCoded)) {
		t.Error("Ended(coded error) = true, want false: a domain's answer is not an ending")
	}
	if other := NewError(connect.CodeFailedPrecondition, "domain: not held"); errors.Is(other, errCoded) {
		t.Error("two sentinels of the same code and text are the same error; want each its own")
	}
}
