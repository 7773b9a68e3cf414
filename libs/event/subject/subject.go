// Package subject names coordkit's NATS subjects: versioned, one token per part, with any
// key encoded as one token by Token. It has no dependencies, so the SDK and subscribers in
// any program can use it without pulling in NATS.
//
//	coordkit.lock.v1.<kind>.<backend>.<key token>    kind: acquired, released, expired
package subject

import "strings"

// LockPrefix starts every lock event subject.
const LockPrefix = "coordkit.lock.v1"

// Lock event kinds, the subject's fourth token.
const (
	Acquired = "acquired"
	Released = "released"
	Expired  = "expired"
)

// Lock is the subject of kind's events about one key of one backend.
func Lock(kind, backend, key string) string {
	return LockPrefix + "." + kind + "." + Token(backend) + "." + Token(key)
}

// LockPattern is a subscription subject for every key of backend: kind and backend may be
// "*" for any, e.g. LockPattern(Released, "*") is coordkit.lock.v1.released.*.>.
func LockPattern(kind, backend string) string {
	if backend != "*" {
		backend = Token(backend)
	}
	return LockPrefix + "." + kind + "." + backend + ".>"
}

// ParseLock splits a lock event subject into its kind, backend and key; ok is false for a
// subject that Lock did not make.
func ParseLock(subj string) (kind, backend, key string, ok bool) {
	rest, found := strings.CutPrefix(subj, LockPrefix+".")
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", "", "", false
	}
	var err error
	if backend, err = ParseToken(parts[1]); err != nil {
		return "", "", "", false
	}
	if key, err = ParseToken(parts[2]); err != nil {
		return "", "", "", false
	}
	return parts[0], backend, key, true
}
