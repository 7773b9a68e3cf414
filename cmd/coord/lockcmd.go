package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/config"
)

// newLockCmd builds `coord lock` and its subcommands.
func newLockCmd() *cobra.Command {
	cf := &clientFlags{}
	c := newGroupCmd("lock", "call the lock service: acquire, release, renew, inspect, watch, run",
		newLockAcquireCmd(cf), newLockReleaseCmd(cf), newLockRenewCmd(cf), newLockInspectCmd(cf), newLockWatchCmd(cf), newLockRunCmd(cf))
	c.Long = `Call the lock service.

acquire, release and renew keep no watchdog: a lock acquired this way lasts for its ttl unless
renewed or released. lock run holds a lock for as long as a command runs, renewing it.`
	cf.register(c, "lock")
	return c
}

func newLockAcquireCmd(cf *clientFlags) *cobra.Command {
	var ttl, wait time.Duration
	var fair bool
	var owner string
	c := &cobra.Command{
		Use:   "acquire KEY",
		Short: "take a lock; exit 1 when it stays taken",
		Long: `Take the lock KEY and print its lease: the owner secret (release, renew and re-entry need
it) and the fencing token. Exits 1, printing the holder, when the lock stays taken for --wait.`,
		Example: `  coord lock acquire order:42 --ttl 1m --wait 5s
  owner=$(coord lock acquire order:42 --json | jq -r .lease.owner)`,
		Args: argsExactly("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			ctx, cancel := cf.callContext(cmd.Context(), wait)
			defer cancel()
			r, err := c.Locks().Acquire(ctx, &lockv1.AcquireRequest{
				Key: args[0], Fair: fair, Backend: cf.backend, Owner: owner, Ttl: durationpb.New(ttl), Wait: durationpb.New(wait),
			})
			if err != nil {
				return err
			}
			if cf.asJSON {
				err = printJSON(cmd.OutOrStdout(), r)
			} else {
				printAcquire(cmd.OutOrStdout(), r)
			}
			if err == nil && !r.GetAcquired() {
				return errNotAcquired
			}
			return err
		},
	}
	c.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "lease length")
	c.Flags().DurationVar(&wait, "wait", 0, "how long to wait for a taken lock")
	c.Flags().BoolVar(&fair, "fair", false, "wait in line, first come first served across instances (with --wait)")
	c.Flags().StringVar(&owner, "owner", "", "owner secret (16+ bytes) to acquire as, to re-enter a lock it holds; empty makes a fresh one")
	return c
}

func newLockReleaseCmd(cf *clientFlags) *cobra.Command {
	var owner string
	var fencingToken uint64
	c := &cobra.Command{
		Use:   "release KEY --owner SECRET",
		Short: "release one hold of a lock",
		Args:  argsExactly("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if owner == "" {
				return usageErr(cmd, errors.New("--owner is required: the owner secret acquire printed"))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			ctx, cancel := cf.callContext(cmd.Context(), 0)
			defer cancel()
			r, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: args[0], Backend: cf.backend, Owner: owner, FencingToken: fencingToken})
			if err != nil {
				return err
			}
			if cf.asJSON {
				return printJSON(cmd.OutOrStdout(), r)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "released %s (%d holds left)\n", args[0], r.GetHoldCount())
			return err
		},
	}
	c.Flags().StringVar(&owner, "owner", "", "owner secret of the lease (required)")
	c.Flags().Uint64Var(&fencingToken, "fencing-token", 0, "the lease's fencing token: the release then fails rather than drop a hold of a newer lease")
	// `coord lock run` gives its command COORDKIT_FENCING_TOKEN for its own lease: a release
	// of another lock inside that command must not check against it.
	config.NoEnv(c.Flags(), "fencing-token")
	return c
}

func newLockRenewCmd(cf *clientFlags) *cobra.Command {
	var owner string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "renew KEY --owner SECRET",
		Short: "extend a held lease",
		Args:  argsExactly("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if owner == "" {
				return usageErr(cmd, errors.New("--owner is required: the owner secret acquire printed"))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			ctx, cancel := cf.callContext(cmd.Context(), 0)
			defer cancel()
			r, err := c.Locks().Renew(ctx, &lockv1.RenewRequest{Key: args[0], Backend: cf.backend, Owner: owner, Ttl: durationpb.New(ttl)})
			if err != nil {
				return err
			}
			if cf.asJSON {
				return printJSON(cmd.OutOrStdout(), r)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "renewed %s until %s\n", args[0], r.GetLease().GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano))
			return err
		},
	}
	c.Flags().StringVar(&owner, "owner", "", "owner secret of the lease (required)")
	c.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "new lease length, from now")
	return c
}

func newLockInspectCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect KEY",
		Short: "show who holds a lock, without its owner secret",
		Args:  argsExactly("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			ctx, cancel := cf.callContext(cmd.Context(), 0)
			defer cancel()
			r, err := c.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: args[0], Backend: cf.backend})
			if err != nil {
				return err
			}
			if cf.asJSON {
				return printJSON(cmd.OutOrStdout(), r)
			}
			printState(cmd.OutOrStdout(), r.GetState())
			return nil
		},
	}
}

func newLockWatchCmd(cf *clientFlags) *cobra.Command {
	var prefix string
	c := &cobra.Command{
		Use:   "watch KEY | --prefix P",
		Short: "print a lock's state, then one line per event, until interrupted",
		Long: `Print the state of KEY (or of every key starting with --prefix), then one line per acquire,
release and expiry, until interrupted (exit 0). --timeout does not apply.`,
		Args: argsBetween(0, 1, "one KEY or --prefix P"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (prefix != "") {
				return usageErr(cmd, errors.New("watch wants one KEY or --prefix P"))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			req := &lockv1.WatchRequest{Prefix: prefix, Backend: cf.backend}
			if len(args) == 1 {
				req.Key = args[0]
			}
			return watchLocks(cmd.Context(), c, req, cf.asJSON, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&prefix, "prefix", "", "every key starting with this, instead of one KEY")
	return c
}

// watchLocks prints a Watch stream, one line per message, until ctx ends (Ctrl-C: exit 0)
// or the stream fails.
func watchLocks(ctx context.Context, c *client.Client, req *lockv1.WatchRequest, asJSON bool, stdout io.Writer) error {
	for msg, err := range c.Watch(ctx, req) {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if asJSON {
			if err := printJSON(stdout, msg); err != nil {
				return err
			}
			continue
		}
		if st := msg.GetState(); st != nil {
			if st.GetHeld() {
				fmt.Fprintf(stdout, "state    %s on %s: held by %s (fencing token %d, expires %s)\n", st.GetKey(), st.GetBackend(),
					st.GetHolderId(), st.GetFencingToken(), st.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano))
			} else {
				fmt.Fprintf(stdout, "state    %s on %s: free\n", st.GetKey(), st.GetBackend())
			}
		}
		if ev := msg.GetEvent(); ev != nil {
			kind := strings.ToLower(strings.TrimPrefix(ev.GetKind().String(), "LOCK_EVENT_KIND_"))
			fmt.Fprintf(stdout, "%-8s %s on %s: holder %s, fencing token %d\n", kind, ev.GetKey(), ev.GetBackend(), ev.GetHolderId(), ev.GetFencingToken())
		}
	}
	return nil
}

func printAcquire(w io.Writer, r *lockv1.AcquireResponse) {
	if !r.GetAcquired() {
		h := r.GetHolder()
		fmt.Fprintf(w, "not acquired: %s on %s is held by %s (fencing token %d, %d holds, expires in %s)\n",
			h.GetKey(), h.GetBackend(), h.GetHolderId(), h.GetFencingToken(), h.GetHoldCount(),
			time.Until(h.GetExpiresAt().AsTime()).Round(time.Millisecond))
		return
	}
	l := r.GetLease()
	fmt.Fprintf(w, "acquired %s on %s\n", l.GetKey(), l.GetBackend())
	fmt.Fprintf(w, "  owner          %s   (keep it: release, renew and re-entry need it)\n", l.GetOwner())
	fmt.Fprintf(w, "  fencing token  %d\n", l.GetFencingToken())
	fmt.Fprintf(w, "  hold count     %d\n", l.GetHoldCount())
	fmt.Fprintf(w, "  expires at     %s\n", l.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano))
}

func printState(w io.Writer, st *lockv1.LockState) {
	if !st.GetHeld() {
		fmt.Fprintf(w, "%s on %s is free\n", st.GetKey(), st.GetBackend())
		return
	}
	fmt.Fprintf(w, "%s on %s is held\n", st.GetKey(), st.GetBackend())
	fmt.Fprintf(w, "  holder id      %s\n", st.GetHolderId())
	fmt.Fprintf(w, "  fencing token  %d\n", st.GetFencingToken())
	fmt.Fprintf(w, "  hold count     %d\n", st.GetHoldCount())
	fmt.Fprintf(w, "  expires at     %s (in %s)\n", st.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano),
		time.Until(st.GetExpiresAt().AsTime()).Round(time.Millisecond))
}
