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

// contendResult summarizes one target of `coordbench contend`.
type contendResult struct {
	Target         string        `json:"target"`
	Clients        int           `json:"clients"`
	Instances      int           `json:"instances,omitempty"` // 0: not through the service
	Handoffs       int           `json:"handoffs"`
	HandoffsPerSec float64       `json:"handoffs_per_sec"`
	WaitP50        time.Duration `json:"wait_p50_ns"`
	WaitP99        time.Duration `json:"wait_p99_ns"`
	WaitMax        time.Duration `json:"wait_max_ns"`
	ShareMin       int           `json:"share_min"`        // acquisitions of the least served client
	ShareMax       int           `json:"share_max"`        // acquisitions of the most served client
	ShareSpread    *float64      `json:"share_spread_pct"` // share ±%: largest |a client's acquisitions − mean| ÷ mean, in %; nil: none
	Errors         int           `json:"errors"`
	FirstError     string        `json:"first_error,omitempty"`
	Overlaps       int64         `json:"overlap_violations"`
	StaleTokens    int64         `json:"fencing_violations"`
	FirstViolation string        `json:"first_violation,omitempty"`
}

// contendRatio compares a service target with go-redsync measured in the same run.
type contendRatio struct {
	Target   string  `json:"target"`
	Peer     string  `json:"peer"`
	Handoffs float64 `json:"handoffs_ratio"` // the service's handoffs/s ÷ the peer's
	WaitP99  float64 `json:"wait_p99_ratio"` // the service's p99 wait ÷ the peer's
}

// summarizeContention merges the clients' measurements of a run that measured for duration.
func summarizeContention(clients []contendClient, x *exclusion, duration time.Duration) contendResult {
	var r contendResult
	var all []time.Duration
	for i, c := range clients {
		all = append(all, c.waits...)
		r.Handoffs += c.handoffs
		r.Errors += c.errors
		if r.FirstError == "" && c.firstErr != nil {
			r.FirstError = c.firstErr.Error()
		}
		if i == 0 || len(c.waits) < r.ShareMin {
			r.ShareMin = len(c.waits)
		}
		r.ShareMax = max(r.ShareMax, len(c.waits))
	}
	r.ShareSpread = shareSpread(clients)
	slices.Sort(all)
	r.HandoffsPerSec = float64(r.Handoffs) / duration.Seconds()
	r.WaitP50 = percentile(all, 0.50)
	r.WaitP99 = percentile(all, 0.99)
	if len(all) > 0 {
		r.WaitMax = all[len(all)-1]
	}
	r.Overlaps, r.StaleTokens = x.overlaps.Load(), x.staleTokens.Load()
	r.FirstViolation = x.first
	return r
}

// shareSpread returns the largest distance of one client's acquisitions from the clients'
// mean, in percent of that mean, or nil when the mean is zero.
func shareSpread(clients []contendClient) *float64 {
	total := 0
	for _, c := range clients {
		total += len(c.waits)
	}
	if total == 0 {
		return nil
	}
	mean := float64(total) / float64(len(clients))
	var dev float64
	for _, c := range clients {
		dev = max(dev, math.Abs(float64(len(c.waits))-mean))
	}
	pct := 100 * dev / mean
	return &pct
}

// contendRatios returns, for every service target, its handoffs/s and p99 wait divided by
// go-redsync's, when go-redsync was measured in the same run; a ratio over zero is NaN.
func contendRatios(results []contendResult) []contendRatio {
	i := slices.IndexFunc(results, func(r contendResult) bool { return r.Target == contendPeer })
	if i < 0 {
		return nil
	}
	peer := results[i]
	div := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	var out []contendRatio
	for _, r := range results {
		if !isServiceTarget(r.Target) {
			continue
		}
		out = append(out, contendRatio{
			Target: r.Target, Peer: peer.Target,
			Handoffs: div(r.HandoffsPerSec, peer.HandoffsPerSec),
			WaitP99:  div(float64(r.WaitP99), float64(peer.WaitP99)),
		})
	}
	return out
}

// writeContendReport prints the results as a table followed by the ratio lines, or as one
// JSON object (durations in nanoseconds, NaN ratios as null) when asJSON is set.
func writeContendReport(w io.Writer, results []contendResult, asJSON bool) error {
	if asJSON {
		type jsonRatio struct {
			Target   string   `json:"target"`
			Peer     string   `json:"peer"`
			Handoffs *float64 `json:"handoffs_ratio"`
			WaitP99  *float64 `json:"wait_p99_ratio"`
		}
		finite := func(f float64) *float64 {
			if math.IsNaN(f) {
				return nil
			}
			return &f
		}
		qs := []jsonRatio{}
		for _, q := range contendRatios(results) {
			qs = append(qs, jsonRatio{q.Target, q.Peer, finite(q.Handoffs), finite(q.WaitP99)})
		}
		if results == nil {
			results = []contendResult{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Results []contendResult `json:"results"`
			Ratios  []jsonRatio     `json:"ratios"`
		}{results, qs}); err != nil {
			return fmt.Errorf("bench contend: %w", err)
		}
		return nil
	}
	return writeTables(w, contendTable(results))
}

// contendTable is the table of `coordbench contend`: one row per target, then one ratio
// line per service target.
func contendTable(results []contendResult) benchTable {
	dash := func(n int, ok bool) string {
		if !ok {
			return "-"
		}
		return strconv.Itoa(n)
	}
	pct := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", *p)
	}
	t := benchTable{header: []string{"target", "clients", "inst", "handoffs", "handoffs/s", "wait p50", "wait p99", "wait max",
		"share min", "share max", "share ±%", "errors", "overlaps", "stale tokens"}}
	for _, r := range results {
		t.rows = append(t.rows, []string{r.Target, strconv.Itoa(r.Clients), dash(r.Instances, r.Instances > 0),
			strconv.Itoa(r.Handoffs), fmt.Sprintf("%.0f", r.HandoffsPerSec),
			fmtLatency(r.WaitP50), fmtLatency(r.WaitP99), fmtLatency(r.WaitMax), strconv.Itoa(r.ShareMin), strconv.Itoa(r.ShareMax),
			pct(r.ShareSpread), strconv.Itoa(r.Errors), strconv.FormatInt(r.Overlaps, 10), dash(int(r.StaleTokens), isServiceTarget(r.Target))})
	}
	for _, q := range contendRatios(results) {
		t.notes = append(t.notes, fmt.Sprintf("ratio %s ÷ %s: handoffs/s %.2f, wait p99 %.2f", q.Target, q.Peer, q.Handoffs, q.WaitP99))
	}
	return t
}
