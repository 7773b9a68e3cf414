package lock

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// NewOwner returns a random owner secret: 26 base32 characters, 130 bits from crypto/rand.
func NewOwner() string {
	return rand.Text()
}

// ownerDigest is what the backends see of an owner secret, and all they store: its SHA-256,
// hex. The service hashes every owner at the edge, so no engine (Redis, ZooKeeper, SQL)
// keeps a secret that would release the lock if read, and comparing digests compares owners.
func ownerDigest(owner string) string {
	sum := sha256.Sum256([]byte("coordkit-owner:" + owner))
	return hex.EncodeToString(sum[:])
}

// holderIDBytes is the length of a holder id before hex encoding: 64 bits.
const holderIDBytes = 8

// NewHolderID returns a random holder id (16 hex characters) for a new lease. An engine
// stores it with the lease when the lease begins and reports it until the lease ends (a
// re-entry or a renewal keeps it), so it names the lease publicly: it is drawn from
// crypto/rand, never from the owner, so no guess of an owner can be confirmed against it.
func NewHolderID() string {
	var b [holderIDBytes]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// HolderIDOf derives a lease's holder id from a random value the engine already keeps as the
// lease's identity (a Redlock attempt id, a ZooKeeper node name with its random prefix): the
// same lease gives the same id on every instance, and the value itself, which the engine may
// use to tell leases apart, is not published. It is only as unguessable as nonce is.
func HolderIDOf(nonce string) string {
	sum := sha256.Sum256([]byte("coordkit-holder:" + nonce))
	return hex.EncodeToString(sum[:holderIDBytes])
}
