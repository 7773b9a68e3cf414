package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestCLIIDRoundTrip drives `coord id` against `coord serve` with the embedded store and the
// test Redis: every mode, decode, and the segment tag admin.
func TestCLIIDRoundTrip(t *testing.T) {
	t.Parallel()
	url := serve(t, "--redis-addr", testenv.RedisAddr())
	tag := testenv.Prefix(t)
	id := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := coord(t, append(append([]string{"id"}, args...), "--server", url)...)
		if err != nil {
			t.Fatalf("coord id %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	out := id(t, "create-tag", tag, "--start", "500", "--step", "10", "--description", "cli test")
	if !strings.Contains(out, "first ID 500") {
		t.Fatalf("create-tag printed %q, want the first ID 500", out)
	}
	tests := []struct {
		mode, tag string
		want      func(ids []string) bool
	}{
		{mode: "uuid-v4", want: func(ids []string) bool { return len(ids[0]) == 36 }},
		{mode: "uuid-v7", want: func(ids []string) bool { return len(ids[0]) == 36 && ids[0][14] == '7' }},
		{mode: "snowflake", want: increasing},
		{mode: "segment", tag: tag, want: func(ids []string) bool { return ids[0] == "500" && increasing(ids) }},
		{mode: "redis-incr", tag: tag, want: increasing},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			ids := strings.Fields(id(t, "next", "--mode", tt.mode, "--tag", tt.tag, "--count", "25"))
			if len(ids) != 25 || !tt.want(ids) {
				t.Fatalf("next --mode %s printed %v, want 25 valid IDs", tt.mode, ids)
			}
		})
	}

	sf := strings.TrimSpace(id(t, "next", "--mode", "snowflake"))
	if out := id(t, "decode", sf); !strings.Contains(out, "worker id") || !strings.Contains(out, "sequence") {
		t.Fatalf("decode printed %q, want time, worker id and sequence", out)
	}
	var decoded struct {
		Time     string `json:"time"`
		WorkerID uint32 `json:"workerId"`
	}
	if err := json.Unmarshal([]byte(id(t, "decode", sf, "--json")), &decoded); err != nil || decoded.Time == "" {
		t.Fatalf("decode --json: %v (%+v)", err, decoded)
	}

	out = id(t, "tags")
	if !strings.Contains(out, tag) || !strings.Contains(out, "cli test") {
		t.Fatalf("tags printed %q, want %s with its description", out, tag)
	}
	var listed struct {
		Tags []struct {
			Tag     string `json:"tag"`
			MaxID   string `json:"maxId"`
			Current *struct {
				Position string `json:"position"`
			} `json:"current"`
		} `json:"tags"`
	}
	if err := json.Unmarshal([]byte(id(t, "tags", "--json")), &listed); err != nil || len(listed.Tags) != 1 || listed.Tags[0].Current == nil {
		t.Fatalf("tags --json: %v (%+v), want one tag with a current segment", err, listed)
	}

	// update-tag changes only what it is told; delete-tag removes the tag.
	if out := id(t, "update-tag", tag, "--step", "20"); !strings.Contains(out, "step 20") || !strings.Contains(out, `"cli test"`) {
		t.Fatalf("update-tag --step 20 printed %q, want step 20 and the description kept", out)
	}
	if out := id(t, "update-tag", tag, "--description", ""); !strings.Contains(out, `description ""`) || !strings.Contains(out, "step 20") {
		t.Fatalf("update-tag --description '' printed %q, want it cleared and the step kept", out)
	}
	if r := cli(t, "id", "update-tag", tag, "--server", url); r.code != exitUsage {
		t.Fatalf("update-tag with nothing to change = exit %d, want 2", r.code)
	}
	other := tag + "-del"
	id(t, "create-tag", other)
	id(t, "next", "--mode", "segment", "--tag", other) // reserves [1, 1001): max id 1001
	if out := id(t, "delete-tag", other); !strings.Contains(out, "deleted tag "+other) {
		t.Fatalf("delete-tag printed %q", out)
	}
	if out := id(t, "tags"); strings.Contains(out, other) {
		t.Fatalf("tags after delete-tag still lists %s:\n%s", other, out)
	}
	// Created again without --start, it continues where it stopped (the default start used to
	// be 1, below the tombstone, so this failed until --start 0 was typed).
	if out := id(t, "create-tag", other); !strings.Contains(out, "first ID 1001") {
		t.Fatalf("create-tag of a deleted tag printed %q, want it to continue at its max id 1001", out)
	}

	// Bad input fails with the field named, and exits non-zero.
	for _, args := range [][]string{
		{"next", "--mode", "segment", "--tag", "no-such-tag"},
		{"next", "--mode", "snowflake", "--count", "0"},
		{"decode", "1234"},
		{"create-tag", tag},
		{"delete-tag", tag + "-never"},
	} {
		out, err := coord(t, append(append([]string{"id"}, args...), "--server", url)...)
		if err == nil {
			t.Fatalf("coord id %s succeeded with %q, want an error", strings.Join(args, " "), out)
		}
	}
}

// increasing reports whether ids are strictly increasing decimal numbers.
func increasing(ids []string) bool {
	prev := int64(-1)
	for _, s := range ids {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= prev {
			return false
		}
		prev = n
	}
	return true
}
