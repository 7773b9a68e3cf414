package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchTableRender checks that one table prints as the aligned text coordbench
// always printed and as the Markdown of the report, from the same rows.
func TestBenchTableRender(t *testing.T) {
	t.Parallel()
	us := func(v float64) *float64 { return &v }
	lock := []runResult{
		{Target: "service/redis", Clients: 1, Pairs: 12155, PairsPerSec: 2431.2, P50: 387 * time.Microsecond, P99: 814 * time.Microsecond, Max: 6630 * time.Microsecond,
			CPU: &pairCPU{Client: us(236.4), Service: us(330), Backend: us(79.2), Total: us(645.6), ServicePID: 7, BackendPIDs: []int{3}}},
		{Target: "redsync/redis", Clients: 1, Pairs: 53464, PairsPerSec: 10692.8, P50: 70 * time.Microsecond, P99: 274 * time.Microsecond, Max: 11800 * time.Microsecond, Errors: 2,
			CPU: &pairCPU{Client: us(69), Backend: us(35), Total: us(104), NoService: true, BackendPIDs: []int{3}}},
		{Target: "service/sqlite", Clients: 1, Pairs: 1961, PairsPerSec: 1961, P50: 478 * time.Microsecond, P99: 1330 * time.Microsecond, Max: 4486 * time.Microsecond,
			CPU: &pairCPU{Client: us(8.04), Total: us(8.04), NoBackend: true}}, // --server without --server-pid: service unknown
	}
	inProcess := []runResult{
		{Target: "service/redis", Clients: 4, Pairs: 1771, PairsPerSec: 3542, P50: 896 * time.Microsecond, P99: 6044 * time.Microsecond, Max: 7563 * time.Microsecond,
			CPU: &pairCPU{Client: us(260), Backend: us(51), Total: us(311), InProcess: true}},
		{Target: "redsync/redis", Clients: 4, Pairs: 7195, PairsPerSec: 14390, P50: 248 * time.Microsecond, P99: 1433 * time.Microsecond, Max: 13500 * time.Microsecond,
			CPU: &pairCPU{Client: us(50), Backend: us(22), NoService: true}}, // backend's total unknown
	}
	spread := 11.24
	contend := []contendResult{
		{Target: "service/redis", Clients: 16, Instances: 2, Handoffs: 7389, HandoffsPerSec: 1477.8, WaitP50: 6328 * time.Microsecond,
			WaitP99: 48100 * time.Microsecond, WaitMax: 109800 * time.Microsecond, ShareMin: 410, ShareMax: 511, ShareSpread: &spread},
		{Target: "redsync/redis", Clients: 16, Handoffs: 13430, HandoffsPerSec: 2686, WaitP50: 77 * time.Microsecond,
			WaitP99: 207800 * time.Microsecond, WaitMax: 1464900 * time.Microsecond, ShareMin: 459, ShareMax: 1290},
	}
	tasks := []taskResult{
		{Target: "service/redis", Count: 10, Tasks: 20000, PutPerSec: 30000, TasksPerSec: 4519, Ratio: 0.49, PickP50: 2800 * time.Microsecond, PickP99: 12500 * time.Microsecond},
		{Target: "asynq/redis", Count: 1, Tasks: 20000, PutPerSec: 15000, TasksPerSec: 9185, Ratio: 1},
	}
	gens := []genResult{{Target: "coordkit/segment", NsPerOp: 59.33, Allocs: 1}, {Target: "coordkit/uuid-v7 (string)", NsPerOp: 209.1, Allocs: 2}}
	sw := switchResult{Step: 50000, Switches: 200, Others: 9999800, SwitchP50: 86, SwitchP99: 329, SwitchMax: 902, OtherP50: 74, OtherP99: 212, OtherMax: 1944159, SwitchOver: 1.55}
	ids := []idRunResult{{runResult: runResult{Target: "service/segment", Clients: 16, Pairs: 18838, PairsPerSec: 6279.3,
		P50: 2596 * time.Microsecond, P99: 6763 * time.Microsecond, Max: 11900 * time.Microsecond}, Count: 1000, IDsPerSec: 6279333}}

	for _, tt := range []struct {
		name     string
		tables   []benchTable
		text     string // as the bench commands printed it before the report existed
		markdown string
	}{
		{
			name:   "lock with ratio",
			tables: []benchTable{lockTable(lock)},
			text: `  target          clients  pairs  pairs/s    p50     p99      max  errors  cpu/pair client  service  backend  total
  service/redis         1  12155     2431  387µs   814µs   6.63ms       0            236µs    330µs     79µs  646µs
  redsync/redis         1  53464    10693   70µs   274µs   11.8ms       2             69µs        -     35µs  104µs
  service/sqlite        1   1961     1961  478µs  1.33ms  4.486ms       0            8.0µs        -        -  8.0µs
ratio service/redis ÷ redsync/redis at 1 clients: pairs/s 0.23, cpu/pair total 6.21
`,
			markdown: `| target | clients | pairs | pairs/s | p50 | p99 | max | errors | cpu/pair client | service | backend | total |
| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| service/redis | 1 | 12155 | 2431 | 387µs | 814µs | 6.63ms | 0 | 236µs | 330µs | 79µs | 646µs |
| redsync/redis | 1 | 53464 | 10693 | 70µs | 274µs | 11.8ms | 2 | 69µs | - | 35µs | 104µs |
| service/sqlite | 1 | 1961 | 1961 | 478µs | 1.33ms | 4.486ms | 0 | 8.0µs | - | - | 8.0µs |

- ratio service/redis ÷ redsync/redis at 1 clients: pairs/s 0.23, cpu/pair total 6.21
`,
		},
		{
			name:   "lock in-process: client and service one column, a CPU ratio unknown",
			tables: []benchTable{lockTable(inProcess)},
			text: `  target         clients  pairs  pairs/s    p50      p99      max  errors  cpu/pair client+service  backend  total
  service/redis        4   1771     3542  896µs  6.044ms  7.563ms       0                    260µs     51µs  311µs
  redsync/redis        4   7195    14390  248µs  1.433ms   13.5ms       0                     50µs     22µs      -
ratio service/redis ÷ redsync/redis at 4 clients: pairs/s 0.25, cpu/pair total -
cpu/pair client+service: the service ran in the bench's own process (--in-process), so its CPU time is the clients' too
`,
			markdown: `| target | clients | pairs | pairs/s | p50 | p99 | max | errors | cpu/pair client+service | backend | total |
| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| service/redis | 4 | 1771 | 3542 | 896µs | 6.044ms | 7.563ms | 0 | 260µs | 51µs | 311µs |
| redsync/redis | 4 | 7195 | 14390 | 248µs | 1.433ms | 13.5ms | 0 | 50µs | 22µs | - |

- ratio service/redis ÷ redsync/redis at 4 clients: pairs/s 0.25, cpu/pair total -
- cpu/pair client+service: the service ran in the bench's own process (--in-process), so its CPU time is the clients' too
`,
		},
		{
			name:   "id: two tables around a line",
			tables: idTables(gens, sw, ids),
			text: `  generator                  ns/op  allocs/op
  coordkit/segment            59.3          1
  coordkit/uuid-v7 (string)  209.1          2

segment switch (in-process, step 50000): 200 switching calls p50 86ns p99 329ns max 902ns; 9999800 other calls p50 74ns p99 212ns max 1.944159ms; p99 ratio 1.55

  target           clients  count  calls  calls/s    ids/s      p50      p99     max  errors
  service/segment       16   1000  18838     6279  6279333  2.596ms  6.763ms  11.9ms       0
`,
			markdown: `| generator | ns/op | allocs/op |
| :--- | ---: | ---: |
| coordkit/segment | 59.3 | 1 |
| coordkit/uuid-v7 (string) | 209.1 | 2 |

- segment switch (in-process, step 50000): 200 switching calls p50 86ns p99 329ns max 902ns; 9999800 other calls p50 74ns p99 212ns max 1.944159ms; p99 ratio 1.55

| target | clients | count | calls | calls/s | ids/s | p50 | p99 | max | errors |
| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| service/segment | 16 | 1000 | 18838 | 6279 | 6279333 | 2.596ms | 6.763ms | 11.9ms | 0 |
`,
		},
		{
			name:   "contend with dashes",
			tables: []benchTable{contendTable(contend)},
			text: `  target         clients  inst  handoffs  handoffs/s  wait p50  wait p99  wait max  share min  share max  share ±%  errors  overlaps  stale tokens
  service/redis       16     2      7389        1478   6.328ms    48.1ms   109.8ms        410        511     11.2%       0         0             0
  redsync/redis       16     -     13430        2686      77µs   207.8ms   1.4649s        459       1290         -       0         0             -
ratio service/redis ÷ redsync/redis: handoffs/s 0.55, wait p99 0.23
`,
			markdown: `| target | clients | inst | handoffs | handoffs/s | wait p50 | wait p99 | wait max | share min | share max | share ±% | errors | overlaps | stale tokens |
| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| service/redis | 16 | 2 | 7389 | 1478 | 6.328ms | 48.1ms | 109.8ms | 410 | 511 | 11.2% | 0 | 0 | 0 |
| redsync/redis | 16 | - | 13430 | 2686 | 77µs | 207.8ms | 1.4649s | 459 | 1290 | - | 0 | 0 | - |

- ratio service/redis ÷ redsync/redis: handoffs/s 0.55, wait p99 0.23
`,
		},
		{
			name:   "task without notes",
			tables: []benchTable{taskTable(tasks)},
			text: `  target         count  tasks  put/s  tasks/s  vs asynq  pick p50  pick p99  errors
  service/redis     10  20000  30000     4519      0.49     2.8ms    12.5ms       0
  asynq/redis        1  20000  15000     9185      1.00         -         -       0
`,
			markdown: `| target | count | tasks | put/s | tasks/s | vs asynq | pick p50 | pick p99 | errors |
| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| service/redis | 10 | 20000 | 30000 | 4519 | 0.49 | 2.8ms | 12.5ms | 0 |
| asynq/redis | 1 | 20000 | 15000 | 9185 | 1.00 | - | - | 0 |
`,
		},
		{
			name:     "cells that Markdown would misread are escaped",
			tables:   []benchTable{{header: []string{"a|b", "n"}, rows: [][]string{{"x_y*z", "`1`"}}, notes: []string{"<b>|"}}},
			text:     "  a|b      n\n  x_y*z  `1`\n<b>|\n",
			markdown: "| a\\|b | n |\n| :--- | ---: |\n| x\\_y\\*z | \\`1\\` |\n\n- &lt;b>\\|\n",
		},
		{
			name:   "no rows: the header alone",
			tables: []benchTable{lockTable(nil)},
			text:   "  target  clients  pairs  pairs/s  p50  p99  max  errors  cpu/pair client  service  backend  total\n",
			markdown: "| target | clients | pairs | pairs/s | p50 | p99 | max | errors | cpu/pair client | service | backend | total |\n" +
				"| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var text, md strings.Builder
			if err := writeTables(&text, tt.tables...); err != nil {
				t.Fatalf("writeTables: %v, want nil", err)
			}
			if err := writeMarkdownTables(&md, tt.tables...); err != nil {
				t.Fatalf("writeMarkdownTables: %v, want nil", err)
			}
			if text.String() != tt.text {
				t.Errorf("text =\n%s\nwant\n%s", text.String(), tt.text)
			}
			if md.String() != tt.markdown {
				t.Errorf("markdown =\n%s\nwant\n%s", md.String(), tt.markdown)
			}
		})
	}
}

// TestBenchReportMarkdown checks that the report says where, when, from which commit and how
// to reproduce, and keeps a failed benchmark's tables with its error.
func TestBenchReportMarkdown(t *testing.T) {
	t.Parallel()
	rep := benchReport{
		date:    time.Date(2026, 11, 24, 1, 2, 3, 0, time.UTC),
		took:    4*time.Minute + 10*time.Second + 300*time.Millisecond,
		commit:  "`0123abc` plus uncommitted changes",
		command: "coordbench all --report docs/benchmarks.md",
		machine: [][2]string{{"cores", "2 (runtime.NumCPU; GOMAXPROCS 2)"}, {"CPU", "Some CPU | 2.0GHz"}, {"Redis", "7.0.15 at 127.0.0.1:6379"}},
		sections: []benchSection{
			{title: "Locks", command: "coordbench lock --duration 3s --warmup 500ms", about: "Pairs.", took: 80 * time.Second,
				tables: []benchTable{lockTable([]runResult{{Target: "service/sqlite", Clients: 16, Pairs: 100, PairsPerSec: 33.3}})}},
			{title: "Tasks", command: "coordbench task --tasks 10000", about: "Tasks.", took: time.Minute,
				tables: []benchTable{taskTable([]taskResult{{Target: "service/sqlite", Count: 1, Tasks: 7}})},
				err:    errors.New("bench: mysql: connection refused")},
		},
	}
	var b strings.Builder
	if err := rep.write(&b); err != nil {
		t.Fatalf("write: %v, want nil", err)
	}
	got := b.String()
	for _, tt := range []struct{ what, want string }{
		{"title", "# Benchmarks\n\n"},
		{"date, commit, duration, command", "Measured 2026-11-24 01:02 UTC from commit `0123abc` plus uncommitted changes, in 4m10s, by `make bench` (that is: start the dev backends, then `coordbench all --report docs/benchmarks.md`)."},
		{"machine", "## Machine\n\n- cores: 2 (runtime.NumCPU; GOMAXPROCS 2)\n- CPU: Some CPU \\| 2.0GHz\n- Redis: 7.0.15 at 127.0.0.1:6379\n"},
		{"section heading with its own command", "\n## Locks: `coordbench lock --duration 3s --warmup 500ms`\n\nPairs. (took 1m20s)\n\n| target | clients |"},
		{"row, CPU not measured", "| service/sqlite | 16 | 100 | 33 | 0s | 0s | 0s | 0 | - | - | - | - |\n"},
		{"failure kept with the tables", "**This benchmark failed**, its tables hold what it measured before: bench: mysql: connection refused\n\n| target | count |"},
	} {
		if !strings.Contains(got, tt.want) {
			t.Errorf("report lacks the %s: want it to contain\n%s\ngot\n%s", tt.what, tt.want, got)
		}
	}
	if i, j := strings.Index(got, "## Locks"), strings.Index(got, "## Tasks"); i < 0 || j < i {
		t.Errorf("sections at %d (Locks) and %d (Tasks), want Locks before Tasks", i, j)
	}
}

// TestBenchAllConfig checks that `coordbench all` runs each benchmark with its own
// defaults except for the shorter runs, and says how to run each one alone.
func TestBenchAllConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    []string
		wantErr bool
		dur     time.Duration
		warmup  time.Duration
		tasks   int
	}{
		{args: nil, dur: 3 * time.Second, warmup: 500 * time.Millisecond, tasks: 10000},
		{args: []string{"--duration", "1s", "--warmup", "0s", "--tasks", "50"}, dur: time.Second, tasks: 50},
		{args: []string{"--duration", "0s"}, wantErr: true},
		{args: []string{"--tasks", "0"}, wantErr: true},
	} {
		cfg, err := parseBenchFlags(benchAllFlags, tt.args)
		if tt.wantErr {
			if err == nil {
				t.Errorf("bench all %q: no error, want one", tt.args)
			}
			continue
		}
		if err != nil {
			t.Fatalf("bench all %q: %v, want nil", tt.args, err)
		}
		if cfg.lock.duration != tt.dur || cfg.lock.warmup != tt.warmup || cfg.contend.duration != tt.dur ||
			cfg.contend.warmup != tt.warmup || cfg.id.duration != tt.dur || cfg.id.warmup != tt.warmup {
			t.Errorf("bench all %q: runs of lock %v+%v, contend %v+%v, id %v+%v; want %v after %v of warm-up each", tt.args,
				cfg.lock.duration, cfg.lock.warmup, cfg.contend.duration, cfg.contend.warmup, cfg.id.duration, cfg.id.warmup, tt.dur, tt.warmup)
		}
		if cfg.task.tasks != tt.tasks {
			t.Errorf("bench all %q: %d tasks per run, want %d", tt.args, cfg.task.tasks, tt.tasks)
		}
		// Everything else keeps the benchmark's own default.
		if !slices.Equal(cfg.lock.clients, []int{1, 16, 64}) || !slices.Equal(cfg.lock.targets, allTargets()) ||
			!slices.Equal(cfg.contend.targets, contendTargets()) || cfg.id.batch != 1000 || !slices.Equal(cfg.task.backends, taskBenchBackends) {
			t.Errorf("bench all %q: lock clients %v targets %v, contend targets %v, id batch %d, task backends %v; want the defaults of each",
				tt.args, cfg.lock.clients, cfg.lock.targets, cfg.contend.targets, cfg.id.batch, cfg.task.backends)
		}
		if cfg.lock.inProcess || cfg.lock.serverURL != "" {
			t.Errorf("bench all %q: lock in-process %v, server %q; want its own service as a child process, for the CPU columns", tt.args, cfg.lock.inProcess, cfg.lock.serverURL)
		}
		if about := lockAbout(cfg.lock); !strings.Contains(about, "child process") || !strings.Contains(about, "cpu/pair") {
			t.Errorf("bench all %q: the report says of lock %q, want it to say the service is a child process and what cpu/pair is", tt.args, about)
		}
		want := []string{"--duration", tt.dur.String(), "--warmup", tt.warmup.String()}
		if !slices.Equal(cfg.args["lock"], want) || !slices.Equal(cfg.args["task"], []string{"--tasks", strconv.Itoa(tt.tasks)}) {
			t.Errorf("bench all %q: commands bench lock %q, bench task %q; want %q and [--tasks %d]", tt.args, cfg.args["lock"], cfg.args["task"], want, tt.tasks)
		}
	}
}

// TestBenchReportProbes checks the parsing of what the report reads about the machine and
// the backends.
func TestBenchReportProbes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		parse func(string) string
		in    string
		want  string
	}{
		{"cpuinfo", cpuModel, "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nprocessor\t: 1\nmodel name\t: other\n", "Intel(R) Xeon(R) CPU @ 2.20GHz"},
		{"cpuinfo without a model", cpuModel, "processor\t: 0\nHardware\t: BCM2835\n", ""},
		{"meminfo", memTotal, "MemTotal:        8039440 kB\nMemFree:          123 kB\n", "7.7 GiB"},
		{"meminfo empty", memTotal, "", ""},
		{"os-release", osRelease, "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n", "Debian GNU/Linux 13 (trixie)"},
		{"os-release unquoted", osRelease, "PRETTY_NAME=Alpine\n", "Alpine"},
		{"zookeeper srvr", zkVersion, "Zookeeper version: 3.8.4-9cb3d9a, built on 2024-02-12 22:16 UTC\n", "3.8.4-9cb3d9a"},
		{"zookeeper srvr from Debian", zkVersion, "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2023-06-01 00:00 UTC\n", "3.8.0"},
		{"zookeeper refusing srvr", zkVersion, "srvr is not executed because it is not in the whitelist.\n", ""},
		{"redis info", func(s string) string { return infoField(s, "redis_version") }, "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "7.0.15"},
	} {
		if got := tt.parse(tt.in); got != tt.want {
			t.Errorf("%s: parsed %q from %q, want %q", tt.name, got, tt.in, tt.want)
		}
	}
}

// TestBenchReportKeepsHandMeasured: a new report replaces the generated part of the old one
// and keeps its hand-measured part, from the marker to the end, as it was; a report without
// the marker is replaced whole.
func TestBenchReportKeepsHandMeasured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hand := keptMarker + "\n\n## Measured by hand\n\n| a | b |\n| - | - |\n| 1 | 2 |\n"
	for _, tt := range []struct{ name, old, kept string }{
		{"with a hand-measured part", "# Benchmarks\n\nold generated tables\n\n" + hand, hand},
		{"without one", "# Benchmarks\n\nold generated tables\n", ""},
		{"no file", "", ""},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".md")
		if tt.old != "" {
			if err := os.WriteFile(path, []byte(tt.old), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		kept, err := keptPart(path)
		if err != nil || kept != tt.kept {
			t.Fatalf("%s: keptPart = %q, %v; want %q, nil", tt.name, kept, err, tt.kept)
		}
		rep := benchReport{date: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), commit: "`abc`", kept: kept}
		if err := writeFileAtomic(path, rep.write); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(got), "old generated tables") {
			t.Errorf("%s: the old generated part survived:\n%s", tt.name, got)
		}
		if tt.kept != "" && !strings.HasSuffix(string(got), "\n\n"+tt.kept) {
			t.Errorf("%s: report does not end with the hand-measured part:\n%s", tt.name, got)
		}
	}
}
