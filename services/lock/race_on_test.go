//go:build race

package lock_test

// raceEnabled: the race detector allows 8,128 live goroutines, so the scale tests open fewer
// streams under it.
const raceEnabled = true
