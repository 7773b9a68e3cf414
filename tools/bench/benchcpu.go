package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. The kernel reports them in
// USER_HZ, which is 100 on every architecture Go runs Linux on; sysconf(_SC_CLK_TCK) only
// returns that constant, and it is libc's, not a system call golang.org/x/sys/unix could
// make. One tick is 10ms of one process's CPU time: over a run of a few thousand pairs that
// is a few microseconds per pair.
const userHZ = 100

// errProcStat is the error of a /proc/<pid>/stat that does not read as one.
var errProcStat = errors.New("bench: malformed /proc/<pid>/stat")

// procCPU returns the CPU time, user plus system, that process pid has used so far, all its
// threads together.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat returns utime + stime from the text of /proc/<pid>/stat. The command name,
// field 2, is in parentheses and may hold spaces and parentheses itself, so the fields are
// counted from the last ')'.
func parseProcStat(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errProcStat
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, state; utime and stime are 14 and 15
	if len(f) < 13 {
		return 0, errProcStat
	}
	utime, uerr := strconv.ParseUint(f[11], 10, 64)
	stime, serr := strconv.ParseUint(f[12], 10, 64)
	if uerr != nil || serr != nil {
		return 0, errProcStat
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// procGroup is the processes one CPU column of a run adds up. With no pids it is either
// none (the role has no process of its own, so it costs nothing: redsync has no service,
// SQLite lives in the service) or unknown.
type procGroup struct {
	pids []int
	none bool
	// tree counts each pid with its children (see procTreeCPU): a server of one process
	// per connection (PostgreSQL).
	tree bool
}

// pidGroup is the group of pids, or unknown when there are none.
func pidGroup(pids ...int) procGroup { return procGroup{pids: pids} }

// known reports whether the group is a process or none, not unknown.
func (g procGroup) known() bool { return g.none || len(g.pids) > 0 }

// cpu returns the CPU time the group has used so far; ok is false when it is unknown or a
// process of it cannot be read (gone, or /proc not there).
func (g procGroup) cpu() (d time.Duration, ok bool) {
	if !g.known() {
		return 0, false
	}
	for _, pid := range g.pids {
		read := procCPU
		if g.tree {
			read = procTreeCPU
		}
		c, err := read(pid)
		if err != nil {
			return 0, false
		}
		d += c
	}
	return d, true
}

// runProcs are the processes the pairs of one target cost CPU time in, by role.
type runProcs struct {
	client, service, backend procGroup
	// inProcess: the service runs in the client's process, which client counts for both.
	inProcess bool
}

// cpuSample is the CPU time each role of a run had used at one moment.
type cpuSample [3]struct {
	d  time.Duration
	ok bool
}

// sample reads the CPU time of every role now.
func (p runProcs) sample() cpuSample {
	var s cpuSample
	for i, g := range [3]procGroup{p.client, p.service, p.backend} {
		s[i].d, s[i].ok = g.cpu()
	}
	return s
}

// sampleWindow samples at from and at end, the start and end of a run's measured window;
// ok is false when ctx ended first.
func (p runProcs) sampleWindow(ctx context.Context, from, end time.Time) (start, stop cpuSample, ok bool) {
	if !sleepUntil(ctx, from) {
		return start, stop, false
	}
	start = p.sample()
	if !sleepUntil(ctx, end) {
		return start, stop, false
	}
	return start, p.sample(), true
}

// sleepUntil waits until t or until ctx ends, and reports whether t came first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pairCPU is the CPU time one acquire+release pair cost each process of a run, in
// microseconds: the processes' utime + stime from /proc/<pid>/stat over the measured window,
// divided by the pairs that completed in it. A part is null when it was not measured: its
// process is unknown, or there is none (NoService, NoBackend), which makes it zero in Total.
// Total is null when a part that exists is unknown.
type pairCPU struct {
	Client  *float64 `json:"client_us"`
	Service *float64 `json:"service_us"`
	Backend *float64 `json:"backend_us"`
	Total   *float64 `json:"total_us"`
	// InProcess: the service ran in the bench's own process (--in-process), so Client holds
	// the service's CPU time too.
	InProcess bool `json:"in_process,omitempty"`
	// NoService: the target has no service process (redsync calls Redis itself).
	NoService bool `json:"no_service,omitempty"`
	// NoBackend: the backend has no process of its own (SQLite lives in the service).
	NoBackend bool `json:"no_backend,omitempty"`
	// ServicePID and BackendPIDs are the processes measured, when known.
	ServicePID  int   `json:"service_pid,omitempty"`
	BackendPIDs []int `json:"backend_pids,omitempty"`
}

// perPair turns the samples taken at the start and end of a window in which pairs completed
// into the CPU time per pair.
func (p runProcs) perPair(start, stop cpuSample, ok bool, pairs int) *pairCPU {
	c := &pairCPU{InProcess: p.inProcess, NoService: p.service.none && !p.inProcess, NoBackend: p.backend.none, BackendPIDs: p.backend.pids}
	if len(p.service.pids) == 1 {
		c.ServicePID = p.service.pids[0]
	}
	if !ok || pairs == 0 {
		return c
	}
	parts := [3]**float64{&c.Client, &c.Service, &c.Backend}
	groups := [3]procGroup{p.client, p.service, p.backend}
	total, complete := 0.0, true
	for i, g := range groups {
		if g.none {
			continue
		}
		if !start[i].ok || !stop[i].ok || stop[i].d < start[i].d {
			complete = false
			continue
		}
		us := float64(stop[i].d-start[i].d) / float64(time.Microsecond) / float64(pairs)
		*parts[i] = &us
		total += us
	}
	if complete {
		c.Total = &total
	}
	return c
}

// fmtCPU formats a CPU time per pair for the table: microseconds, a tenth of one below 10,
// or "-" when it was not measured.
func fmtCPU(us *float64) string {
	switch {
	case us == nil:
		return "-"
	case *us < 10:
		return fmt.Sprintf("%.1fµs", *us)
	}
	return fmt.Sprintf("%.0fµs", *us)
}
