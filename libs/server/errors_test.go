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
