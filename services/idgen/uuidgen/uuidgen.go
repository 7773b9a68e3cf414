// Package uuidgen makes RFC 9562 UUIDs, version 4 (random) and version 7 (time-ordered), as
// the 36-character strings the ID service answers with. It does what google/uuid's NewRandom
// and NewV7 followed by String do, with the same version 7 layout, at about half the cost:
// random bytes come from a buffer of crypto/rand output refilled 4 KiB at a time instead of
// one read per UUID, the time is read once, and the text is written in one pass.
//
// The buffer holds random bytes that later UUIDs will carry, in this process's memory: code
// that can read the process's memory could predict them. google/uuid documents the same of
// its EnableRandPool. Version 4 UUIDs remain unguessable to anyone outside the process.
package uuidgen

import (
	"crypto/rand"
	"sync"
	"time"
)

// poolBytes is how much crypto/rand output one refill reads: 256 version 4 UUIDs.
const poolBytes = 4096

// Generator makes UUIDs. Version 7 UUIDs of one Generator strictly increase, also within a
// millisecond and across clock steps backwards (the time then stands still until the clock
// catches up). It is safe for concurrent use; the zero value is not: use New.
type Generator struct {
	clock func() time.Time

	mu     sync.Mutex
	pool   [poolBytes]byte
	used   int   // bytes of pool handed out; poolBytes when empty
	lastV7 int64 // ms<<12 | 12-bit sub-millisecond fraction of the last version 7 UUID
}

// New returns a Generator reading the time from clock; nil means time.Now.
func New(clock func() time.Time) *Generator {
	if clock == nil {
		clock = time.Now
	}
	return &Generator{clock: clock, used: poolBytes}
}

// random copies len(dst) random bytes into dst. It must be called with mu held.
func (g *Generator) random(dst []byte) {
	if g.used+len(dst) > poolBytes {
		rand.Read(g.pool[:]) // never fails: crypto/rand crashes the program rather
		g.used = 0
	}
	g.used += copy(dst, g.pool[g.used:])
}

// V4 returns a new random UUID.
func (g *Generator) V4() string {
	var u [16]byte
	g.mu.Lock()
	g.random(u[:])
	g.mu.Unlock()
	var s [36]byte
	format(&s, setV4(&u))
	return string(s[:])
}

// V7 returns a new time-ordered UUID.
func (g *Generator) V7() string {
	var u [16]byte
	g.mu.Lock()
	g.v7(&u)
	g.mu.Unlock()
	var s [36]byte
	format(&s, &u)
	return string(s[:])
}

// Append appends n new UUIDs of version 4, or of version 7 when v7, to dst. Their text is
// one allocation, which every one of them keeps alive: they are meant to be sent, not kept
// apart from each other for long.
func (g *Generator) Append(dst []string, n int, v7 bool) []string {
	switch {
	case n == 1 && v7:
		return append(dst, g.V7())
	case n == 1:
		return append(dst, g.V4())
	}
	text := make([]byte, n*36)
	var u [16]byte
	g.mu.Lock()
	for i := range n {
		if v7 {
			g.v7(&u)
		} else {
			g.random(u[:])
			setV4(&u)
		}
		format((*[36]byte)(text[i*36:]), &u)
	}
	g.mu.Unlock()
	all := string(text)
	for i := range n {
		dst = append(dst, all[i*36:(i+1)*36])
	}
	return dst
}

func setV4(u *[16]byte) *[16]byte {
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant 10
	return u
}

// v7 fills u with a version 7 UUID: 48 bits of Unix milliseconds, the version, 12 bits of
// sub-millisecond fraction (RFC 9562 section 6.2, method 3, as google/uuid does), the
// variant and 62 random bits. The time and fraction together strictly increase. It must be
// called with mu held.
func (g *Generator) v7(u *[16]byte) {
	nano := g.clock().UnixNano()
	ms := nano / 1e6
	t := ms<<12 | (nano-ms*1e6)>>8 // (nano % 1e6) >> 8 is below 3907: 12 bits
	if t <= g.lastV7 {
		t = g.lastV7 + 1
	}
	g.lastV7 = t
	ms = t >> 12
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6], u[7] = 0x70|byte(t>>8&0x0f), byte(t)
	g.random(u[8:])
	u[8] = u[8]&0x3f | 0x80
}

// format writes u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in lowercase hex.
func format(dst *[36]byte, u *[16]byte) {
	const hex = "0123456789abcdef"
	j := 0
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j], dst[j+1] = hex[b>>4], hex[b&0x0f]
		j += 2
	}
}
