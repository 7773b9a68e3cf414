package lock

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// leaseToProto is l as its holder sees it; start is when the service took up the call that
// acquired or renewed it. expires_after is the lease's end measured from start: the backend
// was asked after start and its ExpiresAt is a lower bound of the real end, so a client that
// adds the span to its own send time (earlier than start) stays inside the lease whatever the
// two wall clocks say. Both times carry monotonic readings when ExpiresAt was computed in
// this process, so a step of the service's wall clock meanwhile does not skew the span.
func leaseToProto(backend string, l Lease, start time.Time) *lockv1.Lease {
	return &lockv1.Lease{
		ExpiresAfter: durationpb.New(max(l.ExpiresAt.Sub(start), 0)),
		Key:          l.Key,
		Backend:      backend,
		Owner:        l.Owner,
		FencingToken: l.FencingToken,
		ExpiresAt:    timestamppb.New(l.ExpiresAt),
		HoldCount:    l.HoldCount,
	}
}

func stateToProto(key, backend string, st State) *lockv1.LockState {
	out := &lockv1.LockState{Key: key, Backend: backend, Held: st.Held}
	if st.Held {
		out.HolderId = st.HolderID
		out.FencingToken = st.FencingToken
		out.ExpiresAt = timestamppb.New(st.ExpiresAt)
		out.HoldCount = st.HoldCount
	}
	return out
}
