package redisslot

import (
	"math/rand/v2"
	"testing"
)

// bitwiseCRC16 is CRC-16/XMODEM one bit at a time, the definition crc16's table follows.
func bitwiseCRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestCRC16Table: the table-driven crc16 equals the bit-by-bit definition on the check
// string of CRC-16/XMODEM and on random byte strings of every length up to 600.
func TestCRC16Table(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#04x, want 0x31c3 (CRC-16/XMODEM check value)", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 600 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		if got, want := crc16(string(b)), bitwiseCRC16(string(b)); got != want {
			t.Fatalf("crc16 of %x = %#04x, want %#04x", b, got, want)
		}
	}
}
