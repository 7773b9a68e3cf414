package client

import (
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
)

// LockSubject is the NATS subject on which the service publishes kind's events about key of
// backend, for example coordkit.lock.v1.released.redis.order:42. Every key, whatever its
// characters, has its own subject (see subject.Token). Payloads are lockv1.LockEvent in
// their protobuf JSON form. kind UNSPECIFIED stands for every kind ("*").
func LockSubject(kind lockv1.LockEventKind, backend, key string) string {
	return subject.Lock(subject.LockKind(kind), backend, key)
}

// LockSubjectAll is the subscription subject for kind's events about every key of backend,
// such as coordkit.lock.v1.released.redis.>; an empty backend stands for every backend, kind
// UNSPECIFIED for every kind.
func LockSubjectAll(kind lockv1.LockEventKind, backend string) string {
	if backend == "" {
		backend = "*"
	}
	return subject.LockPattern(subject.LockKind(kind), backend)
}
