//go:build !race

package testenv

// Race reports whether the binary was built with the race detector. It allows 8,128 live
// goroutines and makes code (the pure-Go SQLite most of all) several times slower, so scale
// tests do less under it.
const Race = false
