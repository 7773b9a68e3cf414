package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// poolFlags is everything one `coord task pool` command can be told.
type poolFlags struct {
	cf                    *clientFlags
	pool                  string
	retryInitial          time.Duration
	retryMax              time.Duration
	retryMultiplier       float64
	retryJitter           float64
	maxAttempts           uint32
	maxLeased             uint32
	rate                  float64
	burst                 uint32
	maxAttemptsSet, noSet bool
}

// newTaskPoolCmd builds `coord task pool` and its subcommands, which share the task
// command's client flags (cf).
func newTaskPoolCmd(cf *clientFlags) *cobra.Command {
	c := newGroupCmd("pool", "show or change a pool's settings: get, set, pause, resume")
	c.Long = `Show or change a pool's settings.

set replaces the pool's retry policy, default max attempts and limit as a whole (what it is
not told is unset): --max-leased caps how many of the pool's tasks are leased at once across
every worker (picks over it wait for a place; 0 means no limit), --rate how many are leased
per second (a token bucket of --burst tokens, shared by every instance; 0 means no limit);
with --retry-initial, a Nack without --retry-after makes the task wait
min(--retry-max, initial × multiplier^(attempt-1)), less up to --retry-jitter of it at random.
pause stops picks of the pool until resume; waiting picks keep waiting and resume wakes them.`
	verbs := []struct {
		verb, short string
		flags       func(*cobra.Command, *poolFlags)
	}{
		{"get", "show a pool's settings (the defaults when none are stored)", nil},
		{"set", "store a pool's retry policy, default max attempts and limits", func(cmd *cobra.Command, f *poolFlags) {
			fs := cmd.Flags()
			fs.DurationVar(&f.retryInitial, "retry-initial", 0, "the delay after a first failed attempt; unset means no retry policy (retry at once)")
			fs.DurationVar(&f.retryMax, "retry-max", 0, "the longest delay, at least --retry-initial; unset means 30 days")
			fs.Float64Var(&f.retryMultiplier, "retry-multiplier", 0, "how much each attempt multiplies the delay, 1 to 100; 0 means 2")
			fs.Float64Var(&f.retryJitter, "retry-jitter", 0, "how much of each delay is random, 0 to 1")
			fs.Uint32Var(&f.maxAttempts, "max-attempts", 0, "picks before a task put without --max-attempts is dead, 1 to 1000; unset means the service's default (25)")
			fs.Uint32Var(&f.maxLeased, "max-leased", 0, "the most tasks of the pool leased at once, across every worker; 0 means no limit")
			fs.Float64Var(&f.rate, "rate", 0, "the most tasks of the pool leased per second, across every worker; 0 means no rate limit")
			fs.Uint32Var(&f.burst, "burst", 0, "with --rate: how many tasks may be leased at once after a quiet while; 0 means 1")
		}},
		{"pause", "stop picks of a pool until resume", nil},
		{"resume", "let picks of a paused pool go on, waking waiting picks", nil},
	}
	for _, v := range verbs {
		f := &poolFlags{cf: cf}
		sub := &cobra.Command{
			Use:   v.verb + " POOL",
			Short: v.short,
			Args:  argsBetween(1, 1, "POOL"),
			RunE: func(cmd *cobra.Command, args []string) error {
				f.pool = args[0]
				f.maxAttemptsSet = cmd.Flags().Changed("max-attempts")
				ctx, cancel := f.cf.callContext(cmd.Context(), 0)
				defer cancel()
				res, err := callPool(ctx, v.verb, f, cmd.OutOrStdout())
				if err != nil {
					return err
				}
				if f.cf.asJSON {
					return printJSON(cmd.OutOrStdout(), res)
				}
				return nil
			},
		}
		if v.flags != nil {
			v.flags(sub, f)
		}
		c.AddCommand(sub)
	}
	return c
}

// callPool makes the call of a `coord task pool` verb and, without --json, prints its human
// form; it returns the response for --json.
func callPool(ctx context.Context, verb string, f *poolFlags, stdout io.Writer) (proto.Message, error) {
	c, err := f.cf.client()
	if err != nil {
		return nil, err
	}
	tasks := c.Tasks()
	backend := f.cf.backend
	human := !f.cf.asJSON
	switch verb {
	case "get":
		r, err := tasks.GetPoolSettings(ctx, &taskpickv1.GetPoolSettingsRequest{Backend: backend, Pool: f.pool})
		if err == nil && human {
			printSettings(stdout, f.pool, r.GetSettings())
		}
		return r, err
	case "set":
		s := &taskpickv1.PoolSettings{MaxLeased: f.maxLeased, Rate: f.rate, Burst: f.burst}
		if f.maxAttemptsSet {
			s.MaxAttempts = &f.maxAttempts
		}
		if f.retryInitial != 0 || f.retryMax != 0 || f.retryMultiplier != 0 || f.retryJitter != 0 {
			s.Retry = &taskpickv1.RetryPolicy{Initial: durationpb.New(f.retryInitial), Multiplier: f.retryMultiplier, Jitter: f.retryJitter}
			if f.retryMax != 0 {
				s.Retry.Max = durationpb.New(f.retryMax)
			}
		}
		r, err := tasks.SetPoolSettings(ctx, &taskpickv1.SetPoolSettingsRequest{Backend: backend, Pool: f.pool, Settings: s})
		if err == nil && human {
			printSettings(stdout, f.pool, r.GetSettings())
		}
		return r, err
	case "pause":
		r, err := tasks.PausePool(ctx, &taskpickv1.PausePoolRequest{Backend: backend, Pool: f.pool})
		if err == nil && human {
			fmt.Fprintf(stdout, "paused %s\n", f.pool)
		}
		return r, err
	case "resume":
		r, err := tasks.ResumePool(ctx, &taskpickv1.ResumePoolRequest{Backend: backend, Pool: f.pool})
		if err == nil && human {
			fmt.Fprintf(stdout, "resumed %s\n", f.pool)
		}
		return r, err
	}
	return nil, fmt.Errorf("unknown pool command %q", verb)
}

// printSettings prints a pool's settings on one line.
func printSettings(w io.Writer, pool string, s *taskpickv1.PoolSettings) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  paused=%v", pool, s.GetPaused())
	if s.MaxAttempts != nil {
		fmt.Fprintf(&b, "  max-attempts=%d", s.GetMaxAttempts())
	} else {
		b.WriteString("  max-attempts=default")
	}
	if n := s.GetMaxLeased(); n != 0 {
		fmt.Fprintf(&b, "  max-leased=%d", n)
	} else {
		b.WriteString("  max-leased=none")
	}
	if r := s.GetRate(); r != 0 {
		fmt.Fprintf(&b, "  rate=%g/s burst=%d", r, max(s.GetBurst(), 1))
	} else {
		b.WriteString("  rate=none")
	}
	if r := s.GetRetry(); r != nil {
		fmt.Fprintf(&b, "  retry=%s×%g up to %s, jitter %g", r.GetInitial().AsDuration(), r.GetMultiplier(), r.GetMax().AsDuration(), r.GetJitter())
	} else {
		b.WriteString("  retry=at once")
	}
	fmt.Fprintln(w, b.String())
}
