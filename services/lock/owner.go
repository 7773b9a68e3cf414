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

// HolderID is the public fingerprint of an owner secret: stable, short, and useless for
// releasing or renewing the lock.
func HolderID(owner string) string {
	sum := sha256.Sum256([]byte("coordkit-holder:" + owner))
	return hex.EncodeToString(sum[:8])
}
