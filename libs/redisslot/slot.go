// Package redisslot is Redis Cluster's slot math, so every service can name the keys one
// script touches with hash tags that put them in one slot, whatever bytes a client put in
// the names.
package redisslot

import (
	"strings"
	"sync"
)

// Count is the number of Redis Cluster hash slots.
const Count = 16384

// Of is the Redis Cluster hash slot of a key name: CRC16 of its hash tag (the part between
// the first '{' and the first '}' after it, when not empty) or of the whole name, modulo 16384.
func Of(name string) int {
	if open := strings.IndexByte(name, '{'); open >= 0 {
		if end := strings.IndexByte(name[open+1:], '}'); end > 0 {
			name = name[open+1 : open+1+end]
		}
	}
	return int(crc16(name) % Count)
}

// Tag returns a short string without braces whose slot is slot: "{" + Tag(s) + "}" at the
// start of a key's name puts it in slot s.
func Tag(slot int) string { return tags()[slot] }

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster hashes
// keys with, a table lookup per byte (the service hashes every lock key it touches).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

// crc16Table is crc16's result for each leading byte.
var crc16Table = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// tags holds, for every slot, a short base-36 string whose CRC16 falls in it.
var tags = sync.OnceValue(func() []string {
	t := make([]string, Count)
	left := Count
	for i := 0; left > 0; i++ {
		s := strconv36(i)
		if slot := crc16(s) % Count; t[slot] == "" {
			t[slot] = s
			left--
		}
	}
	return t
})

func strconv36(i int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 36 {
		b = append([]byte{digits[i%36]}, b...)
	}
	return string(b)
}
