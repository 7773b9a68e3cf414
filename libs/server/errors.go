package server

import (
	"context"
	"errors"
	"fmt"
	"os"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client/batch"
)

// ErrUnavailable is the one "backend unavailable" every service shares: each domain's own
// sentinel wraps it (lock.ErrUnavailable, workerid.ErrUnavailable, ...), so the edge answers
// unavailable for all of them without listing them.
var ErrUnavailable = errors.New("backend unavailable")

// Unavailable is how an engine reports that its backend failed: err wrapped as sentinel (a
// domain sentinel that wraps ErrUnavailable) and named after engine. When ctx has ended the
// failure is only the ending's echo, so context.Cause(ctx) is returned instead: the caller
// sees canceled or deadline_exceeded, or the server's shutdown (ErrShutdown, unavailable).
// err is kept as text, not wrapped, so a driver's own timeout cannot pass for the caller's
// deadline.
func Unavailable(ctx context.Context, sentinel error, engine string, err error) error {
	if err := batch.Ending(ctx); err != nil { // also a deadline passed, its timer pending
		return err
	}
	return fmt.Errorf("%w: %s: %v", sentinel, engine, err)
}

// Coded is an error that says which Connect code it reaches a client with: a sentinel made
// by NewError, or a domain's error type with a ConnectCode method (segment.BelowTombstone).
// A domain declares its errors' codes where it defines the errors, and Error, the one
// mapping, finds them anywhere in an error's chain.
type Coded interface {
	error
	// ConnectCode is the code of the error as the client gets it.
	ConnectCode() connect.Code
}

// NewError returns a sentinel error with text that Error answers with code however it is
// wrapped, as lock.ErrNotHeld is failed_precondition. Compare it with errors.Is.
func NewError(code connect.Code, text string) error {
	return &codedError{code: code, text: text}
}

// codedError is the error NewError returns.
type codedError struct {
	code connect.Code
	text string
}

func (e *codedError) Error() string { return e.text }

// ConnectCode implements Coded.
func (e *codedError) ConnectCode() connect.Code { return e.code }

// codedAs is the code of the first Coded error in err's chain.
func codedAs(err error) (connect.Code, bool) {
	var c Coded
	if errors.As(err, &c) {
		return c.ConnectCode(), true
	}
	return 0, false
}

// CodeOf is the Connect code err has without its request's context, and false for an error
// nobody gave one: a Connect error keeps its code; a Coded error, a domain's own, has its
// code, whatever else it is joined with (it is the backend's answer, which a cancellation
// that came with it does not undo); the server's shutdown and an unavailable backend are
// unavailable; a context's own ending is canceled or deadline_exceeded.
func CodeOf(err error) (connect.Code, bool) {
	var ce *connect.Error
	if err == nil {
		return 0, false
	}
	if errors.As(err, &ce) {
		return ce.Code(), true
	}
	if code, ok := codedAs(err); ok {
		return code, true
	}
	switch {
	case errors.Is(err, ErrShutdown), errors.Is(err, ErrUnavailable):
		return connect.CodeUnavailable, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return connect.CodeDeadlineExceeded, true
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, true
	}
	return 0, false
}

// Error is the one mapping from an error to the Connect error a client gets, for every
// service: err as a handler of a request with context ctx returns it, a Connect error with
// the code of CodeOf, or internal for an error nobody gave a code. A Connect error is
// returned as it is, and a Coded error keeps its code, the domain's answer. Otherwise, when
// err is ctx's own ending, the ending's cause decides, so a request ended by the server's
// shutdown is unavailable even when the code that saw it returned ctx.Err().
func Error(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if code, ok := codedAs(err); ok {
		return connect.NewError(code, err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		if cause := context.Cause(ctx); cause != ctxErr {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
	}
	code, ok := CodeOf(err)
	if !ok {
		code = connect.CodeInternal
	}
	return connect.NewError(code, err)
}

// Ended says whether err is a request that ended without a failure of the service: the
// caller canceled it or its deadline passed, or the server is shutting down. Logs and
// metrics keep these apart from backend failures.
func Ended(err error) bool {
	if errors.Is(err, ErrShutdown) {
		return true
	}
	code, ok := CodeOf(err)
	return ok && (code == connect.CodeCanceled || code == connect.CodeDeadlineExceeded)
}
