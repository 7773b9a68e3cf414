package event

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// SignatureHeader is the NATS header that carries an event's signature when the Bus has a
// key: "v2=" sender "." seq "." ms "." mac, where sender is the publishing Bus's random id
// (16 URL-safe base64 characters, new at every Open), seq the Bus's count of signed messages
// (from 1), ms the send time in Unix milliseconds, and mac the unpadded URL-safe base64 of
// HMAC-SHA256(key) over all three, the subject and the payload. Receivers drop a message
// whose time is more than the signature window from their clock (stale) or whose sender and
// seq they have already seen (replayed). The v1 form (no sender, seq or time) is refused.
const SignatureHeader = "Coordkit-Sig"

const sigPrefix = "v2="

// MinKeyLen is the shortest events key accepted, in bytes.
const MinKeyLen = 16

// DefaultSignatureWindow is how far a signed message's send time may be from a receiver's
// clock before the receiver drops it as stale, when Config.SignatureWindow is zero. The
// clocks of instances sharing a NATS must agree within it.
const DefaultSignatureWindow = time.Minute

// senderIDLen is the length of a sender id in bytes (16 base64 characters).
const senderIDLen = 12

// newSenderID is a fresh random sender id, in its header form.
func newSenderID() (string, error) {
	var raw [senderIDLen]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("event: random sender id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// sigMAC is the MAC of a v2 signature: every field length-prefixed, so none can be moved
// into its neighbour.
func sigMAC(key []byte, sender string, seq uint64, ms int64, subject string, data []byte) []byte {
	mac := hmac.New(sha256.New, key)
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		mac.Write(n[:])
		mac.Write(b)
	}
	mac.Write([]byte("coordkit-sig-v2"))
	field([]byte(sender))
	binary.BigEndian.PutUint64(n[:], seq)
	mac.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(ms))
	mac.Write(n[:])
	field([]byte(subject))
	field(data)
	return mac.Sum(nil)
}

// sign is the signature header value of message seq of sender, sent at ms on subject with
// data.
func sign(key []byte, sender string, seq uint64, ms int64, subject string, data []byte) string {
	return sigPrefix + sender + "." + strconv.FormatUint(seq, 10) + "." + strconv.FormatInt(ms, 10) + "." +
		base64.RawURLEncoding.EncodeToString(sigMAC(key, sender, seq, ms, subject, data))
}

// signed is what a verified signature says: who sent the message, its number and when.
type signed struct {
	sender string
	seq    uint64
	ms     int64
}

// verified returns what m's signature says when it is key's signature of m's subject and
// payload, or why not: "unsigned" or "bad_signature" (also an old v1 signature).
func verified(key []byte, m *nats.Msg) (signed, string) {
	got := m.Header.Get(SignatureHeader)
	if got == "" {
		return signed{}, "unsigned"
	}
	rest, ok := strings.CutPrefix(got, sigPrefix)
	if !ok {
		return signed{}, "bad_signature"
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 || len(parts[0]) != base64.RawURLEncoding.EncodedLen(senderIDLen) {
		return signed{}, "bad_signature"
	}
	seq, err1 := strconv.ParseUint(parts[1], 10, 64)
	ms, err2 := strconv.ParseInt(parts[2], 10, 64)
	mac, err3 := base64.RawURLEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || seq == 0 {
		return signed{}, "bad_signature"
	}
	if !hmac.Equal(mac, sigMAC(key, parts[0], seq, ms, m.Subject, m.Data)) {
		return signed{}, "bad_signature"
	}
	return signed{sender: parts[0], seq: seq, ms: ms}, ""
}

// LoadKeyFile reads an events key: the file's content, surrounding white space dropped, of
// at least MinKeyLen bytes. Every instance sharing a NATS must use the same key.
func LoadKeyFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("event: key file: %w", err)
	}
	key := bytes.TrimSpace(data)
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("event: key file %s: want at least %d bytes, got %d", path, MinKeyLen, len(key))
	}
	return key, nil
}

// LoadOrCreateKeyFile reads the key file at path, or writes a new random key there (0600,
// 32 bytes in hex) when it does not exist yet; created says which.
func LoadOrCreateKeyFile(path string) (key []byte, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return nil, false, fmt.Errorf("event: random key: %w", err)
		}
		key = []byte(hex.EncodeToString(raw[:]))
		switch err := writeSecretFile(path, append(key, '\n')); {
		case err == nil:
			return key, true, nil
		case !errors.Is(err, os.ErrExist): // else another process just wrote it: read that
			return nil, false, err
		}
	}
	key, err = LoadKeyFile(path)
	return key, false, err
}
