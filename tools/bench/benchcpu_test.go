package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestBenchProcStat checks the reading of /proc/<pid>/stat: the parser on real and tricky
// lines, and this very process, whose CPU time rises while it burns CPU.
func TestBenchProcStat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		stat    string
		want    time.Duration
		wantErr bool
	}{
		{name: "mariadbd", stat: "3756 (mariadbd) S 1 3755 3755 0 -1 4194560 26301 0 5 0 453 437 0 0 20 0 41 0 5206 8797543174144 31118\n", want: 8900 * time.Millisecond},
		{name: "name with spaces and parentheses", stat: "42 (a) b (c)) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 100 0 0\n", want: 100 * time.Millisecond},
		{name: "no name", stat: "42 a R 1 42 42 0 -1 0 0 0 0 0 7 3\n", wantErr: true},
		{name: "cut short", stat: "42 (a) R 1 42 42 0 -1 0 0 0 0 0 7\n", wantErr: true},
		{name: "not a number", stat: "42 (a) R 1 42 42 0 -1 0 0 0 0 0 x 3\n", wantErr: true},
	} {
		got, err := parseProcStat(tt.stat)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: parseProcStat = %v, %v; want %v, error %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}

	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatalf("procCPU(self): %v, want this process's CPU time", err)
	}
	// Burn until the kernel counts at least one more tick (10ms of CPU); the deadline only
	// stops a test that would otherwise spin, and bounds what it costs a loaded machine.
	after, x := before, 1.0
	for deadline := time.Now().Add(5 * time.Second); after <= before && time.Now().Before(deadline); {
		for range 1_000_000 {
			x = math.Sqrt(x + 1)
		}
		if after, err = procCPU(os.Getpid()); err != nil {
			t.Fatalf("procCPU(self): %v", err)
		}
	}
	if after <= before {
		t.Errorf("procCPU(self) stayed at %v while burning CPU (%v), want it to rise", before, x)
	}

	// A pid above pid_max cannot exist.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pidMax, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for _, tt := range []struct {
		name   string
		group  procGroup
		wantOK bool
	}{
		{"self", pidGroup(os.Getpid()), true},
		{"none", procGroup{none: true}, true},
		{"unknown", procGroup{}, false},
		{"a process that is not there", pidGroup(os.Getpid(), pidMax+1), false},
	} {
		if d, ok := tt.group.cpu(); ok != tt.wantOK || (tt.name == "none" && d != 0) {
			t.Errorf("%s: cpu() = %v, %v; want ok %v (and 0 for none)", tt.name, d, ok, tt.wantOK)
		}
	}
}

// TestBenchPerPair checks the CPU time per pair from the samples at the start and the end
// of a window: parts that are none count zero in the total, unknown ones make it unknown.
func TestBenchPerPair(t *testing.T) {
	t.Parallel()
	sample := func(ms ...int) cpuSample { // -1: unreadable
		var s cpuSample
		for i, v := range ms {
			s[i].d, s[i].ok = time.Duration(v)*time.Millisecond, v >= 0
		}
		return s
	}
	self, svc, be := pidGroup(1), pidGroup(2), pidGroup(3, 4)
	none := procGroup{none: true}
	for _, tt := range []struct {
		name                          string
		procs                         runProcs
		start, stop                   cpuSample
		ok                            bool
		pairs                         int
		client, service, backend, tot string // "-" for nil
		wantPIDs                      bool
	}{
		{name: "service target", procs: runProcs{client: self, service: svc, backend: be},
			start: sample(100, 200, 300), stop: sample(110, 230, 305), ok: true, pairs: 100,
			client: "100", service: "300", backend: "50", tot: "450", wantPIDs: true},
		{name: "redsync: no service", procs: runProcs{client: self, service: none, backend: be},
			start: sample(100, 0, 300), stop: sample(110, 0, 305), ok: true, pairs: 1000,
			client: "10", service: "-", backend: "5", tot: "15"},
		{name: "sqlite: no backend", procs: runProcs{client: self, service: svc, backend: none},
			start: sample(100, 200, 0), stop: sample(110, 230, 0), ok: true, pairs: 100,
			client: "100", service: "300", backend: "-", tot: "400"},
		{name: "--server without --server-pid", procs: runProcs{client: self, service: procGroup{}, backend: be},
			start: sample(100, -1, 300), stop: sample(110, -1, 305), ok: true, pairs: 100,
			client: "100", service: "-", backend: "50", tot: "-"},
		{name: "a backend that went away", procs: runProcs{client: self, service: svc, backend: be},
			start: sample(100, 200, 300), stop: sample(110, 230, -1), ok: true, pairs: 100,
			client: "100", service: "300", backend: "-", tot: "-"},
		{name: "a backend that restarted", procs: runProcs{client: self, service: svc, backend: be},
			start: sample(100, 200, 300), stop: sample(110, 230, 1), ok: true, pairs: 100,
			client: "100", service: "300", backend: "-", tot: "-"},
		{name: "no pairs", procs: runProcs{client: self, service: svc, backend: be},
			start: sample(100, 200, 300), stop: sample(110, 230, 305), ok: true,
			client: "-", service: "-", backend: "-", tot: "-"},
		{name: "window not sampled", procs: runProcs{client: self, service: svc, backend: be}, pairs: 100,
			client: "-", service: "-", backend: "-", tot: "-"},
	} {
		c := tt.procs.perPair(tt.start, tt.stop, tt.ok, tt.pairs)
		str := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return strconv.FormatFloat(*v, 'f', -1, 64)
		}
		got := []string{str(c.Client), str(c.Service), str(c.Backend), str(c.Total)}
		if want := []string{tt.client, tt.service, tt.backend, tt.tot}; !slices.Equal(got, want) {
			t.Errorf("%s: client, service, backend, total µs = %v, want %v", tt.name, got, want)
		}
		if c.NoService != tt.procs.service.none || c.NoBackend != tt.procs.backend.none {
			t.Errorf("%s: no service %v, no backend %v; want %v, %v", tt.name, c.NoService, c.NoBackend, tt.procs.service.none, tt.procs.backend.none)
		}
		if tt.wantPIDs && (c.ServicePID != 2 || !slices.Equal(c.BackendPIDs, []int{3, 4})) {
			t.Errorf("%s: service pid %d, backend pids %v; want 2 and [3 4]", tt.name, c.ServicePID, c.BackendPIDs)
		}
	}
}

// TestBenchBackendPIDs finds the dev backends' processes on this machine (deploy/dev runs them
// on loopback): each found pid is the named server, and what is not local is unknown.
func TestBenchBackendPIDs(t *testing.T) {
	t.Parallel()
	testenv.Redis(t, "") // fail loudly when the dev backends are down
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct {
		name  string
		find  func(context.Context) ([]int, error)
		n     int
		comms []string
	}{
		{"redis", func(ctx context.Context) ([]int, error) { return redisPIDs(ctx, []string{testenv.RedisAddr()}) }, 1, redisComms},
		{"redlock", func(ctx context.Context) ([]int, error) { return redisPIDs(ctx, testenv.RedlockAddrs()) }, 3, redisComms},
		{"mysql", func(ctx context.Context) ([]int, error) { return mysqlPIDs(ctx, testenv.MySQLDSN()) }, 1, mysqlComms},
		{"postgres", func(ctx context.Context) ([]int, error) { return postgresPIDs(ctx, testenv.PostgresURL()) }, 1, postgresComms},
		{"zookeeper", func(ctx context.Context) ([]int, error) { return zooKeeperPIDs(ctx, testenv.ZooKeeperAddrs()) }, 1, []string{"java"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pids, err := tt.find(ctx)
			if err != nil {
				t.Fatalf("found no %s process: %v", tt.name, err)
			}
			if distinct := slices.Compact(slices.Sorted(slices.Values(pids))); len(pids) != tt.n || len(distinct) != tt.n {
				t.Fatalf("found %s pids %v, want %d distinct", tt.name, pids, tt.n)
			}
			for _, pid := range pids {
				if err := checkComm(pid, tt.comms); err != nil {
					t.Errorf("%s pid %d: %v", tt.name, pid, err)
				}
			}
		})
	}
	if pids, err := redisPIDs(ctx, []string{"192.0.2.1:6379"}); err == nil {
		t.Errorf("redis on a TEST-NET address: pids %v, want unknown (not this machine)", pids)
	}

	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:6379", true}, {"localhost:6379", true}, {"[::1]:6379", true},
		{"192.0.2.1:6379", false}, {"no port", false},
	} {
		if got := isLocalAddr(ctx, tt.addr); got != tt.want {
			t.Errorf("isLocalAddr(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}

	cfg := filepath.Join(t.TempDir(), "zoo.cfg")
	if err := os.WriteFile(cfg, []byte("tickTime=1000\n clientPort = 2182\ndataDir=/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		arg  string
		want int
	}{{"2181", 2181}, {cfg, 2182}, {filepath.Join(t.TempDir(), "missing.cfg"), 0}} {
		if got := zooKeeperPort(tt.arg); got != tt.want {
			t.Errorf("zooKeeperPort(%q) = %d, want %d", tt.arg, got, tt.want)
		}
	}
}

// TestProcTreeCPUKeepsEndedChildren: a child's CPU time still counts in its parent's tree
// once the child has ended (the parent collected it), so the group of a server that runs a
// process per connection loses nothing when a connection closes.
func TestProcTreeCPUKeepsEndedChildren(t *testing.T) {
	t.Parallel()
	self := os.Getpid()
	before, err := procTreeCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	own0, _ := procCPU(self)
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	spent := time.Duration(child.ProcessState.UserTime() + child.ProcessState.SystemTime())
	after, err := procTreeCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	own1, _ := procCPU(self)
	// The tree's growth beyond the process's own is at least the ended child's time, give
	// or take a clock tick on each of the four readings.
	if grew := (after - before) - (own1 - own0); grew < spent-4*time.Second/userHZ {
		t.Fatalf("the tree grew by %v besides its own time, want the ended child's %v", grew, spent)
	}
}
