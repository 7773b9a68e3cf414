//go:build !race

package lock_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
