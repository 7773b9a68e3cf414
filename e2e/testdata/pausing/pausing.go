// Package pausing is what the paused-process helpers (pauseholder, pauseworker) share: the
// JSON lines they report, and the wait for the test's SIGSTOP and SIGCONT.
package pausing

import (
	"encoding/json"
	"log"
	"os"
	"runtime"
	"time"
)

// Emit prints v as one JSON line on stdout.
func Emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(append(b, '\n')) //nolint:errcheck // the test reads it or fails
}

// AwaitPause emits held, then narrows the process to one P and spins, reading the clock,
// until the clock jumps by more than gap: the test stopped the process with SIGSTOP once it
// read held (so the stop always falls inside the clock readings), and continued it. The
// spinning goroutine is the first to run after SIGCONT and holds the only P, so the
// runtime's timers cannot run before the caller's first checks. It returns the last reading
// before the jump; call Resumed after those checks.
func AwaitPause(held any, gap time.Duration) time.Time {
	runtime.GOMAXPROCS(1)
	last := time.Now()
	Emit(held)
	for spinning := last; ; {
		now := time.Now()
		if now.Sub(last) > gap {
			return last
		}
		if now.Sub(spinning) > time.Minute { // the test is gone: do not spin on a core for ever
			log.Fatal("no pause within a minute of the report")
		}
		last = now
	}
}

// Resumed gives the process all its Ps back after the first checks, and returns how long
// they came after the last reading before the pause: the pause as the process saw it.
func Resumed(last time.Time) time.Duration {
	d := time.Since(last)
	runtime.GOMAXPROCS(runtime.NumCPU())
	return d
}
