package main

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestMain runs main instead of the tests when the test binary is started as the command.
func TestMain(m *testing.M) {
	if os.Getenv("TRANSPORTCEILING_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestEveryMode runs the experiment briefly over each transport, so that it keeps building
// and working as the code around it changes.
func TestEveryMode(t *testing.T) {
	t.Parallel()
	line := regexp.MustCompile(`clients=2 inflight=1: [0-9]+ ops/s, [0-9.]+ ops/batch, [0-9.]+ us CPU/op`)
	for _, mode := range []string{"unary", "fdx", "h2", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-mode", mode, "-clients", "2", "-d", "200ms")
			cmd.Env = append(os.Environ(), "TRANSPORTCEILING_MAIN=1")
			out, err := cmd.CombinedOutput()
			if err != nil || !line.Match(out) {
				t.Fatalf("transportceiling -mode %s: %v\n%s", mode, err, out)
			}
		})
	}
}
