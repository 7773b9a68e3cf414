package event

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// SignatureHeader is the NATS header that carries an event's signature when the Bus has a
// key: "v1=" and the unpadded URL-safe base64 of HMAC-SHA256(key, subject NUL payload).
const SignatureHeader = "Coordkit-Sig"

const sigPrefix = "v1="

// MinKeyLen is the shortest events key accepted, in bytes.
const MinKeyLen = 16

// sign is the signature header value of a message on subject with data.
func sign(key []byte, subject string, data []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(subject))
	mac.Write([]byte{0})
	mac.Write(data)
	return sigPrefix + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// verified reports whether m carries key's signature of its subject and payload, and if
// not, why: "unsigned" or "bad_signature".
func verified(key []byte, m *nats.Msg) (bool, string) {
	got := m.Header.Get(SignatureHeader)
	if got == "" {
		return false, "unsigned"
	}
	if !hmac.Equal([]byte(got), []byte(sign(key, m.Subject, m.Data))) {
		return false, "bad_signature"
	}
	return true, ""
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
