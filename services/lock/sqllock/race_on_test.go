//go:build race

package sqllock

// raceEnabled: the race detector (with checkptr) makes the pure-Go SQLite about ten times
// slower, so the long tests do less under it.
const raceEnabled = true
