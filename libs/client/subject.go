package client

import (
	"github.com/coordkit/coordkit/libs/event/subject"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

// LockSubject is the NATS subject on which the service publishes kind's events about key of
// backend, for example coordkit.lock.v1.released.redis.order:42. Every key, whatever its
// characters, has its own subject (see subject.Token). Payloads are lockv1.LockEvent in
// their protobuf JSON form. kind UNSPECIFIED stands for every kind ("*").
func LockSubject(kind lockv1.LockEventKind, backend, key string) string {
	return subject.Lock(kindToken(kind), backend, key)
}

// LockSubjectAll is the subscription subject for kind's events about every key of backend,
// such as coordkit.lock.v1.released.redis.>; an empty backend stands for every backend, kind
// UNSPECIFIED for every kind.
func LockSubjectAll(kind lockv1.LockEventKind, backend string) string {
	if backend == "" {
		backend = "*"
	}
	return subject.LockPattern(kindToken(kind), backend)
}

func kindToken(kind lockv1.LockEventKind) string {
	switch kind {
	case lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED:
		return subject.Acquired
	case lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED:
		return subject.Released
	case lockv1.LockEventKind_LOCK_EVENT_KIND_EXPIRED:
		return subject.Expired
	}
	return "*"
}
