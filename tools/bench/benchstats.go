package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// runResult summarizes one run: one target at one number of concurrent clients.
type runResult struct {
	Target      string        `json:"target"`
	Clients     int           `json:"clients"`
	Pairs       int           `json:"pairs"`
	PairsPerSec float64       `json:"pairs_per_sec"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
	Max         time.Duration `json:"max_ns"`
	Errors      int           `json:"errors"`
	FirstError  string        `json:"first_error,omitempty"`
	// CPU is what one pair cost each process in CPU time; nil where it is not measured (the
	// ID benchmark's runs).
	CPU *pairCPU `json:"cpu_per_pair,omitempty"`
}

// ratio compares a service target with its peer library at one client count: pairs/s, and
// the total CPU time of a pair when both are known.
type ratio struct {
	Target   string   `json:"target"`
	Peer     string   `json:"peer"`
	Clients  int      `json:"clients"`
	Ratio    float64  `json:"ratio"`
	CPURatio *float64 `json:"cpu_per_pair_total_ratio,omitempty"`
}

// summarize merges the workers' samples of a run that measured for duration.
func summarize(samples []workerResult, clients int, duration time.Duration) runResult {
	r := runResult{Clients: clients}
	var all []time.Duration
	for _, s := range samples {
		all = append(all, s.latencies...)
		r.Errors += s.errors
		if r.FirstError == "" && s.firstErr != nil {
			r.FirstError = s.firstErr.Error()
		}
	}
	slices.Sort(all)
	r.Pairs = len(all)
	r.PairsPerSec = float64(len(all)) / duration.Seconds()
	r.P50 = percentile(all, 0.50)
	r.P99 = percentile(all, 0.99)
	if len(all) > 0 {
		r.Max = all[len(all)-1]
	}
	return r
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted, or 0 when it is
// empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ratios returns, for every service target with a peer (see peers) measured at the same
// client count, the service's pairs/s divided by the peer's and the service's total CPU time
// per pair divided by the peer's, in the order of the runs.
func ratios(results []runResult) []ratio {
	type run struct {
		target  string
		clients int
	}
	measured := map[run]runResult{}
	for _, r := range results {
		measured[run{r.Target, r.Clients}] = r
	}
	var out []ratio
	for _, r := range results {
		peer, ok := peers[r.Target]
		if !ok {
			continue
		}
		p, ok := measured[run{peer, r.Clients}]
		if !ok {
			continue
		}
		q := ratio{Target: r.Target, Peer: peer, Clients: r.Clients, Ratio: math.NaN()}
		if p.PairsPerSec > 0 {
			q.Ratio = r.PairsPerSec / p.PairsPerSec
		}
		if r.CPU != nil && p.CPU != nil && r.CPU.Total != nil && p.CPU.Total != nil && *p.CPU.Total > 0 {
			c := *r.CPU.Total / *p.CPU.Total
			q.CPURatio = &c
		}
		out = append(out, q)
	}
	return out
}

// writeReport prints the results as a table followed by the ratio lines, or as one JSON
// object when asJSON is set.
func writeReport(w io.Writer, results []runResult, asJSON bool) error {
	if asJSON {
		return writeJSON(w, results)
	}
	return writeTable(w, results)
}

// writeTable prints one row per run and then one ratio line per client count.
func writeTable(w io.Writer, results []runResult) error {
	return writeTables(w, lockTable(results))
}

// lockTable is the table of `coordbench lock`: one row per run, then one ratio line per
// service target and client count. The CPU columns are the client's (the bench process), the
// service's and the backend's per pair, and their total; with the service in-process, the
// client's and the service's are one column.
func lockTable(results []runResult) benchTable {
	inProcess := slices.ContainsFunc(results, func(r runResult) bool { return r.CPU != nil && r.CPU.InProcess })
	t := benchTable{header: []string{"target", "clients", "pairs", "pairs/s", "p50", "p99", "max", "errors"}}
	if inProcess {
		t.header = append(t.header, "cpu/pair client+service", "backend", "total")
	} else {
		t.header = append(t.header, "cpu/pair client", "service", "backend", "total")
	}
	for _, r := range results {
		row := []string{r.Target, strconv.Itoa(r.Clients), strconv.Itoa(r.Pairs), fmt.Sprintf("%.0f", r.PairsPerSec),
			fmtLatency(r.P50), fmtLatency(r.P99), fmtLatency(r.Max), strconv.Itoa(r.Errors)}
		c := r.CPU
		if c == nil {
			c = &pairCPU{}
		}
		row = append(row, fmtCPU(c.Client))
		if !inProcess {
			row = append(row, fmtCPU(c.Service))
		}
		t.rows = append(t.rows, append(row, fmtCPU(c.Backend), fmtCPU(c.Total)))
	}
	for _, q := range ratios(results) {
		cpu := "-"
		if q.CPURatio != nil {
			cpu = fmt.Sprintf("%.2f", *q.CPURatio)
		}
		t.notes = append(t.notes, fmt.Sprintf("ratio %s ÷ %s at %d clients: pairs/s %.2f, cpu/pair total %s", q.Target, q.Peer, q.Clients, q.Ratio, cpu))
	}
	if inProcess {
		t.notes = append(t.notes, "cpu/pair client+service: the service ran in the bench's own process (--in-process), so its CPU time is the clients' too")
	}
	return t
}

// writeJSON prints the results and ratios as one indented JSON object; durations are in
// nanoseconds and a ratio without a peer measurement is omitted.
func writeJSON(w io.Writer, results []runResult) error {
	qs := slices.DeleteFunc(ratios(results), func(q ratio) bool { return math.IsNaN(q.Ratio) })
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	err := enc.Encode(struct {
		Results []runResult `json:"results"`
		Ratios  []ratio     `json:"ratios"`
	}{results, qs})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// fmtLatency rounds d for the table: to the microsecond, or to 0.1ms from 10ms up.
func fmtLatency(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
