package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// benchAllConfig is everything `coordbench all` can be told, and the configurations of the
// benchmarks it runs: each one's defaults, with the run lengths of `coordbench all`.
type benchAllConfig struct {
	report   string
	duration time.Duration
	warmup   time.Duration
	tasks    int
	coord    string

	lock    benchConfig
	id      benchIDConfig
	contend contendConfig
	task    taskBenchConfig
	args    map[string][]string // per benchmark, the flags that give its configuration
}

// benchAllFlags adds the flags of `coordbench all` to fs and returns the function that
// checks them, after parsing, into a config.
func benchAllFlags(fs *pflag.FlagSet) func() (benchAllConfig, error) {
	var cfg benchAllConfig
	fs.StringVar(&cfg.report, "report", "", "write the Markdown report to this file, replacing all of it but the hand-measured part at its end (from the \"Measured by hand\" marker line on); empty prints the report")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "measured length of each run of lock, id and contend (their own defaults: 5s, 3s, 5s)")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each run of lock, id and contend")
	fs.IntVar(&cfg.tasks, "tasks", 10000, "no-op tasks per run of task (its own default: 20000)")
	coordFlag(fs, &cfg.coord)
	return func() (benchAllConfig, error) { return cfg.check() }
}

// check completes cfg with the configuration of every benchmark: their flags' defaults, with
// the run lengths set by cfg.
func (cfg benchAllConfig) check() (benchAllConfig, error) {
	if cfg.duration <= 0 || cfg.warmup < 0 || cfg.tasks < 1 {
		return cfg, errors.New("bench all: --duration and --tasks must be positive and --warmup not negative")
	}
	timing := []string{"--duration", cfg.duration.String(), "--warmup", cfg.warmup.String()}
	cfg.args = map[string][]string{"lock": timing, "id": timing, "contend": timing, "task": {"--tasks", strconv.Itoa(cfg.tasks)}}
	if cfg.coord != "" {
		for _, name := range []string{"lock", "contend"} {
			cfg.args[name] = append(slices.Clone(cfg.args[name]), "--coord", cfg.coord)
		}
	}
	idFlags := func(fs *pflag.FlagSet) func() (benchIDConfig, error) {
		c := benchIDFlags(fs)
		return func() (benchIDConfig, error) { return *c, nil }
	}
	var errs [4]error
	cfg.lock, errs[0] = parseBenchFlags(benchLockFlags, cfg.args["lock"])
	cfg.id, errs[1] = parseBenchFlags(idFlags, cfg.args["id"])
	cfg.contend, errs[2] = parseBenchFlags(benchContendFlags, cfg.args["contend"])
	cfg.task, errs[3] = parseBenchFlags(benchTaskFlags, cfg.args["task"])
	return cfg, errors.Join(errs[:]...)
}

// parseBenchFlags returns the configuration one benchmark's flags give for args, every flag
// not in args at its default, exactly as `coordbench <name> args...` would run.
func parseBenchFlags[C any](flags func(*pflag.FlagSet) func() (C, error), args []string) (C, error) {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	check := flags(fs)
	if err := fs.Parse(args); err != nil {
		var zero C
		return zero, fmt.Errorf("bench all: %w", err)
	}
	return check()
}

// benchAll implements `coordbench all`: every benchmark with its peers, one after another,
// each printing its tables as it finishes, then one Markdown report with the machine, the
// commit and the command that reproduces it. A benchmark that fails keeps what it measured
// and its error in the report, and the others still run.
func benchAll(ctx context.Context, cfg benchAllConfig, cmdline string, stdout, stderr io.Writer) error {
	start := time.Now()
	rep := benchReport{date: start, command: cmdline, commit: gitCommit(ctx)}
	rep.machine = probeMachine(ctx, cfg)
	runs := []struct {
		name, title string
		about       string
		measure     func() ([]benchTable, error)
	}{
		{"lock", "Locks", lockAbout(cfg.lock), func() ([]benchTable, error) {
			r, err := measureLock(ctx, cfg.lock, stderr)
			return []benchTable{lockTable(r)}, err
		}},
		{"id", "IDs", idAbout(cfg.id), func() ([]benchTable, error) {
			r, err := measureID(ctx, cfg.id, stderr)
			return idTables(r.gens, r.sw, r.runs), err
		}},
		{"task", "Tasks", taskAbout(cfg.task), func() ([]benchTable, error) {
			r, err := measureTasks(ctx, cfg.task, stderr)
			return []benchTable{taskTable(r)}, err
		}},
		{"contend", "Contention", contendAbout(cfg.contend), func() ([]benchTable, error) {
			r, err := measureContention(ctx, cfg.contend, stderr)
			return []benchTable{contendTable(r)}, err
		}},
	}
	var errs []error
	for _, run := range runs {
		s := benchSection{title: run.title, about: run.about,
			command: strings.Join(append([]string{"coordbench", run.name}, cfg.args[run.name]...), " ")}
		fmt.Fprintf(stderr, "bench all: %s ...\n", s.command)
		began := time.Now()
		s.tables, s.err = run.measure()
		s.took = time.Since(began)
		if ctx.Err() != nil {
			return fmt.Errorf("bench all: %w", context.Cause(ctx))
		}
		fmt.Fprintf(stdout, "\n%s (%s, %s):\n", s.title, s.command, s.took.Round(time.Second))
		if err := writeTables(stdout, s.tables...); err != nil {
			return err
		}
		if s.err != nil {
			fmt.Fprintf(stderr, "bench all: %s: %v\n", run.name, s.err)
			errs = append(errs, fmt.Errorf("bench all: %s: %w", run.name, s.err))
		}
		rep.sections = append(rep.sections, s)
	}
	rep.took = time.Since(start)
	rep.machine = append(rep.machine, [2]string{"load average after", loadAverage()})
	if cfg.report == "" {
		return errors.Join(append(errs, rep.write(stdout))...)
	}
	kept, err := keptPart(cfg.report)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("bench all: --report: %w", err))...)
	}
	rep.kept = kept
	if err := writeFileAtomic(cfg.report, rep.write); err != nil {
		return errors.Join(append(errs, fmt.Errorf("bench all: --report: %w", err))...)
	}
	fmt.Fprintf(stderr, "bench all: wrote %s (%s)\n", cfg.report, rep.took.Round(time.Second))
	return errors.Join(errs...)
}

// writeFileAtomic writes path with fill through a temporary file in the same directory, so
// that an interrupted run leaves the previous report whole.
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, there is nothing left to remove
	if err := errors.Join(fill(f), f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// lockAbout says what `coordbench lock` measures with cfg, for the report.
func lockAbout(cfg benchConfig) string {
	where, cpu := "started as a child process (coord serve) on a loopback port", "client (the bench), service and backend"
	switch {
	case cfg.serverURL != "":
		where = "at " + cfg.serverURL
	case cfg.inProcess:
		where, cpu = "started in-process on a loopback port", "client and service together (one process), and backend"
	}
	return fmt.Sprintf("Acquire + release pairs, each client on its own key, through the lock service %s "+
		"(Connect over HTTP), per backend, next to go-redsync on the same Redis node (redsync/redis) "+
		"and the same three Redlock nodes (redsync/redlock). %s clients; each row is %s measured after %s of warm-up. "+
		"cpu/pair is the CPU time (user + system, from /proc/<pid>/stat, 10ms ticks) one pair cost the %s "+
		"over the measured window: the backend is redis-server, the three Redlock nodes summed, mariadbd, PostgreSQL's postmaster with its connection processes or ZooKeeper's JVM, "+
		"none for SQLite, which lives in the service, and redsync has no service; - where a process was not found. "+
		"A ratio is the service's pairs/s over redsync's at the same number of clients, and its total CPU time per pair over redsync's.",
		where, joinInts(cfg.clients), cfg.duration, cfg.warmup, cpu)
}

// idAbout says what `coordbench id` measures with cfg, for the report.
func idAbout(cfg benchIDConfig) string {
	return fmt.Sprintf("First the in-process generators (testing.Benchmark, about a second each, the fastest of two rounds) "+
		"next to bwmarrin/snowflake and google/uuid with the same output (strings for UUIDs), with the ratios under the table; "+
		"then the segment double buffer's switch (calls that moved to the next segment against all others); "+
		"then Next through the ID service in-process by %d clients, one ID per call and %d per call, per mode, "+
		"each row %s measured after %s of warm-up; last the SDK's Next from one goroutine per mode (sdk/…), "+
		"served from its blocks, with the calls that waited for a fetch.", cfg.clients, cfg.batch, cfg.duration, cfg.warmup)
}

// taskAbout says what `coordbench task` measures with cfg, for the report.
func taskAbout(cfg taskBenchConfig) string {
	return fmt.Sprintf("Put, then pick + ack of %d no-op tasks by %d workers through the task service in-process, per backend, "+
		"with %s tasks per Pick, then the SDK's Work (work/…); next to hibiken/asynq processing as many no-op tasks on the "+
		"same Redis as a library with concurrency %d (asynq/redis). tasks/s is over the pick + ack phase; vs asynq is "+
		"tasks/s over asynq's. unique-put/… Puts as many single tasks with unique keys, each key twice (half are "+
		"duplicates), next to asynq.Unique enqueues of as many (asynq-unique/redis); their vs asynq is put/s over "+
		"asynq-unique's.", cfg.tasks, cfg.workers, joinInts(cfg.counts), cfg.workers)
}

// contendAbout says what `coordbench contend` measures with cfg, for the report.
func contendAbout(cfg contendConfig) string {
	return fmt.Sprintf("One hot key: %d clients spread over %d in-process service instances loop Acquire (server-side wait up "+
		"to %s) → hold %s → Release with the lease's fencing token; redsync/redis is go-redsync on the same Redis, polling "+
		"with its default 50–250ms retry delay; …/fair targets acquire in fair mode. wait is from calling Acquire to holding "+
		"the lock; share ±%% is the largest distance of one client's acquisitions from the mean, in percent of it; "+
		"overlaps and stale tokens are mutual-exclusion violations seen from outside the lock. Each row is %s measured "+
		"after %s of warm-up; a target whose backend does not answer is left out.",
		cfg.clients, cfg.instances, cfg.wait, cfg.hold, cfg.duration, cfg.warmup)
}

// joinInts joins ns with commas.
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
