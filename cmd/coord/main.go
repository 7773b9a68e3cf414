// Command coord runs coordkit and talks to it: `coord serve` starts the services, `coord lock`
// is a CLI over the lock API, `coord bench` measures them against peers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `coord - distributed locks, IDs and task pick as a service

usage:
  coord serve [flags]                         run the services (embedded SQLite by default)
  coord lock acquire|release|renew|inspect    call the lock service
  coord id next|decode|tags|create-tag        call the ID service
  coord task put|pick|ack|nack|extend|...     call the task-pick service (get, stats, dead, requeue)
  coord bench lock [flags]                    benchmark the lock service against go-redsync
  coord bench id [flags]                      benchmark the ID service against bwmarrin/snowflake, google/uuid
  coord bench contend [flags]                 one hot key over two instances: handoffs, waits, fairness, against go-redsync
  coord bench task [flags]                    benchmark the task-pick service against hibiken/asynq

Run 'coord <command> -h' for a command's flags. Every flag falls back to a COORDKIT_* variable.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "coord:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stderr)
	case "lock":
		return runLock(ctx, args[1:], stdout, stderr)
	case "id":
		return runID(ctx, args[1:], stdout, stderr)
	case "task":
		return runTask(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
