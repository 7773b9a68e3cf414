package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMain builds the coord binary the tests run as coord serve once, from this repository,
// into defaultCoord.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "coordbench-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		defaultCoord = filepath.Join(dir, "coord")
		build := exec.Command("go", "build", "-o", defaultCoord, ".")
		build.Dir = filepath.Join("..", "..", "cmd", "coord")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build ./cmd/coord: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// coordbench runs coordbench with args in-process and returns its output and error.
func coordbench(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}
