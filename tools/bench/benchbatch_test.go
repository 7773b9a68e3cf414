package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchLockBatch runs a short real `coordbench lock --batch` and checks that each call
// counts as its batch's pairs, without errors, under a target that says the batch size; and
// that a batch size out of range, or a target without batches, is refused.
func TestBenchLockBatch(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	args := []string{"lock", "--batch", "50", "--targets", "service/sqlite", "--clients", "2",
		"--duration", "300ms", "--warmup", "100ms", "--json"}
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("coordbench %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	var report struct {
		Results []runResult `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, out.String())
	}
	if len(report.Results) != 1 {
		t.Fatalf("%d runs, want 1:\n%s", len(report.Results), out.String())
	}
	r := report.Results[0]
	if r.Target != "service/sqlite batch 50" || r.Errors != 0 || r.Pairs == 0 || r.Pairs%50 != 0 {
		t.Errorf("run %+v: want target %q, no errors and a positive multiple of 50 pairs", r, "service/sqlite batch 50")
	}

	for _, bad := range [][]string{
		{"lock", "--batch", "0", "--targets", "service/sqlite"},
		{"lock", "--batch", "1001", "--targets", "service/sqlite"},
		{"lock", "--batch", "2", "--targets", "service/redis,redsync/redis"},
	} {
		if err := run(context.Background(), bad, &out, &errOut); err == nil || !strings.Contains(err.Error(), "--batch") {
			t.Errorf("coordbench %s: %v, want an error about --batch", strings.Join(bad, " "), err)
		}
	}
}
