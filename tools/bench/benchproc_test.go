package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/config"
	"github.com/coordkit/coordkit/libs/testenv"
)

// procIdentity returns the parent and the start time of process pid (fields 4 and 22 of
// /proc/<pid>/stat), which tell it apart from a later process given the same pid; ok is
// false when there is no such process (a zombie counts as gone).
func procIdentity(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[19], true
}

// TestBenchServiceProcess runs the service as the bench does, a child process: it answers,
// and it is gone after the bench stops it and after the bench's context is canceled, without
// being stopped; a service that cannot start is an error with its output.
func TestBenchServiceProcess(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		end  func(t *testing.T, p *serviceProcess, cancel context.CancelFunc)
	}{
		{"stopped", func(t *testing.T, p *serviceProcess, _ context.CancelFunc) {
			if err := p.stop(); err != nil {
				t.Errorf("stop: %v, want a clean exit", err)
			}
		}},
		{"context canceled", func(t *testing.T, p *serviceProcess, cancel context.CancelFunc) {
			cancel()
			select {
			case <-p.done:
			case <-time.After(2 * time.Minute): // only so that a hang fails instead of stalling
				t.Fatal("the service process still runs after its context was canceled")
			}
			if err := p.stop(); err != nil {
				t.Errorf("stop after the cancel: %v, want the clean exit of SIGTERM", err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			scfg := benchServeConfig(benchConfig{targets: []string{targetServiceSQLite}}, t.TempDir())
			p, err := startServiceProcess(ctx, defaultCoord, scfg, func(msg string) { t.Log(msg) })
			if err != nil {
				t.Fatalf("startServiceProcess: %v, want a running service", err)
			}
			ppid, started, ok := procIdentity(p.pid)
			if !ok || ppid != os.Getpid() {
				t.Fatalf("service pid %d: running %v, parent %d; want a running child of this process (%d)", p.pid, ok, ppid, os.Getpid())
			}
			if code, body, err := getReadyz(ctx, http.DefaultClient, p.url); err != nil || code != http.StatusOK {
				t.Errorf("/readyz = %d %s (%v), want 200", code, body, err)
			}
			if err := servicePair(client.New(p.url), "sqlite", 1)(ctx, "bench:proc:"+tt.name); err != nil {
				t.Errorf("acquire+release through the child: %v, want nil", err)
			}

			tt.end(t, p, cancel)
			if _, now, ok := procIdentity(p.pid); ok && now == started {
				t.Errorf("service pid %d still runs after the bench ended", p.pid)
			}
		})
	}

	t.Run("cannot start", func(t *testing.T) {
		t.Parallel()
		cfg := benchConfig{targets: []string{targetServiceRedis}, redisAddr: "127.0.0.1:1"}
		p, err := startServiceProcess(context.Background(), defaultCoord, benchServeConfig(cfg, t.TempDir()), func(string) {})
		if err == nil {
			p.stop() //nolint:errcheck // failing anyway
			t.Fatal("startServiceProcess with Redis on port 1: no error, want the child's failure")
		}
		if !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("startServiceProcess: %v, want it to say the child exited and why (Redis at 127.0.0.1:1)", err)
		}
	})
}

// TestBenchLockCPUColumns runs a short real `coordbench lock` with the service as a child
// process and checks the CPU time per pair of every process: numbers where the process
// exists (sqlite has no backend process, redsync no service), the CPU ratio next to the
// throughput ratio, the pids measured, and no service process left after the bench.
func TestBenchLockCPUColumns(t *testing.T) {
	t.Parallel()
	testenv.Redis(t, "") // fail loudly when the dev backends are down
	args := []string{"lock", "--targets", "service/sqlite,service/redis,redsync/redis",
		"--clients", "1", "--duration", "300ms", "--warmup", "100ms"}
	bench := func(t *testing.T, args ...string) string {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Fatalf("coordbench %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		if errOut.Len() > 0 {
			t.Logf("stderr: %s", errOut.String())
		}
		return out.String()
	}

	t.Run("table", func(t *testing.T) {
		t.Parallel()
		out := bench(t, args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		header := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(lines[0]), -1)
		if want := []string{"cpu/pair client", "service", "backend", "total"}; len(header) < 4 || !slices.Equal(header[len(header)-4:], want) {
			t.Fatalf("header %q, want it to end with the CPU columns %q\n%s", header, want, out)
		}
		num := regexp.MustCompile(`^\d+(\.\d)?µs$`)
		for _, want := range [][]string{
			{"service/sqlite", "n", "n", "-", "n"},
			{"service/redis", "n", "n", "n", "n"},
			{"redsync/redis", "n", "-", "n", "n"},
		} {
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), want[0]+" ") })
			if i < 0 {
				t.Errorf("no row for %s\n%s", want[0], out)
				continue
			}
			f := strings.Fields(lines[i])
			cells := f[len(f)-4:]
			for j, cell := range cells {
				if ok := num.MatchString(cell); (want[j+1] == "n") != ok || (!ok && cell != "-") {
					t.Errorf("%s: cpu/pair cells %q, want numbers in µs where %q says n and - elsewhere\n%s", want[0], cells, want[1:], out)
					break
				}
			}
		}
		if !regexp.MustCompile(`(?m)^ratio service/redis ÷ redsync/redis at 1 clients: pairs/s \d+\.\d\d, cpu/pair total \d+\.\d\d$`).MatchString(out) {
			t.Errorf("no ratio line with pairs/s and cpu/pair total\n%s", out)
		}
	})

	t.Run("json", func(t *testing.T) {
		t.Parallel()
		out := bench(t, append(args, "--json")...)
		var report struct {
			Results []runResult `json:"results"`
			Ratios  []ratio     `json:"ratios"`
		}
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			t.Fatalf("bench lock --json printed %q: %v", out, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		redisPIDs, err := redisPIDs(ctx, []string{testenv.RedisAddr()})
		if err != nil {
			t.Fatalf("redis pid: %v", err)
		}
		servicePID := 0
		for _, r := range report.Results {
			c := r.CPU
			if c == nil || c.Client == nil || c.Total == nil || c.InProcess {
				t.Errorf("%s: cpu_per_pair %+v, want the client's and the total, the service not in-process", r.Target, c)
				continue
			}
			if isServiceTarget(r.Target) {
				if c.Service == nil || c.ServicePID == 0 || (servicePID != 0 && c.ServicePID != servicePID) {
					t.Errorf("%s: service %v µs, pid %d; want measured, the one service process (%d)", r.Target, c.Service, c.ServicePID, servicePID)
				}
				servicePID = c.ServicePID
			} else if !c.NoService || c.Service != nil {
				t.Errorf("%s: no_service %v, service_us %v; want no service", r.Target, c.NoService, c.Service)
			}
			if r.Target == targetServiceSQLite {
				if !c.NoBackend || c.Backend != nil {
					t.Errorf("%s: no_backend %v, backend_us %v; want no backend process", r.Target, c.NoBackend, c.Backend)
				}
			} else if c.Backend == nil || !slices.Equal(c.BackendPIDs, redisPIDs) {
				t.Errorf("%s: backend %v µs, pids %v; want measured in Redis %v", r.Target, c.Backend, c.BackendPIDs, redisPIDs)
			}
		}
		if len(report.Ratios) != 1 || report.Ratios[0].CPURatio == nil {
			t.Errorf("ratios %+v, want service/redis over redsync/redis with a CPU ratio", report.Ratios)
		}
		if ppid, _, ok := procIdentity(servicePID); servicePID != 0 && ok && ppid == os.Getpid() {
			t.Errorf("service process %d still runs after the bench returned", servicePID)
		}
	})
}

// TestServeArgsKeepSecretsOff checks that the database addresses of the service the bench
// starts, which may hold passwords, travel in its environment, never on its command line.
func TestServeArgsKeepSecretsOff(t *testing.T) {
	t.Parallel()
	args, env := serveArgs(serveConfig{addr: "127.0.0.1:0", mysqlDSN: "root:mysql-secret@tcp(h:3306)/db", pgURL: "postgres://u:pg-secret@h:5432/db"})
	for _, a := range args {
		if strings.Contains(a, "secret") {
			t.Errorf("command line argument %q shows a password", a)
		}
	}
	if !slices.Contains(args, "--id-store=sqlite") { // both databases set: coord serve would refuse to choose
		t.Errorf("command line %v names no --id-store", args)
	}
	for _, want := range []string{config.EnvName("mysql-dsn") + "=root:mysql-secret@tcp(h:3306)/db", config.EnvName("postgres-url") + "=postgres://u:pg-secret@h:5432/db"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment %v lacks %s", env, want)
		}
	}
}
