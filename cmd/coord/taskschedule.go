package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// scheduleFlags is everything one `coord task schedule` command can be told.
type scheduleFlags struct {
	timezone, missed     string
	payload, payloadFile string
	priority             int32
	maxAttempts, limit   uint32
	after                string
}

// newTaskScheduleCmd builds `coord task schedule` and its subcommands, on the task group's
// client flags.
func newTaskScheduleCmd(cf *clientFlags) *cobra.Command {
	c := newGroupCmd("schedule", "manage durable schedules: put, get, list, pause, resume, delete")
	c.Long = `Manage durable schedules: cron specs stored in the task backend whose every tick puts one
task into a pool, once across every instance of the service and across restarts.

SPEC is a cron expression of 5 fields (minute hour day-of-month month day-of-week), or 6 with
a leading seconds field, a descriptor (@hourly, @daily, @weekly, @monthly, @yearly), or an
interval such as "@every 30s" (whole seconds, at least 1s). Each tick's task has the id
NAME@TICK, such as nightly@2026-01-02T03:00:00Z.`
	f := &scheduleFlags{}
	run := func(verb string) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if f.payload != "" && f.payloadFile != "" {
				return usageErr(cmd, fmt.Errorf("--payload and --payload-file exclude each other"))
			}
			ctx, cancel := cf.callContext(cmd.Context(), 0)
			defer cancel()
			res, err := callSchedule(ctx, verb, cf, f, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if cf.asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			return nil
		}
	}
	put := &cobra.Command{Use: "put POOL NAME SPEC", Short: "create or replace a schedule", Args: argsExactly("POOL", "NAME", "SPEC"), RunE: run("put")}
	fs := put.Flags()
	fs.StringVar(&f.timezone, "timezone", "", "IANA time zone the spec is read in, such as Europe/Berlin; empty means UTC")
	fs.StringVar(&f.missed, "missed", "skip", "what ticks missed during an outage do: skip (put nothing) or run-once (one task for all of them)")
	fs.StringVar(&f.payload, "payload", "", "the payload of every task the schedule puts")
	fs.StringVar(&f.payloadFile, "payload-file", "", "read the payload from this file instead")
	fs.Int32Var(&f.priority, "priority", 0, "the priority of every task the schedule puts")
	fs.Uint32Var(&f.maxAttempts, "max-attempts", 0, "picks before a task is dead; 0 means the pool's default, else the service's (25)")
	list := &cobra.Command{Use: "list POOL", Short: "list a pool's schedules by name", Args: argsExactly("POOL"), RunE: run("list")}
	list.Flags().Uint32Var(&f.limit, "limit", 0, "how many schedules at most, 1 to 1000; 0 means 100")
	list.Flags().StringVar(&f.after, "after", "", "only schedules whose names sort after this one: the next page")
	c.AddCommand(put, list,
		&cobra.Command{Use: "get POOL NAME", Short: "show one schedule", Args: argsExactly("POOL", "NAME"), RunE: run("get")},
		&cobra.Command{Use: "pause POOL NAME", Short: "stop a schedule firing until resumed", Args: argsExactly("POOL", "NAME"), RunE: run("pause")},
		&cobra.Command{Use: "resume POOL NAME", Short: "let a paused schedule fire again from its next tick", Args: argsExactly("POOL", "NAME"), RunE: run("resume")},
		&cobra.Command{Use: "delete POOL NAME", Short: "delete a schedule; the tasks it put stay", Args: argsExactly("POOL", "NAME"), RunE: run("delete")},
	)
	return c
}

// missedNames maps the CLI's missed-tick policies to the API's.
var missedNames = map[string]taskpickv1.ScheduleMissed{
	"skip":     taskpickv1.ScheduleMissed_SCHEDULE_MISSED_SKIP,
	"run-once": taskpickv1.ScheduleMissed_SCHEDULE_MISSED_RUN_ONCE,
}

// callSchedule makes the call of verb and, without --json, prints its human form; it returns
// the response for --json.
func callSchedule(ctx context.Context, verb string, cf *clientFlags, f *scheduleFlags, args []string, stdout, stderr io.Writer) (proto.Message, error) {
	c, err := cf.client()
	if err != nil {
		return nil, err
	}
	tasks := c.Tasks()
	backend, pool := cf.backend, args[0]
	name := ""
	if len(args) > 1 {
		name = args[1]
	}
	human := !cf.asJSON
	show := func(s *taskpickv1.Schedule) {
		if human {
			printSchedule(stdout, s)
		}
	}
	switch verb {
	case "put":
		missed, ok := missedNames[strings.ToLower(f.missed)]
		if !ok {
			return nil, fmt.Errorf("--missed: unknown policy %q (skip, run-once)", f.missed)
		}
		payload := []byte(f.payload)
		if f.payloadFile != "" {
			b, err := os.ReadFile(f.payloadFile)
			if err != nil {
				return nil, fmt.Errorf("--payload-file: %w", err)
			}
			payload = b
		}
		r, err := tasks.PutSchedule(ctx, &taskpickv1.PutScheduleRequest{
			Backend: backend, Pool: pool, Name: name, Spec: args[2], Timezone: f.timezone, Missed: missed,
			Template: &taskpickv1.ScheduleTemplate{Payload: payload, Priority: f.priority, MaxAttempts: f.maxAttempts},
		})
		if err == nil {
			show(r.GetSchedule())
		}
		return r, err
	case "get":
		r, err := tasks.GetSchedule(ctx, &taskpickv1.GetScheduleRequest{Backend: backend, Pool: pool, Name: name})
		if err == nil {
			show(r.GetSchedule())
		}
		return r, err
	case "list":
		r, err := tasks.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Backend: backend, Pool: pool, Limit: f.limit, After: f.after})
		if err == nil && human {
			for _, s := range r.GetSchedules() {
				show(s)
			}
			if r.GetNextAfter() != "" {
				fmt.Fprintf(stderr, "more schedules follow: --after %q\n", r.GetNextAfter())
			} else if len(r.GetSchedules()) == 0 {
				fmt.Fprintf(stderr, "no schedules in %s\n", pool)
			}
		}
		return r, err
	case "pause":
		r, err := tasks.PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Backend: backend, Pool: pool, Name: name})
		if err == nil {
			show(r.GetSchedule())
		}
		return r, err
	case "resume":
		r, err := tasks.ResumeSchedule(ctx, &taskpickv1.ResumeScheduleRequest{Backend: backend, Pool: pool, Name: name})
		if err == nil {
			show(r.GetSchedule())
		}
		return r, err
	case "delete":
		r, err := tasks.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Backend: backend, Pool: pool, Name: name})
		if err == nil && human {
			fmt.Fprintf(stdout, "deleted schedule %s/%s\n", pool, name)
		}
		return r, err
	}
	return nil, fmt.Errorf("unknown schedule command %q", verb)
}

// printSchedule prints one schedule on one line.
func printSchedule(w io.Writer, s *taskpickv1.Schedule) {
	state := "running"
	if s.GetPaused() {
		state = "paused"
	}
	missed := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.GetMissed().String(), "SCHEDULE_MISSED_")), "_", "-")
	fmt.Fprintf(w, "%s/%s  spec=%q  timezone=%s  %s  missed=%s  next-fire=%s  last-fire=%s  priority=%d  payload=%s\n",
		s.GetPool(), s.GetName(), s.GetSpec(), s.GetTimezone(), state, missed, fmtTime(s.GetNextFire()), fmtTime(s.GetLastFire()),
		s.GetTemplate().GetPriority(), fmtPayload(s.GetTemplate().GetPayload()))
}
