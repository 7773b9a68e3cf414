package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
)

// switchStep is the fixed segment size of the switch measurement: small, so that a run of
// switchCalls crosses thousands of segment boundaries.
const (
	switchStep  = 50_000
	switchCalls = 10_000_000
)

// switchResult compares single-ID segment calls that moved to the next segment with all
// others: with the double buffer the next segment is already loaded, so both should look
// alike.
type switchResult struct {
	Step       int64         `json:"step"`
	Switches   int           `json:"switch_calls"`
	Others     int           `json:"other_calls"`
	SwitchP50  time.Duration `json:"switch_p50_ns"`
	SwitchP99  time.Duration `json:"switch_p99_ns"`
	SwitchMax  time.Duration `json:"switch_max_ns"`
	OtherP50   time.Duration `json:"other_p50_ns"`
	OtherP99   time.Duration `json:"other_p99_ns"`
	OtherMax   time.Duration `json:"other_max_ns"`
	SwitchOver float64       `json:"switch_p99_over_other_p99"`
}

// benchSegmentSwitch times switchCalls single-ID calls of the in-process segment engine's
// double buffer on SQLite with a fixed step, and splits the latencies at segment boundaries.
// Segments of one tag and one instance are contiguous, so a call switched segments exactly
// when its ID is a multiple of the step past the first one.
func benchSegmentSwitch(ctx context.Context, syncMode sqldb.Synchronous) (switchResult, error) {
	res := switchResult{Step: switchStep}
	dir, err := os.MkdirTemp("", "coord-bench-switch-")
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	db, err := sqldb.OpenSQLite(ctx, filepath.Join(dir, "ids.db"), sqldb.WithSynchronous(syncMode))
	if err != nil {
		return res, err
	}
	defer db.Close()
	store, err := segment.NewStore(ctx, db)
	if err != nil {
		return res, err
	}
	if _, err := store.Create(ctx, "switch", 1, switchStep, ""); err != nil {
		return res, fmt.Errorf("bench: create tag: %w", err)
	}
	pool := block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.DiscardHandler), Name: "segment"})
	defer pool.Close()

	first, err := pool.Next(ctx, "switch", 1) // loads the first segment synchronously
	if err != nil {
		return res, err
	}
	var switches, others []time.Duration
	for range switchCalls {
		start := time.Now()
		ids, err := pool.Next(ctx, "switch", 1)
		took := time.Since(start)
		if err != nil {
			return res, err
		}
		if (ids[0]-first[0])%switchStep == 0 {
			switches = append(switches, took)
		} else {
			others = append(others, took)
		}
	}
	slices.Sort(switches)
	slices.Sort(others)
	res.Switches, res.Others = len(switches), len(others)
	res.SwitchP50, res.SwitchP99 = percentile(switches, 0.5), percentile(switches, 0.99)
	res.OtherP50, res.OtherP99 = percentile(others, 0.5), percentile(others, 0.99)
	if len(switches) > 0 {
		res.SwitchMax = switches[len(switches)-1]
	}
	if len(others) > 0 {
		res.OtherMax = others[len(others)-1]
	}
	res.SwitchOver = float64(res.SwitchP99) / float64(max(res.OtherP99, 1))
	return res, nil
}

// switchLine describes the switch measurement in one line.
func switchLine(r switchResult) string {
	return fmt.Sprintf("segment switch (in-process, step %d): %d switching calls p50 %s p99 %s max %s; %d other calls p50 %s p99 %s max %s; p99 ratio %.2f",
		r.Step, r.Switches, r.SwitchP50, r.SwitchP99, r.SwitchMax, r.Others, r.OtherP50, r.OtherP99, r.OtherMax, r.SwitchOver)
}
