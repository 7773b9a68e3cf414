// Command coordbench measures coordkit against the libraries people use instead (go-redsync,
// hibiken/asynq, bwmarrin/snowflake, google/uuid) on the real backends. It drives a coord
// binary (--coord) or the services' Go packages, and is kept out of coord so that coord links
// none of the peers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coordkit/coordkit/libs/config"
	"github.com/coordkit/coordkit/libs/sqldb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordbench: "+strings.TrimSpace(err.Error()))
		var usage *usageError
		if errors.As(err, &usage) {
			fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", usage.cmd.CommandPath())
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run runs the command line args and returns its error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newBenchCmd()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	defer removeBuiltCoord()
	return root.ExecuteContext(ctx)
}

// usageError is a mistake on the command line of cmd: coordbench exits 2.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErr wraps err as a usage error of cmd.
func usageErr(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} }

// argsExactly wants no positional arguments.
func argsExactly() cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErr(cmd, fmt.Errorf("%s takes no arguments, got %q", cmd.Name(), args))
		}
		return nil
	}
}

// splitList splits a comma-separated flag value, dropping empty items and spaces.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// newBenchCmd builds coordbench and its subcommands.
func newBenchCmd() *cobra.Command {
	c := &cobra.Command{
		Use:           "coordbench",
		Short:         "measure coordkit against peer libraries",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr(cmd, fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
			}
			return nil
		},
		RunE:              func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		// Every flag falls back to its COORDKIT_* variable, as coord's do.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags()); err != nil {
				return usageErr(cmd, err)
			}
			return nil
		},
	}
	c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageErr(cmd, err) })
	c.Long = `Measure coordkit against the libraries people use instead, on the real backends. Each command
prints a table, or JSON with --json; all runs them all and writes the Markdown report
docs/benchmarks.md (make bench). lock and contend run the service as coord serve child
processes of the coord binary --coord names (default: built from this repository with go
build); id and task open the services' Go packages in this process.`

	lock := &cobra.Command{Use: "lock", Short: "acquire+release pairs/s, latency and CPU per pair of the lock service, against go-redsync", Args: argsExactly()}
	lock.Long = `Measure acquire+release pairs per second and the latency of one pair through the lock service,
per backend, next to go-redsync on the same Redis nodes, at each number of clients.

The service runs as a child process (the --coord binary as coord serve on a loopback port), so that
the CPU time one pair costs can be told apart: cpu/pair client (this process), service, backend
(redis-server; the three Redlock nodes summed; mariadbd; PostgreSQL's postmaster with its
connection processes; ZooKeeper's JVM; none for SQLite, which lives in the service) and their total, from /proc/<pid>/stat at the start and the end
of each measured window, divided by the pairs completed in it. redsync has no service. A
process that cannot be found (a backend on another machine or in a container, --server
without --server-pid) shows as -. --in-process runs the service in this process instead, for
--cpuprofile; client and service are then one column.`
	lockCfg := benchLockFlags(lock.Flags())
	lock.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := lockCfg()
		if err != nil {
			return usageErr(cmd, err)
		}
		return benchLock(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}

	id := &cobra.Command{Use: "id", Short: "the ID service against bwmarrin/snowflake and google/uuid", Args: argsExactly()}
	idCfg := benchIDFlags(id.Flags())
	idSync := sqliteSyncFlag(id.Flags())
	id.RunE = func(cmd *cobra.Command, _ []string) error {
		mode, err := sqldb.ParseSynchronous(*idSync)
		if err != nil {
			return usageErr(cmd, err)
		}
		cfg := *idCfg
		cfg.sqliteSync = mode
		return benchID(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}

	contend := &cobra.Command{Use: "contend", Short: "one hot key over two instances: handoffs, waits, fairness, against go-redsync", Args: argsExactly()}
	contendCfg := benchContendFlags(contend.Flags())
	contend.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := contendCfg()
		if err != nil {
			return usageErr(cmd, err)
		}
		return benchContend(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}

	task := &cobra.Command{Use: "task", Short: "the task-pick service against hibiken/asynq", Args: argsExactly()}
	taskCfg := benchTaskFlags(task.Flags())
	taskSync := sqliteSyncFlag(task.Flags())
	task.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := taskCfg()
		if err != nil {
			return usageErr(cmd, err)
		}
		if cfg.sqliteSync, err = sqldb.ParseSynchronous(*taskSync); err != nil {
			return usageErr(cmd, err)
		}
		return benchTask(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}

	all := &cobra.Command{Use: "all", Short: "every benchmark above with its peers, shorter runs, and a Markdown report (make bench)", Args: argsExactly()}
	all.Long = `Run lock, id, task and contend one after another, each with its own defaults (the dev backends
of deploy/dev) except for the shorter runs set here, print their tables, and write one Markdown
report with the machine, the backend and peer versions, the date, the commit and the command of
every table. COORDKIT_* variables apply to the flags below only.`
	allCfg := benchAllFlags(all.Flags())
	all.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := allCfg()
		if err != nil {
			return usageErr(cmd, err)
		}
		cmdline := []string{cmd.CommandPath()}
		cmd.Flags().Visit(func(f *pflag.Flag) { cmdline = append(cmdline, "--"+f.Name, f.Value.String()) })
		return benchAll(cmd.Context(), cfg, strings.Join(cmdline, " "), cmd.OutOrStdout(), cmd.ErrOrStderr())
	}

	c.AddCommand(lock, id, contend, task, all)
	for _, sub := range c.Commands() {
		config.AnnotateEnv(sub.LocalFlags())
	}
	return c
}

// sqliteSyncFlag adds --sqlite-synchronous, how the bench's in-process SQLite stores sync
// their commits, to fs.
func sqliteSyncFlag(fs *pflag.FlagSet) *string {
	return fs.String("sqlite-synchronous", "full", "how the in-process SQLite stores sync commits: full or normal (see coord serve --sqlite-synchronous)")
}
