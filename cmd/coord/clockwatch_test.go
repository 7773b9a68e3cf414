package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeWatchesClockSteps: coord serve exports its clock-step counter and drift gauge, so
// an operator of the backends that keep their own clock can see a step of this machine's.
func TestServeWatchesClockSteps(t *testing.T) {
	url := serve(t)
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"coordkit_clock_steps_total 0", "coordkit_clock_drift_seconds "} {
		if !strings.Contains(string(body), "\n"+m) {
			t.Errorf("/metrics has no %q", m)
		}
	}
}
