package ref

import "fmt"

// CacheAppend holds the arguments of CacheAppendFlash. All buffers are raw
// little-endian bytes; strides count elements, not bytes.
type CacheAppend struct {
	// Key and Value are the new tokens, dtype In. Element (t, h, d) of Key is
	// at t*KeyTokenStride + h*KeyHeadStride + d (Value likewise with its own
	// strides).
	Key, Value []byte
	// KeyCache and ValueCache are the paged caches, dtype Cache, in flash
	// layout [NumBlocks, BlockSize, NumKVHeads, HeadDim]. They are written in
	// place.
	KeyCache, ValueCache []byte
	// SlotMapping[t] is the cache slot (block*BlockSize + row) of token t;
	// a negative slot skips the token.
	SlotMapping []int64
	// SlotRemap, when non-nil, maps a slot from SlotMapping to the slot
	// actually written; a negative remapped slot skips the token.
	SlotRemap []int64

	NumTokens, NumKVHeads, HeadDim, BlockSize, NumBlocks int

	KeyTokenStride, ValueTokenStride int
	KeyHeadStride, ValueHeadStride   int

	// In is the dtype of Key and Value; Cache is the dtype of the caches.
	// Either Cache == In, or Cache == E4M3 and In is F16 or BF16.
	In, Cache DType
	// KScale and VScale divide K and V before the fp8 conversion; they are
	// ignored when Cache == In.
	KScale, VScale float32
}

// CacheAppendFlash writes each token of a.Key and a.Value into its slot of
// a.KeyCache and a.ValueCache ("reshape and cache", flash layout).
//
// When a.Cache == a.In the element bits are copied unchanged. When a.Cache is
// E4M3, each element x becomes E4M3FromFloat32(float32(x) / KScale) (VScale for
// V), the division done in float32, exactly as the kernel does it.
//
// Tokens are processed in order, so a later token with the same slot
// overwrites an earlier one. The GPU gives no order for duplicate slots, so
// tests must use distinct slots. A slot outside [0, NumBlocks*BlockSize),
// an unsupported dtype pair or a buffer too small for the shape panics: the
// caller validates its arguments first.
func CacheAppendFlash(a CacheAppend) {
	convert := a.Cache != a.In
	if convert && !(a.Cache == E4M3 && (a.In == F16 || a.In == BF16)) {
		panic(fmt.Sprintf("ref: CacheAppendFlash: unsupported In=%v Cache=%v", a.In, a.Cache))
	}
	inSize, cacheSize := a.In.Size(), a.Cache.Size()
	numSlots := a.NumBlocks * a.BlockSize
	tokenElems := a.NumKVHeads * a.HeadDim
	if want := numSlots * tokenElems * cacheSize; len(a.KeyCache) < want || len(a.ValueCache) < want {
		panic(fmt.Sprintf("ref: CacheAppendFlash: caches hold %d and %d bytes, want %d",
			len(a.KeyCache), len(a.ValueCache), want))
	}
	if len(a.SlotMapping) < a.NumTokens {
		panic(fmt.Sprintf("ref: CacheAppendFlash: SlotMapping has %d entries, want %d",
			len(a.SlotMapping), a.NumTokens))
	}

	// copyToken moves one token of src (dtype In) into cache slot slot.
	copyToken := func(dst, src []byte, t, slot, tokenStride, headStride int, scale float32) {
		for h := range a.NumKVHeads {
			for d := range a.HeadDim {
				si := t*tokenStride + h*headStride + d
				di := slot*tokenElems + h*a.HeadDim + d
				if !convert {
					copy(dst[di*cacheSize:(di+1)*cacheSize], src[si*inSize:(si+1)*inSize])
					continue
				}
				// Decode is exact, so float32 of it is the input value exactly;
				// the explicit conversion keeps the quotient rounded to float32.
				x := float32(DecodeAt(a.In, src, si))
				EncodeAt(a.Cache, dst, di, float32(x/scale))
			}
		}
	}

	for t := range a.NumTokens {
		slot := a.SlotMapping[t]
		if slot < 0 {
			continue
		}
		if a.SlotRemap != nil {
			slot = a.SlotRemap[slot]
			if slot < 0 {
				continue
			}
		}
		if slot >= int64(numSlots) {
			panic(fmt.Sprintf("ref: CacheAppendFlash: token %d has slot %d, cache has %d slots",
				t, slot, numSlots))
		}
		copyToken(a.KeyCache, a.Key, t, int(slot), a.KeyTokenStride, a.KeyHeadStride, a.KScale)
		copyToken(a.ValueCache, a.Value, t, int(slot), a.ValueTokenStride, a.ValueHeadStride, a.VScale)
	}
}
