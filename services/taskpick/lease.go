package taskpick

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// MaxLeaseSecretBytes is the longest lease_secret a request may carry; the service's own are
// 26 bytes.
const MaxLeaseSecretBytes = 128

// NewLeaseSecret returns a random lease secret: 26 base32 characters, 130 bits from
// crypto/rand. Pick hands it to the worker and nobody else; the backends keep its digest.
func NewLeaseSecret() string {
	return rand.Text()
}

// LeaseDigest is what the backends store of a lease secret and compare on Ack, Nack and
// Extend: its SHA-256, hex, under a domain prefix of its own. So a reader of the store (or
// of Get, which shows neither) cannot finish a lease, and comparing digests compares secrets.
// The secret's 130 random bits make the digest as hard to invert as the secret is to guess.
func LeaseDigest(secret string) string {
	sum := sha256.Sum256([]byte("coordkit-task-lease:" + secret))
	return hex.EncodeToString(sum[:])
}

// newLeases draws n lease secrets and their digests.
func newLeases(n int) (secrets, digests []string) {
	secrets, digests = make([]string, n), make([]string, n)
	for i := range n {
		secrets[i] = NewLeaseSecret()
		digests[i] = LeaseDigest(secrets[i])
	}
	return secrets, digests
}
