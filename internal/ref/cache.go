package ref

import "fmt"

// CacheAppend holds the arguments of CacheAppendFlash. All buffers are raw
// little-endian bytes; strides count elements, not bytes.
type CacheAppend struct {
	// Key and Value are the new tokens, dtype DType. Element (t, h, d) of Key
	// is at t*KTokenStride + h*KHeadStride + d (Value likewise with its
	// own strides).
	Key, Value []byte
	// KCache and VCache are the paged caches, dtype CacheDType, in flash
	// layout [NumBlocks, BlockSize, NumKVHeads, HeadDim]. They are written in
	// place.
	KCache, VCache []byte
	// SlotMapping[t] is the cache slot (block*BlockSize + row) of token t;
	// a negative slot skips the token.
	SlotMapping []int64
	// SlotRemap, when non-nil, maps a slot from SlotMapping to the slot
	// actually written; a negative remapped slot skips the token.
	SlotRemap []int64

	NumTokens, NumKVHeads, HeadDim, BlockSize, NumBlocks int

	KTokenStride, VTokenStride int
	KHeadStride, VHeadStride   int

	// DType is the dtype of Key and Value; CacheDType is the dtype of the
	// caches. Either CacheDType == DType, or CacheDType == E4M3 and DType is
	// F16 or BF16.
	DType, CacheDType DType
	// KScale and VScale divide K and V before the fp8 conversion; they are
	// ignored when CacheDType == DType.
	KScale, VScale float32
	// Layout is the caches' layout (the zero value is LayoutFlash).
	Layout Layout
}

// Layout is a paged KV-cache layout. x is 16 bytes over the cache element
// size (8 for f16/bf16, 16 for fp8), b = block, o = row in the block.
type Layout int

const (
	// LayoutFlash: K and V [NumBlocks, BlockSize, NumKVHeads, HeadDim].
	LayoutFlash Layout = iota
	// LayoutXSplit: K [NumBlocks, NumKVHeads, HeadDim/x, BlockSize, x],
	// V [NumBlocks, NumKVHeads, HeadDim, BlockSize].
	LayoutXSplit
	// LayoutShuffle: K as LayoutXSplit, V [NumBlocks, NumKVHeads,
	// BlockSize/x, HeadDim, x].
	LayoutShuffle
	// LayoutHND: K and V [NumBlocks, NumKVHeads, BlockSize, HeadDim].
	LayoutHND
)

// CacheIndex returns the element index of (slot, head h, element d) of the K
// (value=false) or V cache in layout l.
func CacheIndex(l Layout, value bool, slot, h, d, numKVHeads, headDim, blockSize, x int) int {
	b, o := slot/blockSize, slot%blockSize
	switch {
	case l == LayoutFlash:
		return (slot*numKVHeads+h)*headDim + d
	case l == LayoutHND:
		return ((b*numKVHeads+h)*blockSize+o)*headDim + d
	case !value: // x-split K, also the shuffle layout's K
		return (((b*numKVHeads+h)*(headDim/x)+d/x)*blockSize+o)*x + d%x
	case l == LayoutXSplit:
		return ((b*numKVHeads+h)*headDim+d)*blockSize + o
	case l == LayoutShuffle:
		return (((b*numKVHeads+h)*(blockSize/x)+o/x)*headDim+d)*x + o%x
	}
	panic(fmt.Sprintf("ref: unknown layout %d", l))
}

// CacheAppendFlash writes each token of a.Key and a.Value into its slot of
// a.KCache and a.VCache ("reshape and cache", flash layout).
//
// When a.CacheDType == a.DType the element bits are copied unchanged. When
// a.CacheDType is E4M3, each element x becomes E4M3FromFloat32(float32(x) /
// KScale) (VScale for V), the division done in float32, exactly as the kernel
// does it.
//
// Tokens are processed in order, so a later token with the same slot
// overwrites an earlier one. The GPU gives no order for duplicate slots, so
// tests must use distinct slots. A slot outside [0, NumBlocks*BlockSize),
// an unsupported dtype pair or a buffer too small for the shape panics: the
// caller validates its arguments first.
func CacheAppendFlash(a CacheAppend) {
	convert := a.CacheDType != a.DType
	if convert && !(a.CacheDType == E4M3 && (a.DType == F16 || a.DType == BF16)) {
		panic(fmt.Sprintf("ref: CacheAppendFlash: unsupported DType=%v CacheDType=%v", a.DType, a.CacheDType))
	}
	inSize, cacheSize := a.DType.Size(), a.CacheDType.Size()
	numSlots := a.NumBlocks * a.BlockSize
	tokenElems := a.NumKVHeads * a.HeadDim
	if want := numSlots * tokenElems * cacheSize; len(a.KCache) < want || len(a.VCache) < want {
		panic(fmt.Sprintf("ref: CacheAppendFlash: caches hold %d and %d bytes, want %d",
			len(a.KCache), len(a.VCache), want))
	}
	if len(a.SlotMapping) < a.NumTokens {
		panic(fmt.Sprintf("ref: CacheAppendFlash: SlotMapping has %d entries, want %d",
			len(a.SlotMapping), a.NumTokens))
	}

	x := 16 / cacheSize
	// copyToken moves one token of src (dtype DType) into cache slot slot.
	copyToken := func(dst, src []byte, value bool, t, slot, tokenStride, headStride int, scale float32) {
		for h := range a.NumKVHeads {
			for d := range a.HeadDim {
				si := t*tokenStride + h*headStride + d
				di := CacheIndex(a.Layout, value, slot, h, d, a.NumKVHeads, a.HeadDim, a.BlockSize, x)
				if !convert {
					copy(dst[di*cacheSize:(di+1)*cacheSize], src[si*inSize:(si+1)*inSize])
					continue
				}
				// Decode is exact, so float32 of it is the input value exactly;
				// the explicit conversion keeps the quotient rounded to float32.
				x := float32(DecodeAt(a.DType, src, si))
				EncodeAt(a.CacheDType, dst, di, float32(x/scale))
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
		copyToken(a.KCache, a.Key, false, t, int(slot), a.KTokenStride, a.KHeadStride, a.KScale)
		copyToken(a.VCache, a.Value, true, t, int(slot), a.VTokenStride, a.VHeadStride, a.VScale)
	}
}

// CacheGather holds the arguments of CacheGatherTokens.
type CacheGather struct {
	// KCache and VCache are the caches, dtype CacheDType, in Layout.
	KCache, VCache []byte
	// SlotMapping[t] is the slot gathered into row t; a negative slot leaves
	// row t untouched.
	SlotMapping []int64
	// KOut and VOut are [len(SlotMapping), NumKVHeads, HeadDim] of dtype
	// CacheDType, written in place.
	KOut, VOut []byte

	NumKVHeads, HeadDim, BlockSize, NumBlocks int
	CacheDType                                DType
	Layout                                    Layout
}

// CacheGatherTokens copies the cache elements of each slot back to token-major
// rows, bit for bit: the inverse of CacheAppendFlash with CacheDType ==
// DType. A slot outside the cache panics.
func CacheGatherTokens(a CacheGather) {
	size := a.CacheDType.Size()
	x := 16 / size
	numSlots := a.NumBlocks * a.BlockSize
	for t, slot := range a.SlotMapping {
		if slot < 0 {
			continue
		}
		if slot >= int64(numSlots) {
			panic(fmt.Sprintf("ref: CacheGatherTokens: row %d has slot %d, cache has %d slots", t, slot, numSlots))
		}
		for h := range a.NumKVHeads {
			for d := range a.HeadDim {
				oi := (t*a.NumKVHeads+h)*a.HeadDim + d
				ki := CacheIndex(a.Layout, false, int(slot), h, d, a.NumKVHeads, a.HeadDim, a.BlockSize, x)
				vi := CacheIndex(a.Layout, true, int(slot), h, d, a.NumKVHeads, a.HeadDim, a.BlockSize, x)
				copy(a.KOut[oi*size:(oi+1)*size], a.KCache[ki*size:(ki+1)*size])
				copy(a.VOut[oi*size:(oi+1)*size], a.VCache[vi*size:(vi+1)*size])
			}
		}
	}
}
