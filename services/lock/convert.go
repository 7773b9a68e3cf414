package lock

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

func leaseToProto(backend string, l Lease) *lockv1.Lease {
	return &lockv1.Lease{
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
