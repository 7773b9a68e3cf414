package lock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// TestBadInput sends every kind of bad request over the wire and checks its documented code,
// that the message names the field, and that the held lock is untouched.
func TestBadInput(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	a := inst.client
	ctx := context.Background()
	held := must(acquire(ctx, a, "held", "the-owner-secret-0123456789", time.Minute, 0))(t)
	locks := a.Locks()
	d := durationpb.New
	tests := []struct {
		name  string
		call  func() error
		code  connect.Code
		field string
	}{
		{"empty key", func() error { _, err := acquire(ctx, a, "", "", time.Second, 0); return err }, connect.CodeInvalidArgument, "key"},
		{"key over 512 bytes", func() error { _, err := acquire(ctx, a, strings.Repeat("k", 513), "", time.Second, 0); return err }, connect.CodeInvalidArgument, "key"},
		// Go clients refuse to send invalid UTF-8, so this one goes raw; the protobuf decoder
		// rejects it before the handler runs, with a message that names the string field.
		{"key not UTF-8", func() error { return rawAcquire(t, inst.url, []byte{0x0a, 4, 'b', 'a', 'd', 0xff}) }, connect.CodeInvalidArgument, "string field"},
		{"key with NUL", func() error { _, err := acquire(ctx, a, "a\x00b", "", time.Second, 0); return err }, connect.CodeInvalidArgument, "key"},
		{"ttl too short", func() error { _, err := acquire(ctx, a, "k", "", 99*time.Millisecond, 0); return err }, connect.CodeInvalidArgument, "ttl"},
		{"ttl too long", func() error { _, err := acquire(ctx, a, "k", "", 25*time.Hour, 0); return err }, connect.CodeInvalidArgument, "ttl"},
		{"ttl malformed", func() error {
			_, err := locks.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}})
			return err
		}, connect.CodeInvalidArgument, "ttl"},
		{"negative wait", func() error { _, err := acquire(ctx, a, "k", "", time.Second, -time.Second); return err }, connect.CodeInvalidArgument, "wait"},
		{"wait over an hour", func() error { _, err := acquire(ctx, a, "k", "", time.Second, 2*time.Hour); return err }, connect.CodeInvalidArgument, "wait"},
		{"owner too long", func() error { _, err := acquire(ctx, a, "k", strings.Repeat("o", 129), time.Second, 0); return err }, connect.CodeInvalidArgument, "owner"},
		// An owner is the only credential of a lock: one short enough to guess is refused on
		// every call that takes one, before any backend is asked.
		{"acquire with an owner under 16 bytes", func() error { _, err := acquire(ctx, a, "k", "worker-7", time.Second, 0); return err }, connect.CodeInvalidArgument, "owner: "},
		{"acquire with a 15-byte owner", func() error { _, err := acquire(ctx, a, "k", strings.Repeat("o", 15), time.Second, 0); return err }, connect.CodeInvalidArgument, "owner: "},
		{"release with a short owner", func() error {
			_, err := locks.Release(ctx, &lockv1.ReleaseRequest{Key: "held", Owner: "the-owner"})
			return err
		}, connect.CodeInvalidArgument, "owner: "},
		{"renew with a short owner", func() error {
			_, err := locks.Renew(ctx, &lockv1.RenewRequest{Key: "held", Owner: "the-owner", Ttl: d(time.Hour)})
			return err
		}, connect.CodeInvalidArgument, "owner: "},
		{"unknown backend", func() error {
			_, err := locks.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Backend: "etcd"})
			return err
		}, connect.CodeInvalidArgument, "backend"},
		{"release without owner", func() error {
			_, err := locks.Release(ctx, &lockv1.ReleaseRequest{Key: "held"})
			return err
		}, connect.CodeInvalidArgument, "owner"},
		{"release by wrong owner", func() error {
			_, err := locks.Release(ctx, &lockv1.ReleaseRequest{Key: "held", Owner: "thief-secret-0123456789"})
			return err
		}, connect.CodePermissionDenied, "another owner"},
		{"renew by wrong owner", func() error {
			_, err := locks.Renew(ctx, &lockv1.RenewRequest{Key: "held", Owner: "thief-secret-0123456789", Ttl: d(time.Hour)})
			return err
		}, connect.CodePermissionDenied, "another owner"},
		{"renew with bad ttl", func() error {
			_, err := locks.Renew(ctx, &lockv1.RenewRequest{Key: "held", Owner: "the-owner-secret-0123456789", Ttl: d(time.Millisecond)})
			return err
		}, connect.CodeInvalidArgument, "ttl"},
		{"release of a free lock", func() error {
			_, err := locks.Release(ctx, &lockv1.ReleaseRequest{Key: "free", Owner: "free-owner-secret-0123456789"})
			return err
		}, connect.CodeFailedPrecondition, "not held"},
		{"inspect empty key", func() error {
			_, err := locks.Inspect(ctx, &lockv1.InspectRequest{})
			return err
		}, connect.CodeInvalidArgument, "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, err, tt.code)
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %q", err, tt.field)
			}
		})
	}
	st := inspect(t, a, "held")
	if !st.GetHeld() || st.GetHoldCount() != 1 || st.GetFencingToken() != held.GetLease().GetFencingToken() ||
		!st.GetExpiresAt().AsTime().After(time.Now().Add(50*time.Second)) {
		t.Fatalf("held lock after bad requests = %v, want unchanged", st)
	}
	if st := inspect(t, a, "k"); st.GetHeld() {
		t.Fatalf("a rejected acquire left state behind: %v", st)
	}
}

// rawAcquire posts a hand-made binary protobuf AcquireRequest and returns the Connect error
// the service answers with.
func rawAcquire(t *testing.T, url string, body []byte) error {
	t.Helper()
	res, err := http.Post(url+"/coordkit.lock.v1.LockService/Acquire", "application/proto", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer res.Body.Close()
	var e struct{ Code, Message string }
	if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
		t.Fatalf("status %d with no Connect error body: %v", res.StatusCode, err)
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.Code)); err != nil {
		t.Fatalf("unknown code %q: %v", e.Code, err)
	}
	return connect.NewError(code, errors.New(e.Message))
}
