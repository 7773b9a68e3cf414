package client_test

import (
	"fmt"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

func ExampleLockSubject() {
	fmt.Println(client.LockSubject(lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, "redis", "order:42"))
	fmt.Println(client.LockSubject(lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED, "sqlite", "a.b *>"))
	fmt.Println(client.LockSubjectAll(lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, "redis"))
	fmt.Println(client.LockSubjectAll(lockv1.LockEventKind_LOCK_EVENT_KIND_UNSPECIFIED, ""))
	// Output:
	// coordkit.lock.v1.released.redis.order:42
	// coordkit.lock.v1.acquired.sqlite.a%2Eb%20%2A%3E
	// coordkit.lock.v1.released.redis.>
	// coordkit.lock.v1.*.*.>
}
