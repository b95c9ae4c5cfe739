package nftables

import (
	"encoding/binary"
	"math/bits"
)

// jhash is the kernel's jhash() (include/linux/jhash.h), which nft's
// "jhash" expression runs over the key's bytes.
func jhash(k []byte, initval uint32) uint32 {
	n := uint32(len(k))
	a := 0xdeadbeef + n + initval
	b, c := a, a
	for len(k) > 12 {
		a += binary.NativeEndian.Uint32(k[0:])
		b += binary.NativeEndian.Uint32(k[4:])
		c += binary.NativeEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	if len(k) == 0 {
		return c
	}
	var tail [12]byte
	copy(tail[:], k)
	// Bytes are added in little-endian significance, whatever the CPU.
	a += binary.LittleEndian.Uint32(tail[0:])
	b += binary.LittleEndian.Uint32(tail[4:])
	c += binary.LittleEndian.Uint32(tail[8:])
	return final(a, b, c)
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
