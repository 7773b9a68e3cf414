// Command coord runs coordkit and talks to it: `coord serve` starts the services, `coord lock`,
// `coord id` and `coord task` call them. The benchmarks are coordbench, in tools/bench.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	// Schedules name IANA time zones; the zone database is built in, so they load in a
	// scratch container with no /usr/share/zoneinfo.
	_ "time/tzdata"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and reports its failure, if any, as one line on stderr
// (a JSON object with --json); it returns the process exit code (see exitCode).
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		reportError(stderr, cmd, args, err)
	}
	return exitCode(err)
}

// run runs the command line args in-process, for tests: it returns the error main would
// report instead of printing it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(nil, stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
