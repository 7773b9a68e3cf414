package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// taskVerbs lists the `coord task` commands: their positional arguments (max -1: any number
// from min up), summary and flags.
var taskVerbs = []struct {
	verb, synopsis, short string
	min, max              int
	flags                 func(*pflag.FlagSet, *taskFlags)
}{
	{"put", "POOL ID", "add a task; an existing id, or a unique key another task holds, adds nothing", 2, 2, func(fs *pflag.FlagSet, f *taskFlags) {
		fs.StringVar(&f.payload, "payload", "", "the task's payload")
		fs.StringVar(&f.payloadFile, "payload-file", "", "read the payload from this file instead")
		fs.Int32Var(&f.priority, "priority", 0, "higher is picked first by --order priority")
		fs.DurationVar(&f.delay, "delay", 0, "not picked before this much time has passed")
		fs.Uint32Var(&f.maxAttempts, "max-attempts", 0, "picks before the task is dead; 0 means the pool's default, else the service's (25)")
		fs.StringVar(&f.unique, "unique", "", "a unique key: while another task of the pool holds it, print that task (a duplicate) instead of adding one")
		fs.StringVar(&f.uniqueScope, "unique-scope", "", "how long the key is held: queued (until first picked), active (until acked or dead; the default) or period")
		fs.DurationVar(&f.uniquePeriod, "unique-period", 0, "with --unique-scope period (implied): hold the key this long from the put")
	}},
	{"pick", "POOL", "lease tasks; prints each with the LEASE ack, nack and extend need", 1, 1, func(fs *pflag.FlagSet, f *taskFlags) {
		fs.Uint32Var(&f.count, "count", 1, "how many tasks at most, 1 to 100")
		fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "the lease, 1s to 12h")
		fs.StringVar(&f.order, "order", "fifo", "fifo, random or priority")
		fs.DurationVar(&f.wait, "wait", 0, "how long to wait for a task when none is available")
	}},
	{"ack", "POOL ID LEASE", "finish a picked task", 3, 3, nil},
	{"nack", "POOL ID LEASE", "give a picked task back, failed", 3, 3, func(fs *pflag.FlagSet, f *taskFlags) {
		fs.DurationVar(&f.retryAfter, "retry-after", 0, "how long until the task may be picked again; unset means the pool's retry policy")
		fs.StringVar(&f.reason, "reason", "", "why it failed, kept as the task's last error")
	}},
	{"extend", "POOL ID LEASE", "lengthen a picked task's lease", 3, 3, func(fs *pflag.FlagSet, f *taskFlags) {
		fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "the new lease from now, 1s to 12h")
	}},
	{"get", "POOL ID", "show one task", 2, 2, nil},
	{"stats", "POOL", "count a pool's tasks by state", 1, 1, nil},
	{"dead", "POOL", "list the dead tasks of a pool", 1, 1, func(fs *pflag.FlagSet, f *taskFlags) {
		fs.Uint32Var(&f.limit, "limit", 0, "how many tasks at most, 1 to 1000; 0 means 100")
	}},
	{"requeue", "POOL ID...", "make dead tasks available again", 2, -1, nil},
	{"cancel", "POOL ID", "cancel an available or delayed task: it never runs", 2, 2, nil},
}

// newTaskCmd builds `coord task` and its subcommands.
func newTaskCmd() *cobra.Command {
	cf := &clientFlags{}
	c := newGroupCmd("task", "call the task-pick service: put, pick, ack, nack, extend, get, stats, dead, requeue, cancel, pool, schedule")
	c.Long = `Call the task-pick service.

pick prints one line per task with its fencing token and its LEASE (TOKEN:SECRET, the token
and the lease's secret), which ack, nack and extend need: the secret is what proves the lease,
and only pick ever shows it. The CLI keeps no lease alive: a picked task comes back after its
ttl unless acked, nacked or extended.`
	cf.register(c, "task")
	for _, v := range taskVerbs {
		f := &taskFlags{cf: cf}
		sub := &cobra.Command{
			Use:   v.verb + " " + v.synopsis,
			Short: v.short,
			Args:  argsBetween(v.min, v.max, v.synopsis),
			RunE: func(cmd *cobra.Command, args []string) error {
				f.retryAfterSet = cmd.Flags().Changed("retry-after")
				if err := f.check(args, v.synopsis); err != nil {
					return usageErr(cmd, err)
				}
				return runTask(cmd, v.verb, f)
			},
		}
		if v.flags != nil {
			v.flags(sub.Flags(), f)
		}
		c.AddCommand(sub)
	}
	c.AddCommand(newTaskPoolCmd(cf))
	c.AddCommand(newTaskScheduleCmd(cf))
	return c
}

// orderNames maps the CLI's order names to the API's.
var orderNames = map[string]taskpickv1.Order{
	"fifo":     taskpickv1.Order_ORDER_FIFO,
	"random":   taskpickv1.Order_ORDER_RANDOM,
	"priority": taskpickv1.Order_ORDER_PRIORITY,
}

// parseOrder accepts a CLI order name, or the API's enum name (ORDER_RANDOM).
func parseOrder(s string) (taskpickv1.Order, error) {
	if o, ok := orderNames[strings.ToLower(s)]; ok {
		return o, nil
	}
	if v, ok := taskpickv1.Order_value[strings.ToUpper(s)]; ok && v != 0 {
		return taskpickv1.Order(v), nil
	}
	return 0, fmt.Errorf("--order: unknown order %q (fifo, random, priority)", s)
}

// formatLease is how pick prints a lease for ack, nack and extend: TOKEN:SECRET.
func formatLease(token uint64, secret string) string {
	return strconv.FormatUint(token, 10) + ":" + secret
}

// parseLease reads a LEASE argument, as formatLease printed it.
func parseLease(s string) (uint64, string, error) {
	tok, secret, ok := strings.Cut(s, ":")
	token, err := strconv.ParseUint(tok, 10, 64)
	if !ok || err != nil || token == 0 || secret == "" {
		return 0, "", fmt.Errorf("LEASE %q is not TOKEN:SECRET: pass the lease=… that pick printed", s)
	}
	return token, secret, nil
}

// taskFlags is everything one `coord task` command can be told.
type taskFlags struct {
	cf                        *clientFlags
	payload, payloadFile      string
	priority                  int32
	delay                     time.Duration
	maxAttempts, count, limit uint32
	ttl, wait, retryAfter     time.Duration
	retryAfterSet             bool
	order, reason             string
	orderValue                taskpickv1.Order
	unique, uniqueScope       string
	uniquePeriod              time.Duration
	uniqueScopeValue          taskpickv1.UniqueScope
	positional                []string
	pool, id                  string
	token                     uint64
	secret                    string
}

// check takes the positional arguments and checks what the flags cannot say alone.
func (f *taskFlags) check(positional []string, synopsis string) error {
	f.positional = positional
	f.pool = positional[0]
	if len(positional) > 1 {
		f.id = positional[1]
	}
	if synopsis == "POOL ID LEASE" {
		var err error
		if f.token, f.secret, err = parseLease(positional[2]); err != nil {
			return err
		}
	}
	if f.payload != "" && f.payloadFile != "" {
		return errors.New("--payload and --payload-file exclude each other")
	}
	if f.order != "" {
		var err error
		if f.orderValue, err = parseOrder(f.order); err != nil {
			return err
		}
	}
	return f.checkUnique()
}

// uniqueScopeNames maps the CLI's unique scope names to the API's.
var uniqueScopeNames = map[string]taskpickv1.UniqueScope{
	"queued": taskpickv1.UniqueScope_UNIQUE_SCOPE_QUEUED,
	"active": taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE,
	"period": taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD,
}

// checkUnique reads --unique-scope (a CLI name or the API's enum name); --unique-period
// alone means the period scope. What the service checks (a scope without a key, a period
// out of range) it answers itself.
func (f *taskFlags) checkUnique() error {
	if f.uniqueScope != "" {
		v, ok := uniqueScopeNames[strings.ToLower(f.uniqueScope)]
		if !ok {
			n, known := taskpickv1.UniqueScope_value[strings.ToUpper(f.uniqueScope)]
			if !known || n == 0 {
				return fmt.Errorf("--unique-scope: unknown scope %q (queued, active, period)", f.uniqueScope)
			}
			v = taskpickv1.UniqueScope(n)
		}
		f.uniqueScopeValue = v
	}
	if f.uniquePeriod != 0 && f.uniqueScope == "" {
		f.uniqueScopeValue = taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD
	}
	return nil
}

// runTask makes the call of verb and prints its response.
func runTask(cmd *cobra.Command, verb string, f *taskFlags) error {
	ctx, cancel := f.cf.callContext(cmd.Context(), f.wait)
	defer cancel()
	res, err := callTask(ctx, verb, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if f.cf.asJSON {
		return printJSON(cmd.OutOrStdout(), res)
	}
	return nil
}

// callTask makes the call of verb and, without --json, prints its human form; it returns the
// response for --json.
func callTask(ctx context.Context, verb string, f *taskFlags, stdout, stderr io.Writer) (proto.Message, error) {
	c, err := f.cf.client()
	if err != nil {
		return nil, err
	}
	tasks := c.Tasks()
	backend := f.cf.backend
	human := !f.cf.asJSON
	where := f.pool + "/" + f.id
	switch verb {
	case "put":
		payload := []byte(f.payload)
		if f.payloadFile != "" {
			b, err := os.ReadFile(f.payloadFile)
			if err != nil {
				return nil, fmt.Errorf("--payload-file: %w", err)
			}
			payload = b
		}
		nt := &taskpickv1.NewTask{Id: f.id, Payload: payload, Priority: f.priority, MaxAttempts: f.maxAttempts,
			UniqueKey: f.unique, UniqueScope: f.uniqueScopeValue}
		if f.delay > 0 {
			nt.RunAt = timestamppb.New(time.Now().Add(f.delay))
		}
		if f.uniquePeriod != 0 {
			nt.UniquePeriod = durationpb.New(f.uniquePeriod)
		}
		r, err := tasks.Put(ctx, &taskpickv1.PutRequest{Backend: backend, Pool: f.pool, Tasks: []*taskpickv1.NewTask{nt}})
		if err == nil && human {
			switch {
			case len(r.GetCreated()) == 1 && r.GetCreated()[0]:
				fmt.Fprintf(stdout, "put %s\n", where)
			case len(r.GetDuplicate()) == 1 && r.GetDuplicate()[0] && len(r.GetExistingId()) == 1 && len(r.GetExistingState()) == 1:
				fmt.Fprintf(stdout, "duplicate: %s/%s holds unique key %q (%s); %s not added\n", f.pool, r.GetExistingId()[0],
					f.unique, stateName(r.GetExistingState()[0]), f.id)
			default:
				fmt.Fprintf(stdout, "%s already exists: left unchanged\n", where)
			}
		}
		return r, err
	case "pick":
		r, err := tasks.Pick(ctx, &taskpickv1.PickRequest{
			Backend: backend, Pool: f.pool, Count: f.count, Ttl: durationpb.New(f.ttl), Order: f.orderValue, Wait: durationpb.New(f.wait),
		})
		if err == nil && human {
			for _, t := range r.GetTasks() {
				fmt.Fprintf(stdout, "%s  token=%d  lease=%s  attempt=%d/%d  priority=%d  expires=%s  payload=%s\n", t.GetId(), t.GetLeaseToken(),
					formatLease(t.GetLeaseToken(), t.GetLeaseSecret()), t.GetAttempt(), t.GetMaxAttempts(), t.GetPriority(), fmtTime(t.GetExpiresAt()), fmtPayload(t.GetPayload()))
			}
			if len(r.GetTasks()) == 0 {
				fmt.Fprintf(stderr, "no task available in %s\n", f.pool)
			}
		}
		return r, err
	case "ack":
		r, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: backend, Pool: f.pool, Id: f.id, LeaseToken: f.token, LeaseSecret: f.secret})
		if err == nil && human {
			fmt.Fprintf(stdout, "acked %s\n", where)
		}
		return r, err
	case "nack":
		req := &taskpickv1.NackRequest{Backend: backend, Pool: f.pool, Id: f.id, LeaseToken: f.token, LeaseSecret: f.secret, Reason: f.reason}
		if f.retryAfterSet {
			req.RetryAfter = durationpb.New(f.retryAfter)
		}
		r, err := tasks.Nack(ctx, req)
		if err == nil && human {
			switch {
			case r.GetDead():
				fmt.Fprintf(stdout, "nacked %s: dead, that was its last attempt\n", where)
			case f.retryAfterSet:
				fmt.Fprintf(stdout, "nacked %s: available again in %s\n", where, f.retryAfter)
			default:
				fmt.Fprintf(stdout, "nacked %s: available again as the pool's retry policy says\n", where)
			}
		}
		return r, err
	case "cancel":
		r, err := tasks.CancelTask(ctx, &taskpickv1.CancelTaskRequest{Backend: backend, Pool: f.pool, Id: f.id})
		if err == nil && human {
			fmt.Fprintf(stdout, "cancelled %s\n", where)
		}
		return r, err
	case "extend":
		r, err := tasks.Extend(ctx, &taskpickv1.ExtendRequest{Backend: backend, Pool: f.pool, Id: f.id, LeaseToken: f.token, LeaseSecret: f.secret, Ttl: durationpb.New(f.ttl)})
		if err == nil && human {
			fmt.Fprintf(stdout, "extended %s until %s\n", where, fmtTime(r.GetExpiresAt()))
		}
		return r, err
	case "get":
		r, err := tasks.Get(ctx, &taskpickv1.GetRequest{Backend: backend, Pool: f.pool, Id: f.id})
		if err == nil && human {
			printTask(stdout, r.GetTask(), "run-at")
		}
		return r, err
	case "stats":
		r, err := tasks.Stats(ctx, &taskpickv1.StatsRequest{Backend: backend, Pool: f.pool})
		if err == nil && human {
			fmt.Fprintf(stdout, "%s  available=%d  delayed=%d  leased=%d  dead=%d  done=%d  cancelled=%d  paused=%v  oldest-available-age=%s\n", f.pool,
				r.GetAvailable(), r.GetDelayed(), r.GetLeased(), r.GetDead(), r.GetDone(), r.GetCancelled(), r.GetPaused(),
				r.GetOldestAvailableAge().AsDuration().Round(time.Millisecond))
		}
		return r, err
	case "dead":
		r, err := tasks.ListDead(ctx, &taskpickv1.ListDeadRequest{Backend: backend, Pool: f.pool, Limit: f.limit})
		if err == nil && human {
			for _, t := range r.GetTasks() {
				printTask(stdout, t, "died")
			}
			if n := uint64(len(r.GetTasks())); n < r.GetTotal() {
				fmt.Fprintf(stderr, "%d of %d dead tasks shown\n", n, r.GetTotal())
			} else if n == 0 {
				fmt.Fprintf(stderr, "no dead tasks in %s\n", f.pool)
			}
		}
		return r, err
	case "requeue":
		ids := f.positional[1:]
		r, err := tasks.Requeue(ctx, &taskpickv1.RequeueRequest{Backend: backend, Pool: f.pool, Ids: ids})
		if err == nil && human {
			for i, ok := range r.GetRequeued() {
				if ok {
					fmt.Fprintf(stdout, "requeued %s/%s\n", f.pool, ids[i])
				} else {
					fmt.Fprintf(stdout, "not requeued %s/%s: not dead\n", f.pool, ids[i])
				}
			}
		}
		return r, err
	}
	return nil, fmt.Errorf("unknown task command %q", verb)
}

// printTask prints one task on one line; at names its run_at (when it runs, or died).
func printTask(w io.Writer, t *taskpickv1.Task, at string) {
	state := stateName(t.GetState())
	fmt.Fprintf(w, "%s  state=%s  attempt=%d/%d  failures=%d  recoveries=%d  priority=%d  %s=%s  payload=%s  last-error=%q\n",
		t.GetId(), state, t.GetAttempt(), t.GetMaxAttempts(), t.GetFailures(), t.GetRecoveries(), t.GetPriority(),
		at, fmtTime(t.GetRunAt()), fmtPayload(t.GetPayload()), t.GetLastError())
}

// maxShownPayload is how much of a payload the human output shows; --json shows it all.
const maxShownPayload = 100

// fmtPayload quotes a payload for one line, cut to maxShownPayload bytes.
func fmtPayload(p []byte) string {
	if len(p) <= maxShownPayload {
		return strconv.Quote(string(p))
	}
	return fmt.Sprintf("%q…(%d bytes)", p[:maxShownPayload], len(p))
}

// fmtTime prints a timestamp in local time, or - when unset.
func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().Local().Format(time.RFC3339Nano)
}

// stateName is how the CLI prints a task's state: available, leased, …; gone for a task that
// no longer exists (a duplicate of a period key that outlived its task).
func stateName(s taskpickv1.State) string {
	if s == taskpickv1.State_STATE_UNSPECIFIED {
		return "gone"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}
