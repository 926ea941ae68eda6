package tests

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

func TestAppendMatchesReference(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	shapes := []check.AppendShape{
		{Tokens: 1, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 4, DType: pagedkv.F16, CacheDType: pagedkv.F16},
		{Tokens: 64, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 8, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, PageRuns: true},
		{Tokens: 333, KVHeads: 1, HeadDim: 8, BlockSize: 1, NumBlocks: 400, DType: pagedkv.F16, CacheDType: pagedkv.F16},
		{Tokens: 200, KVHeads: 4, HeadDim: 256, BlockSize: 256, NumBlocks: 2, DType: pagedkv.F16, CacheDType: pagedkv.E4M3},
		{Tokens: 77, KVHeads: 2, HeadDim: 72, BlockSize: 32, NumBlocks: 5, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, PadToken: 16, PadHead: 8},
		{Tokens: 100, KVHeads: 3, HeadDim: 64, BlockSize: 8, NumBlocks: 40, DType: pagedkv.F16, CacheDType: pagedkv.F16, PadToken: 8, Remap: true},
		{Tokens: 0, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16},
		{Tokens: 90, KVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit},
		{Tokens: 90, KVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 8, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutShuffle, PadToken: 8},
		{Tokens: 70, KVHeads: 2, HeadDim: 64, BlockSize: 32, NumBlocks: 4, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutShuffle, Remap: true},
		{Tokens: 70, KVHeads: 3, HeadDim: 80, BlockSize: 8, NumBlocks: 12, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutXSplit},
		// The HND layout (a token's row of a head contiguous, heads a page
		// apart): 16-bit and fp8, remaps, padded rows, blocks of 1.
		{Tokens: 90, KVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutHND, PageRuns: true},
		{Tokens: 70, KVHeads: 2, HeadDim: 64, BlockSize: 32, NumBlocks: 4, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutHND, Remap: true, PadToken: 8},
		{Tokens: 333, KVHeads: 3, HeadDim: 40, BlockSize: 1, NumBlocks: 400, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutHND},
		// Page runs (prefill slot mappings): 8-token groups that are aligned
		// runs of one page take the transposing path in the x-split and
		// shuffle layouts; misaligned starts, skipped slots, remaps that
		// break a run, block sizes below 8 and a partial last group go token
		// by token.
		{Tokens: 333, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 30, DType: pagedkv.F16, CacheDType: pagedkv.F16, PageRuns: true},
		{Tokens: 1001, KVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 70, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, PageRuns: true},
		{Tokens: 517, KVHeads: 2, HeadDim: 64, BlockSize: 32, NumBlocks: 22, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutShuffle, PageRuns: true, PadToken: 8},
		{Tokens: 64, KVHeads: 1, HeadDim: 8, BlockSize: 8, NumBlocks: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutShuffle, PageRuns: true},
		{Tokens: 300, KVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 24, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutShuffle, PageRuns: true},
		{Tokens: 203, KVHeads: 3, HeadDim: 80, BlockSize: 8, NumBlocks: 32, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutXSplit, PageRuns: true},
		{Tokens: 77, KVHeads: 2, HeadDim: 64, BlockSize: 4, NumBlocks: 30, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, PageRuns: true},
		{Tokens: 250, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 22, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutShuffle, PageRuns: true, Remap: true},
		{Tokens: 129, KVHeads: 3, HeadDim: 96, BlockSize: 64, NumBlocks: 8, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutXSplit, PageRuns: true, Remap: true},
		{Tokens: 700, KVHeads: 2, HeadDim: 256, BlockSize: 256, NumBlocks: 7, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, PageRuns: true, PadHead: 8},
		// Odd numbers of token groups and T not a multiple of 16: the last
		// pair's second group is empty or partial.
		{Tokens: 24, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 4, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, PageRuns: true},
		{Tokens: 41, KVHeads: 3, HeadDim: 64, BlockSize: 32, NumBlocks: 6, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutShuffle, PageRuns: true},
		{Tokens: 56, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 8, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutShuffle, PageRuns: true},
		{Tokens: 88, KVHeads: 1, HeadDim: 32, BlockSize: 64, NumBlocks: 6, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutXSplit, PageRuns: true, PadToken: 8},
		// Staged page tiles with several (pair, head) groups per warp (head
		// dims 8, 16, 32) and warps that mix runs with other groups.
		{Tokens: 160, KVHeads: 5, HeadDim: 16, BlockSize: 16, NumBlocks: 14, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, PageRuns: true},
		{Tokens: 96, KVHeads: 3, HeadDim: 32, BlockSize: 32, NumBlocks: 8, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutShuffle, PageRuns: true, Remap: true},
		{Tokens: 72, KVHeads: 2, HeadDim: 8, BlockSize: 16, NumBlocks: 10, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, PageRuns: true, PadHead: 8},
		// fp8 into the flash layout: on compute capability 9.0+ these take
		// the kernels of 2 tokens per thread; T = 1 and 5 leave the last
		// pair's second group empty or partial.
		{Tokens: 1, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 4, DType: pagedkv.F16, CacheDType: pagedkv.E4M3},
		{Tokens: 5, KVHeads: 3, HeadDim: 40, BlockSize: 8, NumBlocks: 6, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Remap: true},
		{Tokens: 66, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 8, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, PageRuns: true, PadToken: 8},
	}
	// Dense random slots in the x-split and shuffle layouts: every slot of
	// the cache, or most of it, written by tokens in random order (the page
	// path's case), with skipped slots, remaps, fp8, block sizes x … 256.
	shapes = append(shapes,
		check.AppendShape{Tokens: 2048, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 128, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit},
		check.AppendShape{Tokens: 1500, KVHeads: 2, HeadDim: 64, BlockSize: 32, NumBlocks: 64, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutShuffle, PadToken: 8},
		check.AppendShape{Tokens: 1024, KVHeads: 4, HeadDim: 256, BlockSize: 256, NumBlocks: 4, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutXSplit, Remap: true},
		check.AppendShape{Tokens: 600, KVHeads: 3, HeadDim: 48, BlockSize: 16, NumBlocks: 50, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutShuffle, PadHead: 8},
		check.AppendShape{Tokens: 512, KVHeads: 1, HeadDim: 16, BlockSize: 8, NumBlocks: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit},
	)
	for range 12 {
		shapes = append(shapes, check.RandomAppendShape(g))
	}
	for _, c := range shapes {
		// The x-split and shuffle layouts run both paths: token by token
		// and, where the planner allows it, by page.
		for _, pages := range []bool{false, true} {
			if pages && c.Layout == pagedkv.LayoutFlash {
				continue
			}
			t.Run(fmt.Sprintf("%s_pages%v", c, pages), func(t *testing.T) {
				c.Path = dispatch.AppendPathTokens
				if pages {
					c.Path = dispatch.AppendPathPages
				}
				p, err := check.NewAppendProblem(r, r.Stream(), g, c)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, p.Arena.Free()) })
				require.NoError(t, p.RunAndCheck(r, r.Stream()))
			})
		}
	}
}

// TestAppendFP8RoundTrip checks that values written to an e4m3 cache decode,
// times the scale, to within e4m3's rounding of the input.
func TestAppendFP8RoundTrip(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	a := arena(t, r)
	const tokens, heads, dim, bs = 256, 4, 128, 16
	const kScale, vScale = 0.02, 0.5
	keyRaw, keyVals := check.RandomTensor(g, pagedkv.F16, tokens*heads*dim, 3)
	slots := make([]int64, tokens)
	for i, p := range g.Perm(tokens) {
		slots[i] = int64(p)
	}
	cacheBytes := int64(tokens * heads * dim)
	key, err := check.Upload(a, s, keyRaw, 1)
	require.NoError(t, err)
	slotBuf, err := check.Upload(a, s, slots, 8)
	require.NoError(t, err)
	kc, err := a.Alloc(cacheBytes)
	require.NoError(t, err)
	vc, err := a.Alloc(cacheBytes)
	require.NoError(t, err)
	args := &pagedkv.AppendArgs{
		K: key, V: key, KCache: kc, VCache: vc, SlotMapping: slotBuf,
		NumTokens: tokens, NumKVHeads: heads, HeadDim: dim, BlockSize: bs, NumBlocks: tokens / bs,
		DType: pagedkv.F16, CacheDType: pagedkv.E4M3, KScale: kScale, VScale: vScale,
	}
	require.NoError(t, r.Append(s, args))
	gotK := download[byte](t, s, kc, int(cacheBytes))
	gotV := download[byte](t, s, vc, int(cacheBytes))
	for tok := range tokens {
		for e := range heads * dim {
			x := keyVals[tok*heads*dim+e]
			at := int(slots[tok])*heads*dim + e
			k := ref.E4M3ToFloat64(gotK[at]) * kScale
			v := ref.E4M3ToFloat64(gotV[at]) * vScale
			// e4m3 keeps 3 mantissa bits: error ≤ 2^-4 relative for normals and
			// ≤ 2^-10·scale absolute for subnormals; K saturates at 448·kScale.
			kx := min(max(x, -448*kScale), 448*kScale)
			require.InDelta(t, kx, k, max(math.Abs(kx)/16, kScale/1024)*1.0001, "K token %d elem %d", tok, e)
			require.InDelta(t, x, v, max(math.Abs(x)/16, vScale/1024)*1.0001, "V token %d elem %d", tok, e)
		}
	}
}

// TestAppendFP8SpecialValues checks the e4m3 rounding of an fp8 append (on
// sm_90 the hardware cvt of the compute_90 build) bit for bit against
// ref.E4M3FromFloat32 of value / scale on the values where roundings differ:
// ties (to even), the subnormal range and its ties, the largest finite
// value and the ties beyond it, overflow and infinities (saturate to ±448),
// signed zeros, and NaN (0x7F whatever its sign).
func TestAppendFP8SpecialValues(t *testing.T) {
	r := open(t, config.Options{})
	s := r.Stream()
	a := arena(t, r)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	vals := []float32{
		0, float32(math.Copysign(0, -1)), 1, -1, 1.0625, 1.1875, -1.0625, 3.25, 0.3125,
		0.001953125, 0.0029296875, 0.0048828125, -0.0009765625, 0.0009765624, 0.015625, 0.0146484375,
		448, 464, 464.1, 480, 500, -470, 1000, 65504, -65504, inf, -inf, nan, -nan,
		0.1, -7.7, 300.5, 13.3, 0.0234375, 2.5e-6, 17, 19, 240,
	}
	for len(vals)%8 != 0 {
		vals = append(vals, float32(len(vals))*0.37)
	}
	dim := len(vals)
	for _, d := range []pagedkv.DType{pagedkv.F16, pagedkv.BF16} {
		for _, scale := range []float32{1, 0.75, 3} {
			raw := make([]uint16, dim)
			host := make([]float32, dim)
			if d == pagedkv.F16 {
				require.NoError(t, pagedkv.F16FromFloat32(raw, vals))
				require.NoError(t, pagedkv.Float32FromF16(host, raw))
			} else {
				require.NoError(t, pagedkv.BF16FromFloat32(raw, vals))
				require.NoError(t, pagedkv.Float32FromBF16(host, raw))
			}
			in, err := check.Upload(a, s, raw, 2)
			require.NoError(t, err)
			slot, err := check.Upload(a, s, []int64{0}, 8)
			require.NoError(t, err)
			kc, err := a.Alloc(int64(dim))
			require.NoError(t, err)
			vc, err := a.Alloc(int64(dim))
			require.NoError(t, err)
			require.NoError(t, r.Append(s, &pagedkv.AppendArgs{
				K: in, V: in, KCache: kc, VCache: vc, SlotMapping: slot,
				NumTokens: 1, NumKVHeads: 1, HeadDim: dim, BlockSize: 1, NumBlocks: 1,
				DType: d, CacheDType: pagedkv.E4M3, KScale: scale, VScale: scale,
			}))
			gotK := download[byte](t, s, kc, dim)
			gotV := download[byte](t, s, vc, dim)
			for i, x := range host {
				want := ref.E4M3FromFloat32(x / scale)
				assert.Equal(t, want, gotK[i], "%s K %g / %g", d, x, scale)
				assert.Equal(t, want, gotV[i], "%s V %g / %g", d, x, scale)
			}
		}
	}
}

// TestAppendFaults checks that a slot beyond the cache is reported and not
// written, with and without the checking mode.
func TestAppendFaults(t *testing.T) {
	// The flash layout, and the x-split layout by page (8 tokens over 8
	// slots: the page path), where the bad token's slot must keep its bytes.
	for _, layout := range []pagedkv.CacheLayout{pagedkv.LayoutFlash, pagedkv.LayoutXSplit} {
		for _, checking := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s_check=%v", layout, checking), func(t *testing.T) {
				appendFault(t, layout, checking)
			})
		}
	}
}

// faultingAppend returns an Append into kc and vc (f16, BlockSize bs,
// NumBlocks blocks) of faultTokens random tokens of faultHeads heads of
// faultDim whose last slot lies far past the cache (a fault naming
// SlotMapping[7]), and the tokens' bytes (K and V alike).
func faultingAppend(t *testing.T, a *check.Arena, s *pagedkv.Stream, g *rand.Rand, kc, vc pagedkv.Buffer,
	layout pagedkv.CacheLayout, bs, blocks int) (*pagedkv.AppendArgs, []byte) {
	t.Helper()
	keyRaw, _ := check.RandomTensor(g, pagedkv.F16, faultTokens*faultHeads*faultDim, 1)
	key, err := check.Upload(a, s, keyRaw, 1)
	require.NoError(t, err)
	slots, err := check.Upload(a, s, []int64{0, 1, 2, 3, 4, 5, 6, 1 << 40}, 8)
	require.NoError(t, err)
	return &pagedkv.AppendArgs{
		K: key, V: key, KCache: kc, VCache: vc, SlotMapping: slots,
		NumTokens: faultTokens, NumKVHeads: faultHeads, HeadDim: faultDim, BlockSize: bs, NumBlocks: blocks,
		DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: layout,
	}, keyRaw
}

const faultTokens, faultHeads, faultDim = 8, 2, 64

func appendFault(t *testing.T, layout pagedkv.CacheLayout, checking bool) {
	r := open(t, config.Options{CheckBounds: ptr(checking)})
	g := rng(t)
	s := r.Stream()
	a := arena(t, r)
	const heads, dim = faultHeads, faultDim
	bs, blocks := 4, 2
	if layout != pagedkv.LayoutFlash {
		bs, blocks = 8, 1
	}
	cacheBytes := int64(blocks * bs * heads * dim * 2)
	// The caches sit inside one allocation with a guard region behind them.
	guarded, err := a.Alloc(3 * cacheBytes)
	require.NoError(t, err)
	require.NoError(t, s.Fill(guarded, 0x5A))
	kc, _ := guarded.Slice(0, cacheBytes)
	vc, _ := guarded.Slice(cacheBytes, cacheBytes)
	args, keyRaw := faultingAppend(t, a, s, g, kc, vc, layout, bs, blocks)
	err = r.Append(s, args)
	if !checking {
		require.NoError(t, err)
		err = s.Fault()
	}
	var fe *pagedkv.FaultError
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Equal(t, int64(7), fe.A)
	assert.Contains(t, fe.Error(), "SlotMapping[7]")
	require.NoError(t, s.Fault(), "the record is cleared once read")
	all := download[byte](t, s, guarded, int(3*cacheBytes))
	for i, b := range all[2*cacheBytes:] {
		require.Equal(t, byte(0x5A), b, "byte %d behind the caches was written", i)
	}
	// Slot 7 (the bad token's would-be neighbour, claimed by nobody)
	// keeps its bytes in both caches; slots 0..6 hold their tokens' K.
	for h := range heads {
		for d := range dim {
			for _, value := range []bool{false, true} {
				at := ref.CacheIndex(ref.Layout(layout), value, 7, h, d, heads, dim, bs, 8) * 2
				if value {
					at += int(cacheBytes)
				}
				require.Equal(t, []byte{0x5A, 0x5A}, all[at:at+2], "slot 7 head %d element %d (value %v) was written", h, d, value)
			}
			for slot := range 7 {
				at := ref.CacheIndex(ref.Layout(layout), false, slot, h, d, heads, dim, bs, 8) * 2
				want := keyRaw[((slot*heads+h)*dim+d)*2:][:2]
				require.Equal(t, want, all[at:at+2], "slot %d head %d element %d of K", slot, h, d)
			}
		}
	}
}
