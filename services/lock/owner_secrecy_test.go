package lock_test

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/services/lock"
)

// guessableOwner is long enough to pass the 16-byte minimum and yet guessable: a worker name
// and a counter, as a caller who picks owners by hand would.
const guessableOwner = "worker-7-0000000001"

// testHolderIDPerLease: a lease's holder id is the same from every instance, in Acquire's
// busy answer and in Inspect, kept by re-entry and renewal; another owner gets another one,
// and so does the same owner's next lease, so the id is not a function of the owner.
func testHolderIDPerLease(t *testing.T, bc backendCase) {
	a, b := pair(t, bc)
	ctx := context.Background()
	const key = "holder-id"
	first := must(acquire(ctx, a, key, guessableOwner, 10*time.Second, 0))(t)
	if !first.GetAcquired() {
		t.Fatalf("acquire = %v, want acquired", first)
	}
	id := inspect(t, a, key).GetHolderId()
	if len(id) != 16 {
		t.Fatalf("holder id %q, want 16 hex characters", id)
	}
	same := func(when string, c *client.Client) {
		t.Helper()
		if got := inspect(t, c, key).GetHolderId(); got != id {
			t.Fatalf("%s: holder id %q, want the lease's %q", when, got, id)
		}
	}
	same("inspect through the other instance", b)
	busy := must(acquire(ctx, b, key, "rival-owner-secret-0123456789", 10*time.Second, 0))(t)
	if busy.GetAcquired() || busy.GetHolder().GetHolderId() != id {
		t.Fatalf("rival's acquire = %v, want busy, holder %q", busy, id)
	}
	must(acquire(ctx, b, key, guessableOwner, 10*time.Second, 0))(t) // re-entry
	same("after a re-entry through the other instance", a)
	must(b.Locks().Renew(ctx, &lockv1.RenewRequest{Key: key, Owner: guessableOwner}))(t)
	same("after a renewal through the other instance", a)
	for range 2 {
		must(a.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: guessableOwner}))(t)
	}

	seen := map[string]string{id: "the first lease"}
	for _, next := range []struct{ who, owner string }{
		{"the same owner's next lease", guessableOwner},
		{"another owner's lease", "other-owner-secret-0123456789"},
	} {
		res := must(acquire(ctx, b, key, next.owner, 10*time.Second, 0))(t)
		if !res.GetAcquired() {
			t.Fatalf("%s: acquire = %v, want acquired", next.who, res)
		}
		got := inspect(t, a, key).GetHolderId()
		if prev, dup := seen[got]; dup || got == "" {
			t.Fatalf("%s has holder id %q, the same as %s; want a new one per lease", next.who, got, prev)
		}
		seen[got] = next.who
		must(b.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: next.owner}))(t)
	}
}

// testOwnerGuessUnconfirmable is the owner-guessing attack: an attacker who sees a holder id
// (Inspect, Watch, events) guesses the owner and hashes the guess with every public
// construction it can think of, the one this service once used among them. None may give
// the holder id, and an anonymous release with anything derived from the id is refused.
func testOwnerGuessUnconfirmable(t *testing.T, bc backendCase) {
	a, _ := pair(t, bc)
	ctx := context.Background()
	const key = "guess-me"
	must(acquire(ctx, a, key, guessableOwner, 10*time.Second, 0))(t)
	id := inspect(t, a, key).GetHolderId()
	if id == "" {
		t.Fatal("held lock shows no holder id")
	}
	for name, candidate := range publicDigests(guessableOwner) {
		if strings.Contains(candidate, id) {
			t.Fatalf("holder id %s is found in %s of the guessed owner: the guess is confirmed offline", id, name)
		}
	}
	for _, forged := range []string{id, id + id, strings.Repeat(id, 4)} {
		_, err := a.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: forged})
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("release with owner %q derived from the holder id = %v, want permission_denied", forged, err)
		}
	}
	if st := inspect(t, a, key); !st.GetHeld() || st.GetHolderId() != id {
		t.Fatalf("lock after the attack = %v, want still held by %s", st, id)
	}
}

// publicDigests are the ways anyone could hash a guessed owner without a secret: plain
// hashes, the service's former salted one ("coordkit-holder:"), its owner digest
// ("coordkit-owner:") and HolderIDOf applied to the owner and to that digest, in hex and
// base64.
func publicDigests(owner string) map[string]string {
	ownerDigest := sha256.Sum256([]byte("coordkit-owner:" + owner))
	inputs := map[string][]byte{
		"owner":                      []byte(owner),
		"coordkit-holder:owner":      []byte("coordkit-holder:" + owner),
		"coordkit-owner:owner":       []byte("coordkit-owner:" + owner),
		"the owner digest (hex)":     []byte(hex.EncodeToString(ownerDigest[:])),
		"coordkit-holder:owner hash": []byte("coordkit-holder:" + hex.EncodeToString(ownerDigest[:])),
	}
	out := map[string]string{
		"HolderIDOf(owner)":        lock.HolderIDOf(owner),
		"HolderIDOf(owner digest)": lock.HolderIDOf(hex.EncodeToString(ownerDigest[:])),
	}
	for in, b := range inputs {
		s256, s1, s512, m5 := sha256.Sum256(b), sha1.Sum(b), sha512.Sum512(b), md5.Sum(b)
		for hash, sum := range map[string][]byte{"sha256": s256[:], "sha1": s1[:], "sha512": s512[:], "md5": m5[:]} {
			out[hash+"("+in+") hex"] = hex.EncodeToString(sum)
			out[hash+"("+in+") base64"] = base64.RawURLEncoding.EncodeToString(sum)
		}
	}
	return out
}
