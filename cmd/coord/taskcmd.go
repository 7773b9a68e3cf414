package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/config"
	taskpickv1 "github.com/coordkit/coordkit/proto/gen/coordkit/taskpick/v1"
)

const taskUsage = `usage:
  coord task put     POOL ID [--payload STR | --payload-file F] [--priority N] [--delay D] [--max-attempts N] [flags]
  coord task pick    POOL [--count 1] [--ttl 30s] [--order fifo|random|priority] [--wait 0s] [flags]
  coord task ack     POOL ID TOKEN [flags]
  coord task nack    POOL ID TOKEN [--retry-after 0s] [--reason TEXT] [flags]
  coord task extend  POOL ID TOKEN [--ttl 30s] [flags]
  coord task get     POOL ID [flags]
  coord task stats   POOL [flags]
  coord task dead    POOL [--limit 100] [flags]
  coord task requeue POOL ID... [flags]

pick prints one line per task with its lease TOKEN, which ack, nack and extend need; the CLI
keeps no lease alive: a picked task comes back after its ttl unless acked, nacked or extended.
Common flags: --server URL, --backend NAME, --json, --timeout D.
`

// taskArgs says how many positional arguments each task command takes (max -1: any number
// from min up).
var taskArgs = map[string]struct {
	min, max int
	synopsis string
}{
	"put":     {2, 2, "POOL ID"},
	"pick":    {1, 1, "POOL"},
	"ack":     {3, 3, "POOL ID TOKEN"},
	"nack":    {3, 3, "POOL ID TOKEN"},
	"extend":  {3, 3, "POOL ID TOKEN"},
	"get":     {2, 2, "POOL ID"},
	"stats":   {1, 1, "POOL"},
	"dead":    {1, 1, "POOL"},
	"requeue": {2, -1, "POOL ID..."},
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

// taskFlags is everything `coord task` can be told.
type taskFlags struct {
	serverURL, backend        string
	asJSON                    bool
	timeout                   time.Duration
	payload, payloadFile      string
	priority                  int
	delay                     time.Duration
	maxAttempts, count, limit uint
	ttl, wait, retryAfter     time.Duration
	order, reason             string
	positional                []string
	pool, id                  string
	token                     uint64
}

// parseTaskFlags parses the flags and positional arguments of `coord task VERB`.
func parseTaskFlags(verb string, args []string, stderr io.Writer) (*taskFlags, error) {
	spec := taskArgs[verb]
	fs := flag.NewFlagSet("task "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = config.Usage(fs, "coord task "+verb+" "+spec.synopsis+" [flags]")
	f := &taskFlags{}
	fs.StringVar(&f.serverURL, "server", "http://127.0.0.1:8080", "base URL of a coordkit service")
	fs.StringVar(&f.backend, "backend", "", "task backend; empty means the service's default")
	fs.BoolVar(&f.asJSON, "json", false, "print the response as JSON")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "deadline for the call, on top of --wait")
	fs.StringVar(&f.payload, "payload", "", "put: the task's payload")
	fs.StringVar(&f.payloadFile, "payload-file", "", "put: read the payload from this file instead")
	fs.IntVar(&f.priority, "priority", 0, "put: higher is picked first by --order priority")
	fs.DurationVar(&f.delay, "delay", 0, "put: not picked before this much time has passed")
	fs.UintVar(&f.maxAttempts, "max-attempts", 0, "put: picks before the task is dead; 0 means the service's default (25)")
	fs.UintVar(&f.count, "count", 1, "pick: how many tasks at most, 1 to 100")
	fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "pick, extend: the lease, 1s to 12h")
	fs.StringVar(&f.order, "order", "fifo", "pick: fifo, random or priority")
	fs.DurationVar(&f.wait, "wait", 0, "pick: how long to wait for a task when none is available")
	fs.DurationVar(&f.retryAfter, "retry-after", 0, "nack: how long until the task may be picked again")
	fs.StringVar(&f.reason, "reason", "", "nack: why it failed, kept as the task's last error")
	fs.UintVar(&f.limit, "limit", 0, "dead: how many tasks at most, 1 to 1000; 0 means 100")
	positional, err := parsePositional(fs, args)
	if err != nil {
		return nil, err
	}
	if len(positional) < spec.min || (spec.max >= 0 && len(positional) > spec.max) {
		fs.Usage()
		return nil, fmt.Errorf("task %s wants %s, got %d arguments", verb, spec.synopsis, len(positional))
	}
	f.positional = positional
	f.pool = positional[0]
	if len(positional) > 1 {
		f.id = positional[1]
	}
	if spec.synopsis == "POOL ID TOKEN" {
		if f.token, err = strconv.ParseUint(positional[2], 10, 64); err != nil || f.token == 0 {
			return nil, fmt.Errorf("TOKEN %q is not a positive integer: pass the lease token pick printed", positional[2])
		}
	}
	if f.payload != "" && f.payloadFile != "" {
		return nil, errors.New("--payload and --payload-file exclude each other")
	}
	if f.count > 1<<32-1 || f.maxAttempts > 1<<32-1 || f.limit > 1<<32-1 {
		return nil, errors.New("--count, --max-attempts and --limit must fit in 32 bits")
	}
	return f, nil
}

func runTask(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, taskUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	if _, ok := taskArgs[verb]; !ok {
		fmt.Fprint(stderr, taskUsage)
		return fmt.Errorf("unknown task command %q", verb)
	}
	f, err := parseTaskFlags(verb, args[1:], stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout+f.wait)
	defer cancel()
	res, err := callTask(ctx, verb, f, stdout, stderr)
	if err != nil {
		return err
	}
	if f.asJSON {
		out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(out))
	}
	return nil
}

// callTask makes the call of verb and, without --json, prints its human form; it returns the
// response for --json.
func callTask(ctx context.Context, verb string, f *taskFlags, stdout, stderr io.Writer) (proto.Message, error) {
	tasks := client.New(f.serverURL).Tasks()
	human := !f.asJSON
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
		nt := &taskpickv1.NewTask{Id: f.id, Payload: payload, Priority: int32(f.priority), MaxAttempts: uint32(f.maxAttempts)}
		if f.priority != int(nt.Priority) {
			return nil, fmt.Errorf("--priority %d does not fit in 32 bits", f.priority)
		}
		if f.delay > 0 {
			nt.RunAt = timestamppb.New(time.Now().Add(f.delay))
		}
		r, err := tasks.Put(ctx, &taskpickv1.PutRequest{Backend: f.backend, Pool: f.pool, Tasks: []*taskpickv1.NewTask{nt}})
		if err == nil && human {
			if len(r.GetCreated()) == 1 && r.GetCreated()[0] {
				fmt.Fprintf(stdout, "put %s\n", where)
			} else {
				fmt.Fprintf(stdout, "%s already exists: left unchanged\n", where)
			}
		}
		return r, err
	case "pick":
		order, err := parseOrder(f.order)
		if err != nil {
			return nil, err
		}
		r, err := tasks.Pick(ctx, &taskpickv1.PickRequest{
			Backend: f.backend, Pool: f.pool, Count: uint32(f.count), Ttl: durationpb.New(f.ttl), Order: order, Wait: durationpb.New(f.wait),
		})
		if err == nil && human {
			for _, t := range r.GetTasks() {
				fmt.Fprintf(stdout, "%s  token=%d  attempt=%d/%d  priority=%d  expires=%s  payload=%s\n", t.GetId(), t.GetLeaseToken(),
					t.GetAttempt(), t.GetMaxAttempts(), t.GetPriority(), fmtTime(t.GetExpiresAt()), fmtPayload(t.GetPayload()))
			}
			if len(r.GetTasks()) == 0 {
				fmt.Fprintf(stderr, "no task available in %s\n", f.pool)
			}
		}
		return r, err
	case "ack":
		r, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: f.backend, Pool: f.pool, Id: f.id, LeaseToken: f.token})
		if err == nil && human {
			fmt.Fprintf(stdout, "acked %s\n", where)
		}
		return r, err
	case "nack":
		r, err := tasks.Nack(ctx, &taskpickv1.NackRequest{
			Backend: f.backend, Pool: f.pool, Id: f.id, LeaseToken: f.token, RetryAfter: durationpb.New(f.retryAfter), Reason: f.reason,
		})
		if err == nil && human {
			if r.GetDead() {
				fmt.Fprintf(stdout, "nacked %s: dead, that was its last attempt\n", where)
			} else {
				fmt.Fprintf(stdout, "nacked %s: available again in %s\n", where, f.retryAfter)
			}
		}
		return r, err
	case "extend":
		r, err := tasks.Extend(ctx, &taskpickv1.ExtendRequest{Backend: f.backend, Pool: f.pool, Id: f.id, LeaseToken: f.token, Ttl: durationpb.New(f.ttl)})
		if err == nil && human {
			fmt.Fprintf(stdout, "extended %s until %s\n", where, fmtTime(r.GetExpiresAt()))
		}
		return r, err
	case "get":
		r, err := tasks.Get(ctx, &taskpickv1.GetRequest{Backend: f.backend, Pool: f.pool, Id: f.id})
		if err == nil && human {
			printTask(stdout, r.GetTask(), "run-at")
		}
		return r, err
	case "stats":
		r, err := tasks.Stats(ctx, &taskpickv1.StatsRequest{Backend: f.backend, Pool: f.pool})
		if err == nil && human {
			fmt.Fprintf(stdout, "%s  available=%d  delayed=%d  leased=%d  dead=%d  done=%d  oldest-available-age=%s\n", f.pool,
				r.GetAvailable(), r.GetDelayed(), r.GetLeased(), r.GetDead(), r.GetDone(), r.GetOldestAvailableAge().AsDuration().Round(time.Millisecond))
		}
		return r, err
	case "dead":
		r, err := tasks.ListDead(ctx, &taskpickv1.ListDeadRequest{Backend: f.backend, Pool: f.pool, Limit: uint32(f.limit)})
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
		r, err := tasks.Requeue(ctx, &taskpickv1.RequeueRequest{Backend: f.backend, Pool: f.pool, Ids: ids})
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
	state := strings.ToLower(strings.TrimPrefix(t.GetState().String(), "STATE_"))
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
