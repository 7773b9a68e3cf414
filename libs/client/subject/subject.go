// Package subject names coordkit's NATS subjects: versioned, one token per part, with any
// key encoded as one token by Token. It does not depend on NATS, so the SDK and subscribers
// in any program can use it without pulling in a NATS client or server.
//
//	coordkit.lock.v1.<kind>.<backend>.<key token>    kind: acquired, released, expired
//	coordkit.taskpick.v1.available.<backend>.<pool token>
package subject

import (
	"strings"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// LockPrefix starts every lock event subject.
const LockPrefix = "coordkit.lock.v1"

// Lock event kinds, the subject's fourth token.
const (
	Acquired = "acquired"
	Released = "released"
	Expired  = "expired"
)

// LockKind is the subject token of an event kind: acquired, released or expired, and "*"
// (every kind) for UNSPECIFIED or an unknown kind.
func LockKind(k lockv1.LockEventKind) string {
	switch k {
	case lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED:
		return Acquired
	case lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED:
		return Released
	case lockv1.LockEventKind_LOCK_EVENT_KIND_EXPIRED:
		return Expired
	}
	return "*"
}

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
