package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/coordkit/coordkit/libs/client"
)

// Exit codes of coord, for scripts to branch on.
const (
	exitOK          = 0 // done
	exitNo          = 1 // the service's answer is no: lock not acquired, not found, failed precondition, ...
	exitUsage       = 2 // the command line is wrong: flag, argument, environment value, invalid_argument
	exitUnavailable = 3 // no answer: unreachable, unavailable, deadline exceeded, not authenticated
)

// errNotAcquired makes `coord lock acquire` exit 1 when the lock stayed taken, so scripts can
// branch on it.
var errNotAcquired = errors.New("not acquired")

// usageError is a mistake on the command line of cmd: it exits 2 with a pointer to the help.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErr wraps err as a usage error of cmd.
func usageErr(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} }

// exitStatus is the exit status of the command `coord lock run` ran: coord exits with it and
// prints err, when set (the command could not run), or nothing.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("command exited with status %d", e.code)
}

// exitCode maps the error a command returned to the process's exit code.
func exitCode(err error) int {
	var usage *usageError
	var status exitStatus
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &status):
		return status.code
	case errors.As(err, &usage):
		return exitUsage
	case errors.Is(err, errNotAcquired), errors.Is(err, client.ErrNotAcquired):
		return exitNo
	case errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return exitNo
	}
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return exitUsage
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnauthenticated,
		connect.CodeInternal, connect.CodeUnknown, connect.CodeUnimplemented, connect.CodeDataLoss,
		connect.CodeResourceExhausted, connect.CodeCanceled:
		return exitUnavailable
	}
	// failed_precondition, not_found, already_exists, permission_denied (the lock service's
	// "another owner holds it"), aborted.
	return exitNo
}

// errorCode names err's kind in --json error output: the Connect code, or not_acquired or
// not_serving, or invalid_argument for a usage error.
func errorCode(err error) string {
	var usage *usageError
	switch {
	case errors.As(err, &usage):
		return connect.CodeInvalidArgument.String()
	case errors.Is(err, errNotAcquired), errors.Is(err, client.ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, errNotServing):
		return "not_serving"
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded.String()
	}
	return connect.CodeOf(err).String()
}

// reportError prints err as one line on stderr: `coord: message`, or with --json the object
// {"code": ..., "message": ...}; a usage error adds a line pointing to the command's help. A
// command's own exit status prints nothing.
func reportError(stderr io.Writer, cmd *cobra.Command, args []string, err error) {
	var status exitStatus
	if errors.As(err, &status) && status.err == nil {
		return
	}
	msg := err.Error()
	var usage *usageError
	if errors.As(err, &usage) && usage.cmd != nil {
		cmd = usage.cmd
	}
	if (cmd != nil && jsonFlag(cmd)) || jsonArg(args) {
		if ce, ok := err.(*connect.Error); ok {
			msg = ce.Message() // the code is a field of its own
		}
		b, _ := json.Marshal(struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{errorCode(err), msg})
		fmt.Fprintln(stderr, string(b))
		return
	}
	fmt.Fprintln(stderr, "coord: "+strings.TrimSpace(msg))
	if usage != nil && cmd != nil {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}

// jsonArg reports whether args ask for --json before any --: the flag itself may be left
// unparsed, after a bad flag.
func jsonArg(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true":
			return true
		}
	}
	return false
}

// jsonFlag reports whether cmd runs with --json.
func jsonFlag(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("json")
	return f != nil && f.Value.String() == "true"
}
