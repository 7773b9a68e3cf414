package main

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestMain runs main instead of the tests when the test binary is started as the command
// (also as the child process main starts to serve the null service).
func TestMain(m *testing.M) {
	if os.Getenv("NULLSERVICE_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestRuns runs the experiment briefly, with and without the Redis step, against the dev
// Redis, so that it keeps building and working as the SDK changes.
func TestRuns(t *testing.T) {
	t.Parallel()
	ratio := regexp.MustCompile(`ratio null(\+redis)? ÷ redsync at 2 clients: pairs/s [0-9.]+`)
	for _, step := range []string{"false", "true"} {
		t.Run("redis-step="+step, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-clients", "2", "-d", "200ms", "-redis-step="+step)
			cmd.Env = append(os.Environ(), "NULLSERVICE_MAIN=1")
			out, err := cmd.CombinedOutput()
			if err != nil || !ratio.Match(out) {
				t.Fatalf("nullservice -redis-step=%s: %v\n%s", step, err, out)
			}
		})
	}
}
