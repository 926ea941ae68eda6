package ref

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const poison = 0xab

// cacheCase builds a CacheAppend with strided, random inputs and poisoned caches.
func cacheCase(t *testing.T, rng *rand.Rand, in, cache DType, slots, remap []int64) CacheAppend {
	t.Helper()
	const numKVHeads, headDim, blockSize, numBlocks = 3, 5, 4, 6
	a := CacheAppend{
		SlotMapping: slots, SlotRemap: remap,
		NumTokens: len(slots), NumKVHeads: numKVHeads, HeadDim: headDim,
		BlockSize: blockSize, NumBlocks: numBlocks,
		// Padding between heads and tokens, different for K and V.
		KTokenStride: numKVHeads*(headDim+2) + 1, KHeadStride: headDim + 2,
		VTokenStride: numKVHeads * headDim * 2, VHeadStride: headDim,
		DType: in, CacheDType: cache, KScale: 0.37, VScale: 2.5,
	}
	random := func(n int) []float32 {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * 3)
		}
		return vals
	}
	a.Key = EncodeSlice(in, random(len(slots)*a.KTokenStride))
	a.Value = EncodeSlice(in, random(len(slots)*a.VTokenStride))
	cacheBytes := numBlocks * blockSize * numKVHeads * headDim * cache.Size()
	a.KCache = bytes.Repeat([]byte{poison}, cacheBytes)
	a.VCache = bytes.Repeat([]byte{poison}, cacheBytes)
	return a
}

// checkCache verifies every cache element: written slots hold the token's
// element (as want computes it from the input bits), the rest keep the poison.
func checkCache(t *testing.T, a CacheAppend, written map[int64]int) {
	t.Helper()
	size := a.CacheDType.Size()
	inSize := a.DType.Size()
	for _, kv := range []struct {
		name               string
		src, dst           []byte
		tokStride, hStride int
		scale              float32
	}{
		{"K", a.Key, a.KCache, a.KTokenStride, a.KHeadStride, a.KScale},
		{"V", a.Value, a.VCache, a.VTokenStride, a.VHeadStride, a.VScale},
	} {
		for slot := range int64(a.NumBlocks * a.BlockSize) {
			tok, ok := written[slot]
			for h := range a.NumKVHeads {
				for d := range a.HeadDim {
					di := (int(slot)*a.NumKVHeads+h)*a.HeadDim + d
					got := kv.dst[di*size : (di+1)*size]
					if !ok {
						require.Equalf(t, bytes.Repeat([]byte{poison}, size), got, "%s slot %d untouched", kv.name, slot)
						continue
					}
					si := tok*kv.tokStride + h*kv.hStride + d
					src := kv.src[si*inSize : (si+1)*inSize]
					var want []byte
					if a.CacheDType == a.DType {
						want = src
					} else {
						x := float32(DecodeAt(a.DType, src, 0))
						want = []byte{E4M3FromFloat32(x / kv.scale)}
					}
					require.Equalf(t, want, got, "%s slot %d head %d dim %d (token %d)", kv.name, slot, h, d, tok)
				}
			}
		}
	}
}

func TestCacheAppendFlash(t *testing.T) {
	tests := []struct {
		name      string
		in, cache DType
		slots     []int64
		remap     []int64
		written   map[int64]int // slot → token
	}{
		{
			name: "f16 copy", in: F16, cache: F16,
			slots:   []int64{5, -1, 0, 23, 12},
			written: map[int64]int{5: 0, 0: 2, 23: 3, 12: 4},
		},
		{
			name: "bf16 copy", in: BF16, cache: BF16,
			slots:   []int64{7, 8, 9, -3},
			written: map[int64]int{7: 0, 8: 1, 9: 2},
		},
		{
			name: "f16 to e4m3", in: F16, cache: E4M3,
			slots:   []int64{1, 2, 3, 16, -1, 4},
			written: map[int64]int{1: 0, 2: 1, 3: 2, 16: 3, 4: 5},
		},
		{
			name: "bf16 to e4m3", in: BF16, cache: E4M3,
			slots:   []int64{20, 21},
			written: map[int64]int{20: 0, 21: 1},
		},
		{
			name: "remap", in: F16, cache: F16,
			slots:   []int64{0, 1, 2, -1},
			remap:   []int64{10, -1, 3},
			written: map[int64]int{10: 0, 3: 2},
		},
		{
			name: "duplicate slot: last token wins", in: F16, cache: E4M3,
			slots:   []int64{6, 6},
			written: map[int64]int{6: 1},
		},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := cacheCase(t, rng, tc.in, tc.cache, tc.slots, tc.remap)
			CacheAppendFlash(a)
			checkCache(t, a, tc.written)
		})
	}
}

func TestCacheAppendFlashE4M3Values(t *testing.T) {
	a := CacheAppend{
		Key:         EncodeSlice(F16, []float32{3, 1000}),
		Value:       EncodeSlice(F16, []float32{-0.75, 1e-4}),
		KCache:      make([]byte, 2),
		VCache:      make([]byte, 2),
		SlotMapping: []int64{0},
		NumTokens:   1, NumKVHeads: 1, HeadDim: 2, BlockSize: 1, NumBlocks: 1,
		KTokenStride: 2, VTokenStride: 2, KHeadStride: 2, VHeadStride: 2,
		DType: F16, CacheDType: E4M3, KScale: 0.5, VScale: 0.25,
	}
	CacheAppendFlash(a)
	// 3/0.5 = 6 = 1.5·2^2; 1000/0.5 saturates to 448.
	assert.Equal(t, []byte{0x4c, 0x7e}, a.KCache)
	// -0.75/0.25 = -3 = -1.5·2^1; 1e-4 (as f16) / 0.25 is below half of 2^-9.
	assert.Equal(t, []byte{0xc4, 0x00}, a.VCache)
	assert.Equal(t, []float64{6, 448}, DecodeSlice(E4M3, a.KCache))
}

func TestCacheAppendFlashPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tests := []struct {
		name      string
		in, cache DType
		slots     []int64
		remap     []int64
	}{
		{"slot past the cache", F16, F16, []int64{0, 24}, nil},
		{"remapped slot past the cache", F16, F16, []int64{0}, []int64{99}},
		{"e4m3 input", E4M3, F16, []int64{0}, nil},
		{"f16 to bf16", F16, BF16, []int64{0}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			a := cacheCase(t, rng, in, tc.cache, tc.slots, tc.remap)
			assert.Panics(t, func() { CacheAppendFlash(a) })
		})
	}
	t.Run("cache too small", func(t *testing.T) {
		a := cacheCase(t, rng, F16, F16, []int64{0}, nil)
		a.VCache = a.VCache[:len(a.VCache)-1]
		assert.Panics(t, func() { CacheAppendFlash(a) })
	})
}

// TestCacheIndexIsABijection checks that every layout maps (slot, head,
// element) onto each cache element exactly once, for K and for V.
func TestCacheIndexIsABijection(t *testing.T) {
	const blocks, heads = 3, 2
	for _, l := range []Layout{LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND} {
		for _, x := range []int{8, 16} {
			for _, value := range []bool{false, true} {
				bs, dim := 32, 48
				seen := make([]int, blocks*bs*heads*dim)
				for slot := range blocks * bs {
					for h := range heads {
						for d := range dim {
							seen[CacheIndex(l, value, slot, h, d, heads, dim, bs, x)]++
						}
					}
				}
				for i, n := range seen {
					require.Equal(t, 1, n, "layout %d x %d value %v: element %d hit %d times", l, x, value, i, n)
				}
			}
		}
	}
}

// TestCacheGatherInvertsAppend writes tokens in every layout and gathers them
// back bit for bit.
func TestCacheGatherInvertsAppend(t *testing.T) {
	const tokens, heads, dim, bs, blocks = 20, 3, 32, 16, 2
	g := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, tokens*heads*dim)
	for i := range vals {
		vals[i] = float32(g.NormFloat64())
	}
	key := EncodeSlice(F16, vals)
	slots := make([]int64, tokens)
	for i, p := range g.Perm(blocks * bs)[:tokens] {
		slots[i] = int64(p)
	}
	for _, l := range []Layout{LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND} {
		kc := make([]byte, blocks*bs*heads*dim*2)
		vc := make([]byte, len(kc))
		CacheAppendFlash(CacheAppend{Key: key, Value: key, KCache: kc, VCache: vc, SlotMapping: slots,
			NumTokens: tokens, NumKVHeads: heads, HeadDim: dim, BlockSize: bs, NumBlocks: blocks,
			KTokenStride: heads * dim, VTokenStride: heads * dim, KHeadStride: dim, VHeadStride: dim,
			DType: F16, CacheDType: F16, Layout: l})
		ko := make([]byte, len(key))
		vo := make([]byte, len(key))
		CacheGatherTokens(CacheGather{KCache: kc, VCache: vc, SlotMapping: slots, KOut: ko, VOut: vo,
			NumKVHeads: heads, HeadDim: dim, BlockSize: bs, NumBlocks: blocks, CacheDType: F16, Layout: l})
		require.Equal(t, key, ko, "layout %d keys", l)
		require.Equal(t, key, vo, "layout %d values", l)
	}
}

func TestRopeRotate(t *testing.T) {
	// One head of 4 elements at position 1 with angle θ for every pair: the
	// pairs (x0, x2) for NeoX and (x0, x1) for GPT-J rotate by θ.
	const c, s = 0.6, 0.8
	table := []float32{1, 1, 0, 0, c, c, s, s} // rot = 2: [cos, cos, sin, sin] per row
	x := []float64{1, 2, 3, 4}
	neox := RopeRotate(x, 1, 4, []int64{1}, table, 2, true)
	assert.InDeltaSlice(t, []float64{1*c - 3*s, 2*c - 4*s, 3*c + 1*s, 4*c + 2*s}, neox, 1e-6)
	gptj := RopeRotate(x, 1, 4, []int64{1}, table, 2, false)
	assert.InDeltaSlice(t, []float64{1*c - 2*s, 2*c + 1*s, 3*c - 4*s, 4*c + 3*s}, gptj, 1e-6)
	// Position 0 (cos 1, sin 0) is the identity; a full-width table gives the
	// same result when its values repeat the half-width ones.
	assert.Equal(t, x, RopeRotate(x, 1, 4, []int64{0}, table, 2, true))
	full := []float32{1, 1, 1, 1, 0, 0, 0, 0, c, c, c, c, s, s, s, s}
	assert.InDeltaSlice(t, neox, RopeRotate(x, 1, 4, []int64{1}, full, 4, true), 1e-6)
	assert.Panics(t, func() { RopeRotate(x, 1, 4, []int64{2}, table, 2, true) })
}
