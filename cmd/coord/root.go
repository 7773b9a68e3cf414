package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coordkit/coordkit/libs/config"
)

// newRootCmd builds the whole command tree, writing to stdout and stderr and reading stdin
// (nil: the process's).
func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "coord",
		Short: "distributed locks, IDs and task pick as a service",
		Long: `coord runs coordkit (coord serve) and calls it (coord lock, id, task, health).

Every flag falls back to an environment variable, COORDKIT_ and the flag's name in upper case
with - as _ (--redis-addr: COORDKIT_REDIS_ADDR): a flag given on the command line wins, then
the variable, then the default. Only the flags of the command that runs read the environment.

Exit codes: 0 ok; 1 the answer is no (lock not acquired, not found, failed precondition);
2 usage (bad flag, argument or value); 3 the service could not answer (unavailable, deadline
exceeded, not authenticated).`,
		Version:           versionString(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		Args:              subcommandArgs,
		RunE:              showHelp,
		PersistentPreRunE: applyEnv,
	}
	if stdin != nil {
		root.SetIn(stdin)
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageErr(cmd, err) })
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddGroup(
		&cobra.Group{ID: "server", Title: "Run coordkit:"},
		&cobra.Group{ID: "client", Title: "Call a coordkit service:"},
		&cobra.Group{ID: "other", Title: "Other commands:"},
	)
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	for _, c := range []*cobra.Command{newServeCmd()} {
		c.GroupID = "server"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newLockCmd(), newIDCmd(), newTaskCmd(), newHealthCmd()} {
		c.GroupID = "client"
		root.AddCommand(c)
	}
	v := newVersionCmd()
	v.GroupID = "other"
	root.AddCommand(v)
	annotateEnv(root)
	return root
}

// annotateEnv appends each flag's environment variable to its help text, in the whole tree.
func annotateEnv(cmd *cobra.Command) {
	config.AnnotateEnv(cmd.LocalFlags()) // a command's own flags, its persistent ones included
	for _, c := range cmd.Commands() {
		annotateEnv(c)
	}
}

// applyEnv fills the flags of the command that runs, and only those, from their COORDKIT_*
// variables (cobra runs the root's PersistentPreRunE for every command). A bad value is a
// usage error naming the variable.
func applyEnv(cmd *cobra.Command, _ []string) error {
	if err := config.ApplyEnv(cmd.Flags()); err != nil {
		return usageErr(cmd, err)
	}
	return nil
}

// newGroupCmd returns a command that only holds subcommands: alone it prints its help, with
// an unknown subcommand it is a usage error.
func newGroupCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: subcommandArgs, RunE: showHelp}
	c.AddCommand(subs...)
	return c
}

// subcommandArgs rejects an argument to a command that takes only subcommands, suggesting the
// closest one.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return usageErr(cmd, fmt.Errorf("%s", msg))
}

// showHelp prints the help of a command that was given no subcommand.
func showHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// argsExactly wants exactly the positional arguments named in names, such as "POOL", "ID".
func argsExactly(names ...string) cobra.PositionalArgs {
	return argsBetween(len(names), len(names), strings.Join(names, " "))
}

// argsBetween wants from min to max positional arguments (max < 0: no upper bound);
// synopsis names them in the error.
func argsBetween(min, max int, synopsis string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || (max >= 0 && len(args) > max) {
			if synopsis == "" {
				return usageErr(cmd, fmt.Errorf("%s takes no arguments, got %q", cmd.Name(), args))
			}
			return usageErr(cmd, fmt.Errorf("%s wants %s, got %d arguments", cmd.Name(), synopsis, len(args)))
		}
		return nil
	}
}
