package pagedkv

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// badCase is one invalid mutation of a good argument struct and the text
// its Validate error must contain.
type badCase[T any] struct {
	name   string
	mutate func(a *T)
	want   string
}

// validator is an argument struct pointer with a Validate method.
type validator[T any] interface {
	*T
	Validate() error
}

// expectErrors applies each case to a fresh good value and checks the error.
func expectErrors[T any, P validator[T]](t *testing.T, good func() T, cases []badCase[T]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := good()
			c.mutate(&a)
			err := P(&a).Validate()
			require.Error(t, err)
			assert.Regexp(t, wantPattern(c.want), err.Error())
			assert.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
}

// wantPattern is a regular expression for an expected error text, in which
// "0x…" stands for any device address (fakeBuffer places each buffer at its
// own).
func wantPattern(want string) string {
	parts := strings.Split(want, "0x…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, "0x[0-9a-f]+")
}

// fakeBuffer is a buffer at a plausible, aligned device address, 2^40
// bytes past the one before it (wrapping after 255), so that the buffers of
// one argument struct never overlap. It never returns 0x7f0000000000 itself,
// which tests use for buffers they place by hand.
func fakeBuffer(bytes int64) Buffer {
	n := fakeBuffers.Add(1)%255 + 1
	return Buffer{Ptr: driver.DevicePtr(0x7f0000000000 + n<<40), Bytes: bytes}
}

var fakeBuffers atomic.Uint64

func goodAppend() AppendArgs {
	const t, h, d, bs, nb = 10, 4, 128, 16, 8
	return AppendArgs{
		K: fakeBuffer(t * h * d * 2), V: fakeBuffer(t * h * d * 2),
		KCache: fakeBuffer(nb * bs * h * d * 2), VCache: fakeBuffer(nb * bs * h * d * 2),
		SlotMapping: fakeBuffer(t * 8),
		NumTokens:   t, NumKVHeads: h, HeadDim: d, BlockSize: bs, NumBlocks: nb,
		DType: F16, CacheDType: F16,
	}
}

func TestAppendArgsValidate(t *testing.T) {
	good := goodAppend()
	require.NoError(t, good.Validate())
	fp8 := goodAppend()
	fp8.CacheDType, fp8.KScale, fp8.VScale = E4M3, 0.5, 2
	require.NoError(t, fp8.Validate())
	host := goodAppend()
	host.HostSlotMapping = make([]int32, host.NumTokens)
	require.NoError(t, host.Validate())

	cases := []badCase[AppendArgs]{
		{"dtype", func(a *AppendArgs) { a.DType = E4M3 }, "AppendArgs.DType=e4m3 is not supported; allowed: f16, bf16"},
		{"cache dtype", func(a *AppendArgs) { a.CacheDType = BF16 }, "AppendArgs.CacheDType=bf16 is not supported with DType=f16"},
		{"head dim", func(a *AppendArgs) { a.HeadDim = 100 }, "AppendArgs.HeadDim=100 is not supported; allowed: a multiple of 8 from 8 to 256"},
		{"head dim big", func(a *AppendArgs) { a.HeadDim = 264 }, "AppendArgs.HeadDim=264"},
		{"block size", func(a *AppendArgs) { a.BlockSize = 24 }, "AppendArgs.BlockSize=24 is not allowed; allowed: a power of two from 1 to 256"},
		{"block size big", func(a *AppendArgs) { a.BlockSize = 512 }, "AppendArgs.BlockSize=512"},
		{"kv heads", func(a *AppendArgs) { a.NumKVHeads = 0 }, "AppendArgs.NumKVHeads=0 is out of range"},
		{"tokens", func(a *AppendArgs) { a.NumTokens = -1 }, "AppendArgs.NumTokens=-1 is out of range"},
		{"key small", func(a *AppendArgs) { a.K.Bytes-- }, "AppendArgs.K holds 10239 bytes; the shapes need 10240"},
		{"value missing", func(a *AppendArgs) { a.V = Buffer{} }, "AppendArgs.V is missing"},
		{"cache small", func(a *AppendArgs) { a.VCache.Bytes -= 2 }, "AppendArgs.VCache holds"},
		{"slots small", func(a *AppendArgs) { a.SlotMapping.Bytes = 72 }, "AppendArgs.SlotMapping holds 72 bytes; the shapes need 80"},
		{"host slots", func(a *AppendArgs) { a.HostSlotMapping = make([]int32, 9) }, "AppendArgs.HostSlotMapping has 9 values; allowed: none, or NumTokens=10"},
		{"misaligned", func(a *AppendArgs) { a.K.Ptr += 8 }, "AppendArgs.K pointer 0x… is not 16-byte aligned"},
		{"token stride", func(a *AppendArgs) { a.KTokenStride = 100 }, "AppendArgs.KTokenStride=100 is not allowed"},
		{"token stride short", func(a *AppendArgs) { a.KTokenStride = 256 }, "AppendArgs.KTokenStride=256 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 512"},
		{"head stride", func(a *AppendArgs) { a.VHeadStride = 64 }, "AppendArgs.VHeadStride=64 is not allowed"},
		{"scale ignored", func(a *AppendArgs) { a.KScale = 0.5 }, "AppendArgs.KScale=0.5 is only used with an e4m3 cache"},
		{"fp8 scale", func(a *AppendArgs) { a.CacheDType = E4M3; a.KScale = 1; a.VScale = 0 }, "AppendArgs.VScale=0 is not allowed with an e4m3 cache"},
		{"remap ragged", func(a *AppendArgs) { a.SlotRemap = fakeBuffer(12) }, "AppendArgs.SlotRemap holds 12 bytes, not a whole number"},
		{"blocks", func(a *AppendArgs) { a.NumBlocks = 0 }, "AppendArgs.NumBlocks=0 is out of range"},
		{"layout", func(a *AppendArgs) { a.Layout = 7 }, "AppendArgs.Layout=7 is not supported; allowed: LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND"},
		{"x-split fp8 head dim", func(a *AppendArgs) {
			a.HeadDim, a.CacheDType, a.KScale, a.VScale, a.Layout = 120, E4M3, 1, 1, LayoutXSplit
		}, "AppendArgs.HeadDim=120 is not allowed with the x-split layout and a e4m3 cache; allowed: a multiple of 16"},
		{"shuffle block size", func(a *AppendArgs) { a.BlockSize, a.Layout = 4, LayoutShuffle }, "AppendArgs.BlockSize=4 is not allowed with the shuffle layout and a f16 cache; allowed: a multiple of 8"},
	}
	expectErrors(t, goodAppend, cases)
}

func TestAppendDegenerateStridesAreCanonical(t *testing.T) {
	a := goodAppend()
	a.NumKVHeads, a.KHeadStride, a.VHeadStride = 1, 3, 1 // one head: its stride never moves an address
	a.KCache.Bytes, a.VCache.Bytes = 8*16*128*2, 8*16*128*2
	require.NoError(t, a.Validate())
	_, kh, _, vh := a.strides()
	assert.Equal(t, int64(128), kh)
	assert.Equal(t, int64(128), vh)
	a = goodAppend()
	a.NumTokens, a.KTokenStride = 1, 5 // one token
	require.NoError(t, a.Validate())
}

func TestAppendStridedInputNeedsOnlyItsSpan(t *testing.T) {
	a := goodAppend()
	a.KTokenStride = 4*128 + 64
	// The last token needs only its heads, not a whole stride.
	a.K.Bytes = int64((9*(4*128+64) + 4*128) * 2)
	require.NoError(t, a.Validate())
	a.K.Bytes--
	require.Error(t, a.Validate())
}

func goodDecode() DecodeArgs {
	const s, qh, kh, d, bs, nb, mb = 4, 32, 8, 128, 16, 64, 16
	return DecodeArgs{
		Q: fakeBuffer(s * qh * d * 2), KCache: fakeBuffer(nb * bs * kh * d * 2), VCache: fakeBuffer(nb * bs * kh * d * 2),
		BlockTables: fakeBuffer(s * mb * 4), KVLens: fakeBuffer(s * 4), Out: fakeBuffer(s * qh * d * 2),
		NumSeqs: s, NumQHeads: qh, NumKVHeads: kh, HeadDim: d, BlockSize: bs, NumBlocks: nb, MaxBlocksPerSeq: mb,
		MaxKVLen: 200, DType: F16, CacheDType: F16,
	}
}

func TestDecodeArgsValidate(t *testing.T) {
	good := goodDecode()
	require.NoError(t, good.Validate())
	for _, l := range []CacheLayout{LayoutXSplit, LayoutShuffle, LayoutHND} {
		laid := goodDecode()
		laid.Layout = l
		require.NoError(t, laid.Validate(), l)
		laid.CacheDType, laid.KScale, laid.VScale = E4M3, 1, 1
		require.NoError(t, laid.Validate(), "%v e4m3", l)
	}
	cases := []badCase[DecodeArgs]{
		{"layout", func(a *DecodeArgs) { a.Layout = 4 }, "DecodeArgs.Layout=4 is not supported; allowed: LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND"},
		// The HND layout's pool rows (blocks of one head) fit 32 bits.
		{"HND pool", func(a *DecodeArgs) { a.Layout, a.NumBlocks = LayoutHND, 1<<25+1 },
			"DecodeArgs.NumBlocks=33554433 is too large for Layout=HND with NumKVHeads=8 and BlockSize=16; allowed: NumBlocks·NumKVHeads·BlockSize at most 2^32 (at most 33554432 blocks)"},
		{"layout fp8 block", func(a *DecodeArgs) {
			a.Layout, a.CacheDType, a.KScale, a.VScale, a.BlockSize, a.MaxBlocksPerSeq, a.NumBlocks = LayoutShuffle, E4M3, 1, 1, 8, 2*a.MaxBlocksPerSeq, 2*a.NumBlocks
		}, "DecodeArgs.BlockSize=8 is not allowed with the shuffle layout and a e4m3 cache; allowed: a multiple of 16"},
		{"layout fp8 block x-split", func(a *DecodeArgs) {
			a.Layout, a.CacheDType, a.KScale, a.VScale, a.BlockSize, a.MaxBlocksPerSeq, a.NumBlocks = LayoutXSplit, E4M3, 1, 1, 8, 2*a.MaxBlocksPerSeq, 2*a.NumBlocks
		}, "DecodeArgs.BlockSize=8 is not allowed with the x-split layout and a e4m3 cache; allowed: 16 to 256"},
		{"layout block", func(a *DecodeArgs) {
			a.Layout, a.BlockSize, a.MaxBlocksPerSeq, a.NumBlocks = LayoutXSplit, 4, 4*a.MaxBlocksPerSeq, 4*a.NumBlocks
		}, "DecodeArgs.BlockSize=4 is not allowed with the x-split layout and a f16 cache; allowed: 8 to 256"},
		{"heads", func(a *DecodeArgs) { a.NumQHeads = 30 }, "DecodeArgs.NumQHeads=30 is not a multiple of NumKVHeads=8"},
		{"group", func(a *DecodeArgs) { a.NumKVHeads = 1 }, "DecodeArgs.NumQHeads/NumKVHeads=32 is not supported; allowed: a group size from 1 to 16"},
		{"head dim", func(a *DecodeArgs) { a.HeadDim = 72 }, "DecodeArgs.HeadDim=72 is not supported; allowed: 64, 80, 96, 112, 120, 128, 192, 256"},
		{"head dim with fp8", func(a *DecodeArgs) { a.HeadDim, a.CacheDType = 80, E4M3 }, "DecodeArgs.HeadDim=80 is not supported with CacheDType=e4m3; allowed there: 64, 96, 128, 192, 256"},
		{"head dim 120 with fp8", func(a *DecodeArgs) { a.HeadDim, a.CacheDType = 120, E4M3 }, "DecodeArgs.HeadDim=120 is not supported with CacheDType=e4m3; allowed there: 64, 96, 128, 192, 256"},
		{"head dim 120 laid", func(a *DecodeArgs) { a.HeadDim, a.Layout = 120, LayoutShuffle },
			"DecodeArgs.HeadDim=120 is not supported with Layout=shuffle; allowed there: Layout=flash or HND (or another head dim)"},
		{"block size", func(a *DecodeArgs) { a.BlockSize = 3 }, "DecodeArgs.BlockSize=3 is not allowed"},
		{"max kv", func(a *DecodeArgs) { a.MaxKVLen = 257 }, "DecodeArgs.MaxKVLen=257 is not allowed; allowed: 0..MaxBlocksPerSeq·BlockSize=256"},
		{"q small", func(a *DecodeArgs) { a.Q.Bytes -= 2 }, "DecodeArgs.Q holds"},
		{"q stride", func(a *DecodeArgs) { a.QTokenStride = 100 }, "DecodeArgs.QTokenStride=100 is not allowed"},
		{"q stride unaligned", func(a *DecodeArgs) { a.QTokenStride = 32*128 + 4 }, "allowed: 0 (contiguous) or a multiple of 8"},
		{"cache small", func(a *DecodeArgs) { a.KCache.Bytes = 100 }, "DecodeArgs.KCache holds 100 bytes"},
		{"tables small", func(a *DecodeArgs) { a.BlockTables.Bytes = 4 }, "DecodeArgs.BlockTables holds 4 bytes; the shapes need 256"},
		{"lens", func(a *DecodeArgs) { a.KVLens = Buffer{} }, "DecodeArgs.KVLens is missing"},
		{"out", func(a *DecodeArgs) { a.Out.Bytes = 0 }, "DecodeArgs.Out holds 0 bytes"},
		{"lse", func(a *DecodeArgs) { a.LSE = fakeBuffer(8) }, "DecodeArgs.LSE holds 8 bytes; the shapes need 512"},
		{"scale", func(a *DecodeArgs) { a.Scale = -1 }, "DecodeArgs.Scale=-1 is not allowed"},
		{"fp8 scale", func(a *DecodeArgs) { a.CacheDType = E4M3 }, "DecodeArgs.KScale=0 is not allowed with an e4m3 cache"},
		{"cache dtype", func(a *DecodeArgs) { a.CacheDType = BF16 }, "DecodeArgs.CacheDType=bf16 is not supported with DType=f16"},
		{"seqs", func(a *DecodeArgs) { a.NumSeqs = 0 }, "DecodeArgs.NumSeqs=0 is out of range"},
		{"pool rows", func(a *DecodeArgs) { a.NumBlocks = 1<<28 + 1 }, "DecodeArgs.NumBlocks=268435457 is too large for BlockSize=16; allowed: NumBlocks·BlockSize at most 2^31−1 (at most 134217727 blocks)"},
		{"misaligned cache", func(a *DecodeArgs) { a.VCache.Ptr += 2 }, "DecodeArgs.VCache pointer"},
		{"window", func(a *DecodeArgs) { a.SlidingWindow = -1 }, "DecodeArgs.SlidingWindow=-1 is out of range; allowed: 0 (none) or 1..1073741824"},
		{"soft-cap", func(a *DecodeArgs) { a.SoftCap = float32(math.NaN()) }, "DecodeArgs.SoftCap=NaN is not allowed; allowed: 0 (off) or a finite value > 0"},
		{"soft-cap negative", func(a *DecodeArgs) { a.SoftCap = -30 }, "DecodeArgs.SoftCap=-30 is not allowed"},
		{"sinks small", func(a *DecodeArgs) { a.Sinks = fakeBuffer(31 * 4) }, "DecodeArgs.Sinks holds 124 bytes; the shapes need 128"},
		{"alibi misaligned", func(a *DecodeArgs) { a.AlibiSlopes = fakeBuffer(1024); a.AlibiSlopes.Ptr += 2 }, "DecodeArgs.AlibiSlopes pointer"},
		{"mods fp8 head dim", func(a *DecodeArgs) {
			a.CacheDType, a.KScale, a.VScale, a.SlidingWindow, a.HeadDim = E4M3, 1, 1, 4096, 112
		},
			"DecodeArgs.HeadDim=112 is not supported with CacheDType=e4m3"},
	}
	expectErrors(t, goodDecode, cases)
	mods := goodDecode()
	mods.SlidingWindow, mods.SoftCap, mods.Sinks, mods.AlibiSlopes = 4096, 50, fakeBuffer(128), fakeBuffer(128)
	require.NoError(t, mods.Validate(), "every modifier")
	for _, layout := range []CacheLayout{LayoutFlash, LayoutXSplit, LayoutShuffle} {
		fp8 := mods
		fp8.CacheDType, fp8.KScale, fp8.VScale, fp8.Layout = E4M3, 0.5, 0.5, layout
		require.NoError(t, fp8.Validate(), "every modifier over an e4m3 cache, %v layout", layout)
		for _, d := range []int{64, 96} { // the buffers hold head dim 128
			fp8.HeadDim = d
			require.NoError(t, fp8.Validate(), "an e4m3 cache at head dim %d, %v layout", d, layout)
		}
	}
}

func goodGather() GatherArgs {
	const tok, h, d, bs, nb = 10, 4, 128, 16, 8
	return GatherArgs{
		KCache: fakeBuffer(nb * bs * h * d * 2), VCache: fakeBuffer(nb * bs * h * d * 2), SlotMapping: fakeBuffer(tok * 8),
		KOut: fakeBuffer(tok * h * d * 2), VOut: fakeBuffer(tok * h * d * 2),
		NumTokens: tok, NumKVHeads: h, HeadDim: d, BlockSize: bs, NumBlocks: nb, CacheDType: F16, Layout: LayoutShuffle,
	}
}

func TestGatherArgsValidate(t *testing.T) {
	good := goodGather
	a := good()
	require.NoError(t, a.Validate())
	cases := []badCase[GatherArgs]{
		{"dtype", func(a *GatherArgs) { a.CacheDType = 0 }, "GatherArgs.CacheDType=DType(0) is not supported"},
		{"out small", func(a *GatherArgs) { a.VOut.Bytes-- }, "GatherArgs.VOut holds 10239 bytes; the shapes need 10240"},
		{"slots", func(a *GatherArgs) { a.SlotMapping = Buffer{} }, "GatherArgs.SlotMapping is missing"},
		{"shuffle fp8 block", func(a *GatherArgs) { a.CacheDType = E4M3; a.BlockSize = 8 }, "GatherArgs.BlockSize=8 is not allowed with the shuffle layout and a e4m3 cache; allowed: a multiple of 16"},
		{"cache small", func(a *GatherArgs) { a.KCache.Bytes = 64 }, "GatherArgs.KCache holds 64 bytes"},
	}
	expectErrors(t, good, cases)
}

func goodRope() RopeCacheArgs {
	const tok, qh, kh, d, bs, nb, maxPos = 10, 8, 2, 64, 16, 4, 100
	return RopeCacheArgs{
		Q: fakeBuffer(tok * qh * d * 2), K: fakeBuffer(tok * kh * d * 2), V: fakeBuffer(tok * kh * d * 2),
		QOut: fakeBuffer(tok * qh * d * 2), KOut: fakeBuffer(tok * kh * d * 2),
		KCache: fakeBuffer(nb * bs * kh * d * 2), VCache: fakeBuffer(nb * bs * kh * d * 2),
		Positions: fakeBuffer(tok * 8), CosSin: fakeBuffer(maxPos * d * 4), SlotMapping: fakeBuffer(tok * 8),
		NumTokens: tok, NumQHeads: qh, NumKVHeads: kh, HeadDim: d, BlockSize: bs, NumBlocks: nb,
		MaxPos: maxPos, RotDim: d / 2, NeoX: true, DType: F16, CacheDType: F16,
	}
}

func TestRopeCacheArgsValidate(t *testing.T) {
	good := goodRope
	a := good()
	require.NoError(t, a.Validate())
	cases := []badCase[RopeCacheArgs]{
		{"rot", func(a *RopeCacheArgs) { a.RotDim = 48 }, "RopeCacheArgs.RotDim=48 is not allowed; allowed: HeadDim=64 or HeadDim/2=32"},
		{"head dim", func(a *RopeCacheArgs) { a.HeadDim = 8; a.RotDim = 4 }, "RopeCacheArgs.HeadDim=8 is not allowed"},
		{"gqa", func(a *RopeCacheArgs) { a.NumQHeads = 3 }, "RopeCacheArgs.NumQHeads=3 is not a multiple of NumKVHeads=2"},
		{"kv tokens", func(a *RopeCacheArgs) { a.NumKVTokens = 5 }, "RopeCacheArgs.NumKVTokens=5 is below NumTokens=10"},
		{"table", func(a *RopeCacheArgs) { a.CosSin.Bytes = 100 }, "RopeCacheArgs.CosSin holds 100 bytes; the shapes need 25600"},
		{"k small", func(a *RopeCacheArgs) { a.NumKVTokens = 11; a.SlotMapping.Bytes = 88 }, "RopeCacheArgs.K holds 2560 bytes; the shapes need 2816"},
		{"positions", func(a *RopeCacheArgs) { a.Positions = Buffer{} }, "RopeCacheArgs.Positions is missing"},
		{"zeros", func(a *RopeCacheArgs) { a.ZerosOut = fakeBuffer(8) }, "RopeCacheArgs.ZerosOut holds 8 bytes"},
		{"max pos", func(a *RopeCacheArgs) { a.MaxPos = 0 }, "RopeCacheArgs.MaxPos=0 is out of range"},
		{"kv tokens big", func(a *RopeCacheArgs) { a.NumKVTokens = 1 << 31 }, "RopeCacheArgs.NumKVTokens=2147483648 is out of range; allowed: 0..1073741824"},
		{"kv tokens slots", func(a *RopeCacheArgs) { a.NumKVTokens = 12 }, "RopeCacheArgs.SlotMapping holds 80 bytes; the shapes need 96"},
		{"host slots", func(a *RopeCacheArgs) { a.HostSlotMapping = make([]int32, 9) }, "RopeCacheArgs.HostSlotMapping has 9 values; allowed: none, or NumTokens=10"},
		{"host slots kv", func(a *RopeCacheArgs) {
			a.NumKVTokens, a.SlotMapping.Bytes, a.HostSlotMapping = 11, 88, make([]int32, 10)
		},
			"RopeCacheArgs.HostSlotMapping has 10 values; allowed: none, or NumKVTokens=11"},
		{"kv tokens k", func(a *RopeCacheArgs) { a.NumKVTokens, a.SlotMapping.Bytes = 12, 96 }, "RopeCacheArgs.K holds 2560 bytes; the shapes need 3072"},
		{"v stride", func(a *RopeCacheArgs) { a.VTokenStride = 100 }, "RopeCacheArgs.VTokenStride=100 is not allowed"},
		{"q heads", func(a *RopeCacheArgs) { a.NumQHeads = 1<<16 + 2 }, "RopeCacheArgs.NumQHeads=65538 is out of range; allowed: 1..65536"},
		{"head dim big", func(a *RopeCacheArgs) { a.HeadDim, a.RotDim = 512, 256 }, "RopeCacheArgs.HeadDim=512 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{"head stride zero tokens", func(a *RopeCacheArgs) { a.QHeadStride = 100 }, "RopeCacheArgs.QHeadStride=100 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ HeadDim=64"},
		{"contiguous tokens, spread heads", func(a *RopeCacheArgs) { a.QHeadStride = 128 },
			"RopeCacheArgs.QTokenStride=0 (contiguous: 512) is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 960 (the heads' span)"},
	}
	expectErrors(t, good, cases)
}

// TestOverflows pins the overflow cases: extents that wrap int64, and
// counts that do not fit the kernels' int32 parameters, are errors that name
// the field the caller set and what it may be.
// ropeWithHeadDim is goodRope with heads of d elements, every buffer sized
// for them, RotDim d/2 and the given layout and cache dtype.
func ropeWithHeadDim(d int, l CacheLayout, cache DType) RopeCacheArgs {
	const tok, qh, kh, bs, nb, maxPos = 10, 8, 2, 16, 4, 100
	a := goodRope()
	n, cs := int64(d), int64(cache.Size())
	a.HeadDim, a.RotDim, a.Layout, a.CacheDType = d, d/2, l, cache
	a.Q, a.K, a.V = fakeBuffer(tok*qh*n*2), fakeBuffer(tok*kh*n*2), fakeBuffer(tok*kh*n*2)
	a.QOut, a.KOut = fakeBuffer(tok*qh*n*2), fakeBuffer(tok*kh*n*2)
	a.KCache, a.VCache = fakeBuffer(nb*bs*kh*n*cs), fakeBuffer(nb*bs*kh*n*cs)
	a.CosSin = fakeBuffer(maxPos * n * 4)
	if cache == E4M3 {
		a.KScale, a.VScale = 1, 1
	}
	return a
}

// qkvWithHeadDim is goodQKV with heads of d elements, every buffer sized
// for them, RotDim d/2, f16 input and the given layout and cache dtype.
func qkvWithHeadDim(d int, l CacheLayout, cache DType) QKVNormRopeArgs {
	const tok, qh, kh, bs, nb, maxPos = 12, 8, 2, 16, 32, 4096
	a := goodQKV()
	n, cs := int64(d), int64(cache.Size())
	a.HeadDim, a.RotDim, a.Layout, a.DType, a.CacheDType = d, d/2, l, F16, cache
	a.QKV, a.QOut = fakeBuffer(tok*(qh+2*kh)*n*2), fakeBuffer(tok*qh*n*2)
	a.KCache, a.VCache = fakeBuffer(nb*bs*kh*n*cs), fakeBuffer(nb*bs*kh*n*cs)
	a.CosSin = fakeBuffer(maxPos * n * 4)
	a.QNormWeight, a.KNormWeight = fakeBuffer(n*2), fakeBuffer(n*2)
	if cache == E4M3 {
		a.KScale, a.VScale = 1, 1
	}
	return a
}

// TestRopeHeadDims checks the head dims RopeCacheArgs and QKVNormRopeArgs
// take: every multiple of 8 from 16 to 256 (the powers of two and 80, 96,
// 112, 120, 192 among them) in the flash layout, the x-split and shuffle
// layouts over an e4m3 cache only multiples of 16, and nothing else, each
// refusal naming HeadDim and wrapping ErrInvalidArgument.
func TestRopeHeadDims(t *testing.T) {
	for _, tt := range []struct {
		headDim int
		layout  CacheLayout
		cache   DType
		want    string // "" when allowed
	}{
		{16, LayoutFlash, F16, ""},
		{24, LayoutFlash, F16, ""},
		{64, LayoutFlash, F16, ""},
		{80, LayoutFlash, F16, ""},
		{96, LayoutFlash, F16, ""},
		{112, LayoutFlash, F16, ""},
		{120, LayoutFlash, F16, ""},
		{128, LayoutFlash, F16, ""},
		{192, LayoutFlash, F16, ""},
		{256, LayoutFlash, F16, ""},
		{120, LayoutFlash, E4M3, ""},
		{120, LayoutXSplit, F16, ""},
		{120, LayoutShuffle, F16, ""},
		{80, LayoutXSplit, E4M3, ""},
		{96, LayoutShuffle, E4M3, ""},
		{192, LayoutShuffle, E4M3, ""},
		{120, LayoutXSplit, E4M3, "%s.HeadDim=120 is not allowed with the x-split layout and a e4m3 cache; allowed: a multiple of 16"},
		{120, LayoutShuffle, E4M3, "%s.HeadDim=120 is not allowed with the shuffle layout and a e4m3 cache; allowed: a multiple of 16"},
		{8, LayoutFlash, F16, "%s.HeadDim=8 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{0, LayoutFlash, F16, "%s.HeadDim=0 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{-16, LayoutFlash, F16, "%s.HeadDim=-16 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{20, LayoutFlash, F16, "%s.HeadDim=20 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{100, LayoutFlash, F16, "%s.HeadDim=100 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{124, LayoutFlash, F16, "%s.HeadDim=124 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{264, LayoutFlash, F16, "%s.HeadDim=264 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{512, LayoutFlash, F16, "%s.HeadDim=512 is not allowed; allowed: a multiple of 8 from 16 to 256"},
	} {
		t.Run(fmt.Sprintf("%d_%v_%v", tt.headDim, tt.layout, tt.cache), func(t *testing.T) {
			for _, c := range []struct {
				arg string
				err error
			}{
				{ropeArg, func() error { a := ropeWithHeadDim(tt.headDim, tt.layout, tt.cache); return a.Validate() }()},
				{qkvArg, func() error { a := qkvWithHeadDim(tt.headDim, tt.layout, tt.cache); return a.Validate() }()},
			} {
				if tt.want == "" {
					assert.NoError(t, c.err, c.arg)
					continue
				}
				assert.EqualError(t, c.err, "pagedkv: "+fmt.Sprintf(tt.want, c.arg), c.arg)
				assert.ErrorIs(t, c.err, ErrInvalidArgument, c.arg)
			}
		})
	}
}

func TestOverflows(t *testing.T) {
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"decode q stride, 5 sequences", func() error {
			a := goodDecode()
			a.NumSeqs, a.QTokenStride, a.Q.Bytes = 5, 1<<62, 8192
			return a.Validate()
		}, "pagedkv: DecodeArgs.QTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 (16-byte rows) ≥ NumQHeads·HeadDim=4096 and ≤ 2147483648"},
		{"decode q stride, 9 sequences", func() error {
			a := goodDecode()
			a.NumSeqs, a.QTokenStride, a.Q.Bytes = 9, 1<<61, 8192
			return a.Validate()
		}, "pagedkv: DecodeArgs.QTokenStride=2305843009213693952 is not allowed; allowed: 0 (contiguous) or a multiple of 8 (16-byte rows) ≥ NumQHeads·HeadDim=4096 and ≤ 2147483648"},
		{"append key token stride", func() error {
			a := goodAppend()
			a.KTokenStride = 1 << 62
			return a.Validate()
		}, "pagedkv: AppendArgs.KTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 512 (the heads' span) and ≤ 2147483648"},
		{"append value token stride", func() error {
			a := goodAppend()
			a.VTokenStride = 1 << 62
			return a.Validate()
		}, "pagedkv: AppendArgs.VTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 512 (the heads' span) and ≤ 2147483648"},
		{"append key head stride", func() error {
			a := goodAppend()
			a.KHeadStride = 1 << 62
			return a.Validate()
		}, "pagedkv: AppendArgs.KHeadStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ HeadDim=128 and ≤ 2147483648"},
		{"rope q token stride", func() error {
			a := goodRope()
			a.QTokenStride = 1 << 62
			return a.Validate()
		}, "pagedkv: RopeCacheArgs.QTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 512 (the heads' span) and ≤ 2147483648"},
		{"rope 2^53 q heads, sizes wrapped to 0", func() error {
			a := goodRope()
			a.NumTokens, a.NumQHeads, a.Q.Bytes, a.QOut.Bytes = 16, 1<<53, 0, 0
			return a.Validate()
		}, "pagedkv: RopeCacheArgs.NumQHeads=9007199254740992 is out of range; allowed: 1..65536"},
		{"rope 2^32+2 q heads, packed as 2", func() error {
			a := goodRope()
			a.NumQHeads, a.Q.Bytes, a.QOut.Bytes = 1<<32+2, 1<<50, 1<<50
			return a.Validate()
		}, "pagedkv: RopeCacheArgs.NumQHeads=4294967298 is out of range; allowed: 1..65536"},
		{"qkv token stride", func() error {
			a := goodQKV()
			a.QKVTokenStride = 1 << 62
			return a.Validate()
		}, "pagedkv: QKVNormRopeArgs.QKVTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 1536 (the heads' span) and ≤ 2147483648"},
		{"mla q nope token stride", func() error {
			a := goodMLA()
			a.QNopeTokenStride = 1 << 62
			return a.Validate()
		}, "pagedkv: MLARopeQuantArgs.QNopeTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 8192 (the heads' span) and ≤ 2147483648"},
		{"mla k rope head stride", func() error {
			a := goodMLA()
			a.NumKVHeads, a.KRopeHeadStride, a.KNope.Bytes = 2, 1<<62, 2*a.KNope.Bytes
			return a.Validate()
		}, "pagedkv: MLARopeQuantArgs.KRopeHeadStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ RopeDim=64 and ≤ 2147483648"},
		{"concat q rope token stride", func() error {
			a := goodConcat()
			a.QRopeTokenStride = 1 << 62
			return a.Validate()
		}, "pagedkv: MLAConcatQArgs.QRopeTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 1024 (the heads' span) and ≤ 2147483648"},
		{"slice past the end", func() error {
			_, err := fakeBuffer(4096).Slice(math.MaxInt64, 1)
			return err
		}, "pagedkv: Buffer.Slice(9223372036854775807, 1) is outside a buffer of 4096 bytes; allowed: off ≥ 0, n ≥ 0, off+n ≤ 4096"},
		{"slice larger than its parent", func() error {
			_, err := fakeBuffer(4096).Slice(1, math.MaxInt64)
			return err
		}, "pagedkv: Buffer.Slice(1, 9223372036854775807) is outside a buffer of 4096 bytes; allowed: off ≥ 0, n ≥ 0, off+n ≤ 4096"},
		{"largest cache, no overflow", func() error {
			a := GatherArgs{KCache: fakeBuffer(1), VCache: fakeBuffer(1), NumKVHeads: 1 << 16, HeadDim: 256,
				BlockSize: 256, NumBlocks: 1<<23 - 1, CacheDType: F16}
			return a.Validate()
		}, "pagedkv: GatherArgs.KCache holds 1 bytes; the shapes need 72057585447993344"},
		{"pool beyond int32 slots", func() error {
			a := GatherArgs{KCache: fakeBuffer(1), VCache: fakeBuffer(1), NumKVHeads: 1, HeadDim: 8,
				BlockSize: 256, NumBlocks: 1 << 40, CacheDType: F16}
			return a.Validate()
		}, "pagedkv: GatherArgs.NumBlocks=1099511627776 is out of range; allowed: 1..2147483647"},
		{"decode sequence length beyond the kernels' int32 positions", func() error {
			a := goodDecode()
			a.MaxBlocksPerSeq = 1<<26 + 1
			return a.Validate()
		}, "pagedkv: DecodeArgs.MaxBlocksPerSeq=67108865 is out of range; allowed: 1..67108864 (MaxBlocksPerSeq·BlockSize at most 2^30 tokens)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			require.Error(t, err)
			assert.Equal(t, c.want, err.Error())
			assert.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
}

func TestBufferSlice(t *testing.T) {
	b := fakeBuffer(4096)
	v, err := b.Slice(4000, 96)
	require.NoError(t, err)
	assert.Equal(t, Buffer{Ptr: b.Ptr + 4000, Bytes: 96}, v)
	v, err = b.Slice(4096, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), v.Bytes)
	for _, c := range [][2]int64{{-1, 1}, {0, -1}, {4000, 97}, {4097, 0}, {math.MaxInt64, 1}, {1, math.MaxInt64}, {math.MaxInt64, math.MaxInt64}} {
		_, err := b.Slice(c[0], c[1])
		assert.ErrorIs(t, err, ErrInvalidArgument, "Slice(%d, %d)", c[0], c[1])
	}
	_, err = Buffer{Ptr: ptrAt(math.MaxUint64 - 15), Bytes: math.MaxInt64}.Slice(32, 0)
	assert.ErrorContains(t, err, "runs past the end of the address space")
	_, err = Buffer{Ptr: b.Ptr, Bytes: -8}.Slice(0, 0)
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

func TestCheckedArithmetic(t *testing.T) {
	p, ok := mul64(1<<31, 1<<31)
	assert.True(t, ok)
	assert.Equal(t, int64(1<<62), p)
	_, ok = mul64(1<<32, 1<<31)
	assert.False(t, ok, "2^63 does not fit")
	_, ok = mul64(-1, 1)
	assert.False(t, ok)
	s, ok := add64(math.MaxInt64-1, 1)
	assert.True(t, ok)
	assert.Equal(t, int64(math.MaxInt64), s)
	_, ok = add64(math.MaxInt64, 1)
	assert.False(t, ok)

	// extent: (Σ (count−1)·stride + row)·esize, or 0 for an empty axis.
	n, err := extent("X", "Q", 2, 128, axis{10, 512, "NumTokens", "TokenStride"}, axis{4, 128, "NumHeads", "HeadStride"})
	require.NoError(t, err)
	assert.Equal(t, int64((9*512+3*128+128)*2), n)
	n, err = extent("X", "Q", 2, 128, axis{0, 1 << 62, "NumTokens", "TokenStride"})
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = extent("X", "Q", 2, 128, axis{5, 1 << 62, "NumTokens", "TokenStride"})
	assert.EqualError(t, err, "pagedkv: X.TokenStride=4611686018427387904 is too large with NumTokens=5: Q would span more than 2^63 bytes; allowed: at most 1152921504606846943 with the other sizes as given")
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = extent("X", "Q", 2, 128, axis{3, 1 << 61, "NumTokens", "TokenStride"})
	assert.ErrorContains(t, err, "X.TokenStride=2305843009213693952 is too large with NumTokens=3", "the bytes overflow though the elements fit")
	// Each term fits, their sum does not: the farther axis is named, with the
	// most it may be beside the other.
	_, err = extent("X", "Q", 1, 8, axis{2, 1 << 61, "NumTokens", "TokenStride"}, axis{2, 3 << 61, "NumHeads", "HeadStride"})
	assert.EqualError(t, err, "pagedkv: X.HeadStride=6917529027641081856 is too large with NumHeads=2: Q would span more than 2^63 bytes; allowed: at most 6917529027641081847 with the other sizes as given")
	limit, err := extent("X", "Q", 1, 8, axis{2, 1 << 61, "NumTokens", "TokenStride"}, axis{2, 6917529027641081847, "NumHeads", "HeadStride"})
	require.NoError(t, err, "the limit the error quotes is allowed")
	assert.Equal(t, int64(math.MaxInt64), limit)

	b, err := size("X", "NumBlocks·BlockSize", 2, 1<<20, 256)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<29), b)
	_, err = size("X", "NumBlocks·BlockSize", 2, 1<<50, 256)
	assert.EqualError(t, err, "pagedkv: X.NumBlocks=1125899906842624 is too large: NumBlocks·BlockSize is more than 2^56 elements; allowed: at most 281474976710656 with the other sizes as given")
}

// TestBufferChecks covers what buffer rejects besides a short size: a
// negative size and a view that wraps the address space.
func TestBufferChecks(t *testing.T) {
	assert.ErrorContains(t, buffer("X", "Q", Buffer{Ptr: 0x1000, Bytes: -16}, 0, 16), "X.Q holds -16 bytes; allowed: a size ≥ 0")
	assert.ErrorContains(t, buffer("X", "Q", Buffer{Ptr: ptrAt(math.MaxUint64 - 15), Bytes: 32}, 0, 16), "X.Q at 0xfffffffffffffff0 with 32 bytes runs past the end of the address space")
	assert.NoError(t, buffer("X", "Q", Buffer{Ptr: 0x1000, Bytes: 16}, 16, 16))
}

// TestValidationErrorsMatchSentinel checks errors.Is for the host-side
// argument errors outside the Validate methods.
func TestValidationErrorsMatchSentinel(t *testing.T) {
	for _, err := range []error{
		Float32FromE4M3(make([]float32, 2), make([]uint8, 3), 1),
		Float32FromE4M3(make([]float32, 2), make([]uint8, 2), 0),
	} {
		assert.True(t, errors.Is(err, ErrInvalidArgument), "%v", err)
	}
}

// TestPlanError checks that a planner error reaching the caller matches
// both sentinels and names the caller's fields.
func TestPlanError(t *testing.T) {
	a := goodDecode()
	shape := a.shape(false, 0)
	shape.HeadDim = 72
	_, err := dispatch.PlanDecode(shape, dispatch.DeviceFacts{Name: "x", SMs: 108, MaxSharedPerBlockOptin: 163 << 10}, dispatch.DefaultKnobs())
	require.ErrorIs(t, err, dispatch.ErrInvalidShape)
	err = planError(err, "DecodeShape", decodeArg)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorIs(t, err, dispatch.ErrInvalidShape)
	assert.True(t, strings.HasPrefix(err.Error(), "pagedkv: DecodeArgs.HeadDim=72"), err.Error())
	assert.NotContains(t, err.Error(), "DecodeShape")
	assert.NoError(t, planError(nil, "DecodeShape", decodeArg))
}

// TestCheckDecodePlan checks what DecodeWithPlan accepts: the planner's own
// plans (single-pass, global-memory split-K, cluster split-K where the
// device has clusters), the same plans with another ring depth the kernel
// takes; and nothing else.
func TestCheckDecodePlan(t *testing.T) {
	a := goodDecode()
	plain := dispatch.DeviceFacts{Name: "A100-like", SMs: 108, MaxSharedPerBlockOptin: 163 << 10}
	sm90 := dispatch.DeviceFacts{Name: "H200-like", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Clusters: true}
	plan := func(dev dispatch.DeviceFacts, k dispatch.Knobs) dispatch.DecodePlan {
		p, err := dispatch.PlanDecode(a.shape(false, 0), dev, k)
		require.NoError(t, err)
		return p
	}
	k := dispatch.DefaultKnobs()
	single := k
	single.PagedFlash = false
	forced := k
	forced.ForcedSplits = 4
	wide := forced
	wide.Narrow = false
	balanced := k
	balanced.Balance = dispatch.SplitOn

	for _, tt := range []struct {
		name string
		dev  dispatch.DeviceFacts
		plan dispatch.DecodePlan
	}{
		{"single-pass", plain, plan(plain, single)},
		{"split-K", plain, plan(plain, forced)},
		{"cluster split-K", sm90, plan(sm90, forced)},
		{"wide kernels for a narrow group (DECODE_NARROW=0)", plain, plan(plain, wide)},
		{"wide cluster kernels for a narrow group", sm90, plan(sm90, wide)},
		{"balanced", plain, plan(plain, balanced)},
		{"balanced on a device with clusters", sm90, plan(sm90, balanced)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, checkDecodePlan(&a, &tt.plan, &tt.dev))
			for stages := dispatch.DecodeMinStages; stages <= dispatch.DecodeMaxStages; stages++ {
				p := tt.plan
				n, ok := dispatch.DecodeStagesShared(p.Kernel, stages)
				require.True(t, ok)
				p.SharedBytes = uint32(n)
				if n <= tt.dev.MaxSharedPerBlockOptin {
					assert.NoError(t, checkDecodePlan(&a, &p, &tt.dev), "%d stages", stages)
				} else {
					assert.Error(t, checkDecodePlan(&a, &p, &tt.dev), "%d stages over the device's limit", stages)
				}
			}
			p := tt.plan
			p.SharedBytes += 16
			assert.Error(t, checkDecodePlan(&a, &p, &tt.dev), "a size the kernel does not read")
			p = tt.plan
			p.Grid.X++
			err := checkDecodePlan(&a, &p, &tt.dev)
			assert.ErrorIs(t, err, ErrInvalidArgument, "another shape's grid")
			assert.ErrorContains(t, err, fmt.Sprintf("DecodePlan.Grid=%v, where this DecodeArgs needs %v", p.Grid, tt.plan.Grid), "names the field and both values")
		})
	}

	// Score modifiers: their _mods kernels read every layout, over 16-bit
	// and fp8 caches alike.
	for _, cache := range []DType{F16, E4M3} {
		for _, layout := range []CacheLayout{LayoutFlash, LayoutXSplit, LayoutShuffle} {
			m := goodDecode()
			m.SoftCap, m.CacheDType, m.Layout = 5, cache, layout
			if cache == E4M3 {
				m.KScale, m.VScale = 0.5, 0.5
			}
			for _, kn := range []dispatch.Knobs{k, single, forced, wide} {
				p, err := dispatch.PlanDecode(m.shape(false, 0), plain, kn)
				require.NoError(t, err)
				assert.Contains(t, p.Kernel, "_mods")
				assert.NoError(t, checkDecodePlan(&m, &p, &plain), "%v cache, %v layout: %s", cache, layout, p.Kernel)
			}
		}
	}

	cluster := plan(sm90, forced)
	require.Equal(t, uint32(4), cluster.Cluster)
	// Checking a plan allocates nothing (DecodeWithPlan runs it per call).
	for _, p := range []dispatch.DecodePlan{cluster, plan(plain, forced), plan(plain, single)} {
		dev := sm90
		if p.Cluster == 0 {
			dev = plain
		}
		allocs := testing.AllocsPerRun(100, func() { require.NoError(t, checkDecodePlan(&a, &p, &dev)) })
		assert.Zero(t, allocs, "%s", p.Kernel)
	}
	// Nor at the head dims without cluster kernels, whose twin's name is
	// an error.
	for _, d := range []int{80, 120, 192} {
		hd := goodDecode()
		hd.HeadDim = d
		for _, kn := range []dispatch.Knobs{k, forced, wide} {
			p, err := dispatch.PlanDecode(hd.shape(false, 0), plain, kn)
			require.NoError(t, err)
			allocs := testing.AllocsPerRun(100, func() { require.NoError(t, checkDecodePlan(&hd, &p, &plain)) })
			assert.Zero(t, allocs, "%s", p.Kernel)
		}
	}
	// fp8 caches: each layout family has its own kernels (the _laid ones
	// for the x-split and shuffle layouts), and a plan for one family does
	// not run over the other's caches.
	fp8 := a
	fp8.CacheDType = E4M3
	for _, dev := range []dispatch.DeviceFacts{plain, sm90} {
		for _, kn := range []dispatch.Knobs{k, forced} {
			fp8.Layout = LayoutFlash
			flash, err := dispatch.PlanDecode(fp8.shape(false, 0), dev, kn)
			require.NoError(t, err)
			fp8.Layout = LayoutShuffle
			laid, err := dispatch.PlanDecode(fp8.shape(false, 0), dev, kn)
			require.NoError(t, err)
			require.Equal(t, flash.Kernel+"_laid", laid.Kernel)
			assert.NoError(t, checkDecodePlan(&fp8, &laid, &dev), "%s", laid.Kernel)
			assert.ErrorContains(t, checkDecodePlan(&fp8, &flash, &dev), "is for another cache layout than DecodeArgs.Layout=shuffle", "%s over a shuffle cache", flash.Kernel)
			fp8.Layout = LayoutFlash
			assert.NoError(t, checkDecodePlan(&fp8, &flash, &dev), "%s", flash.Kernel)
			assert.ErrorContains(t, checkDecodePlan(&fp8, &laid, &dev), "is for another cache layout than DecodeArgs.Layout=flash", "%s over a flash cache", laid.Kernel)
		}
	}

	err := checkDecodePlan(&a, &cluster, &plain)
	assert.ErrorContains(t, err, "thread-block clusters, which A100-like lacks")
	global := plan(plain, forced)
	assert.NoError(t, checkDecodePlan(&a, &global, &sm90), "the global-memory path on a device with clusters")
	global.Cluster = 4
	assert.Error(t, checkDecodePlan(&a, &global, &sm90), "a cluster depth on the global-memory kernel")
	cluster.Cluster = 2
	assert.Error(t, checkDecodePlan(&a, &cluster, &sm90), "a cluster depth other than the split count")

	// A balanced plan takes any number of spare items, with the scratch
	// that number needs; never fewer items than sequences, nor clusters.
	bal := plan(plain, balanced)
	require.True(t, bal.Balanced())
	more := bal
	more.Grid.Y += 7
	assert.Error(t, checkDecodePlan(&a, &more, &plain), "scratch for other items")
	shape := a.shape(false, 0)
	more.SetBalancedItems(&shape, int(more.Grid.Y))
	assert.NoError(t, checkDecodePlan(&a, &more, &plain))
	few := bal
	few.SetBalancedItems(&shape, a.NumSeqs)
	assert.ErrorContains(t, checkDecodePlan(&a, &few, &plain), "work items")
	off := bal
	off.WorkOffset++
	assert.Error(t, checkDecodePlan(&a, &off, &plain), "a work list off its place")
	bal.Cluster = 2
	assert.Error(t, checkDecodePlan(&a, &bal, &sm90), "a balanced plan in clusters")
}

func goodQKV() QKVNormRopeArgs {
	const tok, seqs, qh, kh, d, bs, nb, mb, maxPos, rot = 12, 3, 8, 2, 128, 16, 32, 8, 4096, 64
	return QKVNormRopeArgs{
		QKV: fakeBuffer(tok * (qh + 2*kh) * d * 2), QOut: fakeBuffer(tok * qh * d * 2),
		KCache: fakeBuffer(nb * bs * kh * d * 2), VCache: fakeBuffer(nb * bs * kh * d * 2),
		BlockTables: fakeBuffer(seqs * mb * 4), CuSeqlensQ: fakeBuffer((seqs + 1) * 4), PosOffsets: fakeBuffer(seqs * 4),
		CosSin:      fakeBuffer(maxPos * 2 * rot * 4),
		QNormWeight: fakeBuffer(d * 2), KNormWeight: fakeBuffer(d * 2), Norm: NormQK, Eps: 1e-6,
		NumTokens: tok, NumSeqs: seqs, NumQHeads: qh, NumKVHeads: kh, HeadDim: d, BlockSize: bs, NumBlocks: nb,
		MaxBlocksPerSeq: mb, MaxPos: maxPos, RotDim: rot, NeoX: true, DType: BF16, CacheDType: BF16,
	}
}

func TestQKVNormRopeArgsValidate(t *testing.T) {
	a := goodQKV()
	require.NoError(t, a.Validate())
	strided := goodQKV()
	strided.QKVTokenStride = 2048
	strided.QKV.Bytes = (11*2048 + 1536) * 2 // the last token needs only its heads
	require.NoError(t, strided.Validate())
	strided.QKV.Bytes--
	require.ErrorContains(t, strided.Validate(), "QKVNormRopeArgs.QKV holds 48127 bytes; the shapes need 48128")
	one := goodQKV()
	one.CuSeqlensQ, one.NumSeqs, one.Norm, one.Eps, one.QNormWeight, one.KNormWeight = Buffer{}, 1, NormNone, 0, Buffer{}, Buffer{}
	require.NoError(t, one.Validate())
	fp8 := goodQKV()
	fp8.CacheDType, fp8.KScale, fp8.VScale = E4M3, 0.5, 0.5
	fp8.KCache.Bytes, fp8.VCache.Bytes = fp8.KCache.Bytes/2, fp8.VCache.Bytes/2
	require.NoError(t, fp8.Validate())
	for _, l := range []CacheLayout{LayoutXSplit, LayoutShuffle} {
		laid := goodQKV()
		laid.Layout = l
		require.NoError(t, laid.Validate(), l)
		laid.CacheDType, laid.KScale, laid.VScale = E4M3, 1, 1
		require.NoError(t, laid.Validate(), "%v e4m3", l)
	}

	cases := []badCase[QKVNormRopeArgs]{
		{"layout", func(a *QKVNormRopeArgs) { a.Layout = 4 }, "QKVNormRopeArgs.Layout=4 is not supported; allowed: LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND"},
		{"shuffle block size", func(a *QKVNormRopeArgs) {
			a.CacheDType, a.KScale, a.VScale, a.Layout = E4M3, 1, 1, LayoutShuffle
			a.BlockSize, a.NumBlocks = 8, 64
		}, "QKVNormRopeArgs.BlockSize=8 is not allowed with the shuffle layout and a e4m3 cache; allowed: a multiple of 16"},
		{"q heads", func(a *QKVNormRopeArgs) { a.NumQHeads = 1<<12 + 2 }, "QKVNormRopeArgs.NumQHeads=4098 is out of range; allowed: 1..4096"},
		{"gqa", func(a *QKVNormRopeArgs) { a.NumQHeads = 7 }, "QKVNormRopeArgs.NumQHeads=7 is not a multiple of NumKVHeads=2"},
		{"kv heads", func(a *QKVNormRopeArgs) { a.NumKVHeads = 0 }, "QKVNormRopeArgs.NumKVHeads=0 is out of range"},
		{"tokens", func(a *QKVNormRopeArgs) { a.NumTokens = 1<<30 + 1 }, "QKVNormRopeArgs.NumTokens=1073741825 is out of range; allowed: 0..1073741824"},
		{"seqs", func(a *QKVNormRopeArgs) { a.NumSeqs = 1<<20 + 1 }, "QKVNormRopeArgs.NumSeqs=1048577 is out of range; allowed: 1..1048576"},
		{"seqs without cu", func(a *QKVNormRopeArgs) { a.CuSeqlensQ = Buffer{} }, "QKVNormRopeArgs.NumSeqs=3 needs CuSeqlensQ; without it the tokens are one sequence"},
		{"head dim", func(a *QKVNormRopeArgs) { a.HeadDim = 100 }, "QKVNormRopeArgs.HeadDim=100 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{"head dim big", func(a *QKVNormRopeArgs) { a.HeadDim = 512 }, "QKVNormRopeArgs.HeadDim=512 is not allowed; allowed: a multiple of 8 from 16 to 256"},
		{"rot", func(a *QKVNormRopeArgs) { a.RotDim = 48 }, "QKVNormRopeArgs.RotDim=48 is not allowed; allowed: HeadDim=128 or HeadDim/2=64"},
		{"max pos", func(a *QKVNormRopeArgs) { a.MaxPos = 0 }, "QKVNormRopeArgs.MaxPos=0 is out of range; allowed: 1..1073741824"},
		{"max blocks", func(a *QKVNormRopeArgs) { a.MaxBlocksPerSeq = 0 }, "QKVNormRopeArgs.MaxBlocksPerSeq=0 is out of range"},
		{"weights without norm", func(a *QKVNormRopeArgs) { a.Norm = NormNone }, "QKVNormRopeArgs: QNormWeight, KNormWeight and Eps are only used with Norm=NormQK"},
		{"eps", func(a *QKVNormRopeArgs) { a.Eps = 0 }, "QKVNormRopeArgs.Eps=0 is not allowed with NormQK; allowed: a finite value > 0"},
		{"weight small", func(a *QKVNormRopeArgs) { a.KNormWeight.Bytes = 128 }, "QKVNormRopeArgs.KNormWeight holds 128 bytes; the shapes need 256"},
		{"norm mode", func(a *QKVNormRopeArgs) { a.Norm = 5 }, "QKVNormRopeArgs.Norm=5 is not supported; allowed: NormNone, NormQK"},
		{"qkv small", func(a *QKVNormRopeArgs) { a.QKV.Bytes -= 16 }, "QKVNormRopeArgs.QKV holds 36848 bytes; the shapes need 36864"},
		{"qkv misaligned", func(a *QKVNormRopeArgs) { a.QKV.Ptr += 8 }, "QKVNormRopeArgs.QKV pointer 0x… is not 16-byte aligned"},
		{"q out small", func(a *QKVNormRopeArgs) { a.QOut.Bytes -= 32 }, "QKVNormRopeArgs.QOut holds 24544 bytes; the shapes need 24576"},
		{"token stride", func(a *QKVNormRopeArgs) { a.QKVTokenStride = 1000 }, "QKVNormRopeArgs.QKVTokenStride=1000 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 1536 (the heads' span)"},
		{"cu seqlens small", func(a *QKVNormRopeArgs) { a.CuSeqlensQ.Bytes = 12 }, "QKVNormRopeArgs.CuSeqlensQ holds 12 bytes; the shapes need 16"},
		{"pos offsets", func(a *QKVNormRopeArgs) { a.PosOffsets = Buffer{} }, "QKVNormRopeArgs.PosOffsets is missing"},
		{"tables", func(a *QKVNormRopeArgs) { a.BlockTables.Bytes = 64 }, "QKVNormRopeArgs.BlockTables holds 64 bytes; the shapes need 96"},
		{"cos sin", func(a *QKVNormRopeArgs) { a.CosSin.Bytes-- }, "QKVNormRopeArgs.CosSin holds 2097151 bytes; the shapes need 2097152"},
		{"cos sin misaligned", func(a *QKVNormRopeArgs) { a.CosSin.Ptr += 2 }, "QKVNormRopeArgs.CosSin pointer 0x… is not 4-byte aligned"},
		{"cache", func(a *QKVNormRopeArgs) { a.VCache.Bytes -= 2 }, "QKVNormRopeArgs.VCache holds 262142 bytes; the shapes need 262144"},
		{"fp8 scale", func(a *QKVNormRopeArgs) { a.CacheDType = E4M3 }, "QKVNormRopeArgs.KScale=0 is not allowed with an e4m3 cache"},
		{"dtype", func(a *QKVNormRopeArgs) { a.DType = E4M3 }, "QKVNormRopeArgs.DType=e4m3 is not supported; allowed: f16, bf16"},
	}
	expectErrors(t, goodQKV, cases)
}

func goodMLA() MLARopeQuantArgs {
	const tok, h, kh, lora, rope, maxPos = 6, 16, 1, 512, 64, 1024
	return MLARopeQuantArgs{
		QNope: fakeBuffer(tok * h * lora * 2), QRope: fakeBuffer(tok * h * rope * 2),
		KNope: fakeBuffer(tok * kh * lora * 2), KRope: fakeBuffer(tok * kh * rope * 2),
		QOut: fakeBuffer(tok * h * (lora + rope)), KNopeOut: fakeBuffer(tok * kh * lora), KRopeOut: fakeBuffer(tok * kh * rope),
		Positions: fakeBuffer(tok * 8), CosSin: fakeBuffer(maxPos * 2 * rope * 4),
		NumTokens: tok, NumQHeads: h, NumKVHeads: kh, LoraRank: lora, RopeDim: rope, MaxPos: maxPos, RotDim: rope,
		NeoX: true, DType: BF16, QOutScale: 0.5, KOutScale: 0.25,
	}
}

func TestMLARopeQuantArgsValidate(t *testing.T) {
	a := goodMLA()
	require.NoError(t, a.Validate())
	// QNope and QRope as two strided views of one q of [6, 16, 576].
	views := goodMLA()
	views.QNopeTokenStride, views.QNopeHeadStride = 16*576, 576
	views.QRopeTokenStride, views.QRopeHeadStride = 16*576, 576
	views.QNope = Buffer{Ptr: 0x7f0000000000, Bytes: (5*16*576 + 15*576 + 512) * 2}
	views.QRope = Buffer{Ptr: 0x7f0000000000 + 1024, Bytes: (5*16*576 + 15*576 + 64) * 2}
	require.NoError(t, views.Validate())
	views.QRope.Bytes--
	require.ErrorContains(t, views.Validate(), "MLARopeQuantArgs.QRope holds")

	cases := []badCase[MLARopeQuantArgs]{
		{"dtype", func(a *MLARopeQuantArgs) { a.DType = E4M3 }, "MLARopeQuantArgs.DType=e4m3 is not supported; allowed: f16, bf16"},
		{"tokens", func(a *MLARopeQuantArgs) { a.NumTokens = -1 }, "MLARopeQuantArgs.NumTokens=-1 is out of range; allowed: 0..1073741824"},
		{"heads", func(a *MLARopeQuantArgs) { a.NumQHeads = 0 }, "MLARopeQuantArgs.NumQHeads=0 is out of range; allowed: 1..4096"},
		{"kv heads", func(a *MLARopeQuantArgs) { a.NumKVHeads = 1<<12 + 1 }, "MLARopeQuantArgs.NumKVHeads=4097 is out of range; allowed: 1..4096"},
		{"lora", func(a *MLARopeQuantArgs) { a.LoraRank = 12 }, "MLARopeQuantArgs.LoraRank=12 is not supported; allowed: a multiple of 8 from 8 to 4096"},
		{"rope", func(a *MLARopeQuantArgs) { a.RopeDim = 24 }, "MLARopeQuantArgs.RopeDim=24 is not supported; allowed: a multiple of 16 from 16 to 512"},
		{"rot", func(a *MLARopeQuantArgs) { a.RotDim = 48 }, "MLARopeQuantArgs.RotDim=48 is not allowed; allowed: RopeDim=64 or RopeDim/2=32"},
		{"max pos", func(a *MLARopeQuantArgs) { a.MaxPos = 1<<30 + 1 }, "MLARopeQuantArgs.MaxPos=1073741825 is out of range"},
		{"q scale", func(a *MLARopeQuantArgs) { a.QOutScale = 0 }, "MLARopeQuantArgs.QOutScale=0 is not allowed; allowed: a finite value > 0 (the e4m3 outputs are QOut = q / QOutScale)"},
		{"k scale", func(a *MLARopeQuantArgs) { a.KOutScale = float32(math.Inf(1)) }, "MLARopeQuantArgs.KOutScale=+Inf is not allowed; allowed: a finite value > 0 (the e4m3 outputs are KNopeOut, KRopeOut = k / KOutScale)"},
		{"nope head stride", func(a *MLARopeQuantArgs) { a.QNopeHeadStride = 256 }, "MLARopeQuantArgs.QNopeHeadStride=256 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ LoraRank=512"},
		{"rope token stride", func(a *MLARopeQuantArgs) { a.KRopeTokenStride = 100 }, "MLARopeQuantArgs.KRopeTokenStride=100 is not allowed"},
		{"q nope small", func(a *MLARopeQuantArgs) { a.QNope.Bytes-- }, "MLARopeQuantArgs.QNope holds 98303 bytes; the shapes need 98304"},
		{"q out small", func(a *MLARopeQuantArgs) { a.QOut.Bytes-- }, "MLARopeQuantArgs.QOut holds 55295 bytes; the shapes need 55296"},
		{"k rope out missing", func(a *MLARopeQuantArgs) { a.KRopeOut = Buffer{} }, "MLARopeQuantArgs.KRopeOut is missing"},
		{"k nope out misaligned", func(a *MLARopeQuantArgs) { a.KNopeOut.Ptr += 4 }, "MLARopeQuantArgs.KNopeOut pointer 0x… is not 8-byte aligned"},
		{"positions", func(a *MLARopeQuantArgs) { a.Positions.Bytes = 40 }, "MLARopeQuantArgs.Positions holds 40 bytes; the shapes need 48"},
		{"cos sin", func(a *MLARopeQuantArgs) { a.CosSin.Bytes = 100 }, "MLARopeQuantArgs.CosSin holds 100 bytes; the shapes need 524288"},
	}
	expectErrors(t, goodMLA, cases)
	// An MLA step writes no cache: its scale errors must not speak of one.
	b := goodMLA()
	b.QOutScale = -1
	assert.NotContains(t, b.Validate().Error(), "cache")
}

func goodConcat() MLAConcatQArgs {
	const tok, h, lora, rope = 6, 16, 512, 64
	return MLAConcatQArgs{
		QNope: fakeBuffer(tok * h * lora * 2), QRope: fakeBuffer(tok * h * rope * 2), Out: fakeBuffer(tok * h * (lora + rope) * 2),
		NumTokens: tok, NumQHeads: h, LoraRank: lora, RopeDim: rope, DType: F16,
	}
}

func TestMLAConcatQArgsValidate(t *testing.T) {
	a := goodConcat()
	require.NoError(t, a.Validate())
	none := goodConcat()
	none.NumTokens, none.Out = 0, Buffer{}
	require.NoError(t, none.Validate(), "no tokens: nothing is written")
	strided := goodConcat()
	strided.QRopeTokenStride, strided.QRopeHeadStride = 16*128, 128
	strided.QRope.Bytes = (5*16*128 + 15*128 + 64) * 2
	require.NoError(t, strided.Validate())

	cases := []badCase[MLAConcatQArgs]{
		{"dtype", func(a *MLAConcatQArgs) { a.DType = 0 }, "MLAConcatQArgs.DType=DType(0) is not supported; allowed: f16, bf16"},
		{"tokens", func(a *MLAConcatQArgs) { a.NumTokens = -1 }, "MLAConcatQArgs.NumTokens=-1 is out of range"},
		{"heads", func(a *MLAConcatQArgs) { a.NumQHeads = 1<<12 + 1 }, "MLAConcatQArgs.NumQHeads=4097 is out of range; allowed: 1..4096"},
		{"lora", func(a *MLAConcatQArgs) { a.LoraRank = 0 }, "MLAConcatQArgs.LoraRank=0 is not supported; allowed: a multiple of 8 from 8 to 4096"},
		{"rope", func(a *MLAConcatQArgs) { a.RopeDim = 4104 }, "MLAConcatQArgs.RopeDim=4104 is not supported; allowed: a multiple of 8 from 8 to 4096"},
		{"out small", func(a *MLAConcatQArgs) { a.Out.Bytes-- }, "MLAConcatQArgs.Out holds 110591 bytes; the shapes need 110592"},
		{"out misaligned", func(a *MLAConcatQArgs) { a.Out.Ptr += 8 }, "MLAConcatQArgs.Out pointer 0x… is not 16-byte aligned"},
		{"rope stride", func(a *MLAConcatQArgs) { a.QRopeTokenStride = 100 }, "MLAConcatQArgs.QRopeTokenStride=100 is not allowed"},
		{"nope stride", func(a *MLAConcatQArgs) { a.QNopeHeadStride = 8 }, "MLAConcatQArgs.QNopeHeadStride=8 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ LoraRank=512"},
		{"nope small", func(a *MLAConcatQArgs) { a.QNope.Bytes = 2 }, "MLAConcatQArgs.QNope holds 2 bytes; the shapes need 98304"},
		{"rope missing", func(a *MLAConcatQArgs) { a.QRope = Buffer{} }, "MLAConcatQArgs.QRope is missing"},
	}
	expectErrors(t, goodConcat, cases)
}

// goodVarlen is a mixed batch: a decode token (q_len 1), a 16-token verify
// step and a 23-token prefill chunk ending at MaxKVLen, with host copies of
// the lengths.
func goodVarlen() VarlenArgs {
	const s, tq, qh, kh, d, bs, nb, mb = 3, 40, 16, 4, 128, 16, 64, 16
	return VarlenArgs{
		Q: fakeBuffer(tq * qh * d * 2), KCache: fakeBuffer(nb * bs * kh * d * 2), VCache: fakeBuffer(nb * bs * kh * d * 2),
		BlockTables: fakeBuffer(s * mb * 4), CuSeqlensQ: fakeBuffer((s + 1) * 4), PosOffsets: fakeBuffer(s * 4),
		Out: fakeBuffer(tq * qh * d * 2), LSE: fakeBuffer(tq * qh * 4),
		NumSeqs: s, NumTokens: tq, NumQHeads: qh, NumKVHeads: kh, HeadDim: d,
		BlockSize: bs, NumBlocks: nb, MaxBlocksPerSeq: mb, MaxKVLen: 200, Causal: true,
		HostCuSeqlensQ: []int32{0, 1, 17, 40}, HostPosOffsets: []int32{99, 0, 177},
		DType: BF16, CacheDType: BF16,
	}
}

func TestVarlenArgsValidate(t *testing.T) {
	a := goodVarlen()
	require.NoError(t, a.Validate())
	bare := goodVarlen()
	bare.HostCuSeqlensQ, bare.HostPosOffsets, bare.LSE = nil, nil, Buffer{}
	require.NoError(t, bare.Validate(), "no host lengths, no LSE")
	bounds := goodVarlen()
	bounds.HostPosOffsets = nil
	require.NoError(t, bounds.Validate(), "bounds without offsets")
	fp8 := goodVarlen()
	fp8.CacheDType, fp8.KScale, fp8.VScale = E4M3, 0.5, 2
	fp8.KCache.Bytes, fp8.VCache.Bytes = fp8.KCache.Bytes/2, fp8.VCache.Bytes/2
	require.NoError(t, fp8.Validate())
	ws := goodVarlen()
	ws.Workspace, ws.Scale, ws.KVCapacity = fakeBuffer(4096), 0.0625, 256
	require.NoError(t, ws.Validate())

	// Head-major Out, [NumQHeads, NumTokens, HeadDim] as SequenceAttention
	// writes it, needs the same bytes as token-major.
	headMajor := goodVarlen()
	headMajor.OutTokenStride, headMajor.OutHeadStride = 128, 40*128
	require.NoError(t, headMajor.Validate())
	headMajor.Out.Bytes--
	require.ErrorContains(t, headMajor.Validate(), "VarlenArgs.Out holds 163839 bytes; the shapes need 163840")
	// Padded token-major rows: the last row needs only its own head.
	padded := goodVarlen()
	padded.OutTokenStride, padded.OutHeadStride = 16*136, 136
	padded.Out.Bytes = (39*16*136 + 15*136 + 128) * 2
	require.NoError(t, padded.Validate())
	padded.Out.Bytes--
	require.ErrorContains(t, padded.Validate(), "VarlenArgs.Out holds 174063 bytes; the shapes need 174064")
	// A strided Q: the last token needs only its heads.
	strided := goodVarlen()
	strided.QTokenStride = 2048 + 8
	strided.Q.Bytes = (39*2056 + 2048) * 2
	require.NoError(t, strided.Validate())
	strided.Q.Bytes--
	require.ErrorContains(t, strided.Validate(), "VarlenArgs.Q holds 164463 bytes; the shapes need 164464")

	// No query tokens (q_len 0 everywhere): Q, Out and LSE are never touched.
	none := goodVarlen()
	none.NumTokens, none.Q, none.Out, none.LSE = 0, Buffer{}, Buffer{}, Buffer{}
	none.HostCuSeqlensQ, none.HostPosOffsets = []int32{0, 0, 0, 0}, []int32{200, 0, 7}
	require.NoError(t, none.Validate())
	// NumTokens·NumQHeads at its bound, 2^30.
	most := goodVarlen()
	most.NumTokens, most.HostCuSeqlensQ, most.HostPosOffsets = 1<<26, nil, nil
	most.Q.Bytes, most.Out.Bytes, most.LSE.Bytes = int64(most.NumTokens)*16*128*2, int64(most.NumTokens)*16*128*2, int64(most.NumTokens)*16*4
	require.NoError(t, most.Validate())

	const outStrides = "are not allowed; allowed: both 0 (token-major, contiguous), or even strides ≤ 2147483648 whose rows never overlap: OutHeadStride ≥ HeadDim=128 and OutTokenStride ≥ NumQHeads·OutHeadStride, or OutTokenStride ≥ HeadDim and OutHeadStride ≥ NumTokens·OutTokenStride"
	for _, l := range []CacheLayout{LayoutXSplit, LayoutShuffle, LayoutHND} {
		laid := goodVarlen()
		laid.Layout = l
		require.NoError(t, laid.Validate(), l)
		laid.CacheDType, laid.KScale, laid.VScale = E4M3, 1, 1
		require.NoError(t, laid.Validate(), "%v e4m3", l)
	}
	cases := []badCase[VarlenArgs]{
		{"layout", func(a *VarlenArgs) { a.Layout = 4 }, "VarlenArgs.Layout=4 is not supported; allowed: LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND"},
		{"HND pool", func(a *VarlenArgs) { a.Layout, a.NumBlocks = LayoutHND, 1<<26+1 }, "VarlenArgs.NumBlocks=67108865 is too large for Layout=HND"},
		{"layout fp8 block", func(a *VarlenArgs) {
			a.Layout, a.CacheDType, a.KScale, a.VScale, a.BlockSize, a.MaxBlocksPerSeq = LayoutXSplit, E4M3, 1, 1, 8, 2*a.MaxBlocksPerSeq
		}, "VarlenArgs.BlockSize=8 is not allowed with the x-split layout and a e4m3 cache; allowed: 16 to 256"},
		{"dtype", func(a *VarlenArgs) { a.DType = E4M3 }, "VarlenArgs.DType=e4m3 is not supported; allowed: f16, bf16"},
		{"dtype zero", func(a *VarlenArgs) { a.DType = 0 }, "VarlenArgs.DType=DType(0) is not supported; allowed: f16, bf16"},
		{"cache dtype", func(a *VarlenArgs) { a.CacheDType = F16 }, "VarlenArgs.CacheDType=f16 is not supported with DType=bf16; allowed: bf16, e4m3"},
		{"head dim", func(a *VarlenArgs) { a.HeadDim = 72 }, "VarlenArgs.HeadDim=72 is not supported; allowed: 64, 80, 96, 112, 120, 128, 192, 256"},
		{"head dim with fp8", func(a *VarlenArgs) { a.HeadDim, a.CacheDType = 112, E4M3 }, "VarlenArgs.HeadDim=112 is not supported with CacheDType=e4m3; allowed there: 64, 96, 128, 192, 256"},
		{"head dim big", func(a *VarlenArgs) { a.HeadDim = 512 }, "VarlenArgs.HeadDim=512 is not supported; allowed: 64, 80, 96, 112, 120, 128, 192, 256"},
		{"head dim 120 laid", func(a *VarlenArgs) { a.HeadDim, a.Layout = 120, LayoutXSplit }, "VarlenArgs.HeadDim=120 is not supported with Layout=x-split"},
		{"seqs", func(a *VarlenArgs) { a.NumSeqs = 0 }, "VarlenArgs.NumSeqs=0 is out of range; allowed: 1..16777216"},
		{"seqs big", func(a *VarlenArgs) { a.NumSeqs = 1<<24 + 1 }, "VarlenArgs.NumSeqs=16777217 is out of range; allowed: 1..16777216"},
		{"kv heads", func(a *VarlenArgs) { a.NumKVHeads = 0 }, "VarlenArgs.NumKVHeads=0 is out of range; allowed: 1..65535"},
		{"kv heads big", func(a *VarlenArgs) { a.NumKVHeads = 65536 }, "VarlenArgs.NumKVHeads=65536 is out of range; allowed: 1..65535"},
		{"q heads", func(a *VarlenArgs) { a.NumQHeads = 0 }, "VarlenArgs.NumQHeads=0 is out of range; allowed: a multiple of NumKVHeads=4 from 4 to 64"},
		{"q heads not a multiple", func(a *VarlenArgs) { a.NumQHeads = 30 }, "VarlenArgs.NumQHeads=30 is not a multiple of NumKVHeads=4"},
		{"group", func(a *VarlenArgs) { a.NumQHeads = 68 }, "VarlenArgs.NumQHeads/NumKVHeads=17 is not supported; allowed: a group size from 1 to 16"},
		{"q heads 2^32+2", func(a *VarlenArgs) { a.NumQHeads, a.NumKVHeads = 1<<32+2, 2 }, "VarlenArgs.NumQHeads/NumKVHeads=2147483649 is not supported; allowed: a group size from 1 to 16"},
		{"tokens negative", func(a *VarlenArgs) { a.NumTokens = -1 }, "VarlenArgs.NumTokens=-1 is out of range; allowed: 0..67108864 (NumTokens·NumQHeads ≤ 2^30)"},
		{"tokens·heads past 2^30", func(a *VarlenArgs) { a.NumTokens = 1<<26 + 1 }, "VarlenArgs.NumTokens=67108865 is out of range; allowed: 0..67108864 (NumTokens·NumQHeads ≤ 2^30)"},
		{"block size", func(a *VarlenArgs) { a.BlockSize = 24 }, "VarlenArgs.BlockSize=24 is not allowed; allowed: a power of two from 1 to 256"},
		{"block size big", func(a *VarlenArgs) { a.BlockSize = 512 }, "VarlenArgs.BlockSize=512 is not allowed; allowed: a power of two from 1 to 256"},
		{"blocks", func(a *VarlenArgs) { a.NumBlocks = 0 }, "VarlenArgs.NumBlocks=0 is out of range; allowed: 1..2147483647"},
		{"blocks big", func(a *VarlenArgs) { a.NumBlocks = 1 << 31 }, "VarlenArgs.NumBlocks=2147483648 is out of range; allowed: 1..2147483647"},
		{"pool rows", func(a *VarlenArgs) { a.NumBlocks, a.BlockSize = 1<<30, 8 }, "VarlenArgs.NumBlocks=1073741824 is too large for BlockSize=8; allowed: NumBlocks·BlockSize at most 2^31−1 (at most 268435455 blocks)"},
		{"max blocks", func(a *VarlenArgs) { a.MaxBlocksPerSeq = 0 }, "VarlenArgs.MaxBlocksPerSeq=0 is out of range; allowed: 1..67108864 (MaxBlocksPerSeq·BlockSize at most 2^30 tokens)"},
		{"max blocks big", func(a *VarlenArgs) { a.MaxBlocksPerSeq = 1<<26 + 1 }, "VarlenArgs.MaxBlocksPerSeq=67108865 is out of range; allowed: 1..67108864 (MaxBlocksPerSeq·BlockSize at most 2^30 tokens)"},
		{"max kv", func(a *VarlenArgs) { a.MaxKVLen = 257 }, "VarlenArgs.MaxKVLen=257 is not allowed; allowed: 0..MaxBlocksPerSeq·BlockSize=256"},
		{"max kv negative", func(a *VarlenArgs) { a.MaxKVLen = -1 }, "VarlenArgs.MaxKVLen=-1 is not allowed; allowed: 0..MaxBlocksPerSeq·BlockSize=256"},
		{"kv capacity", func(a *VarlenArgs) { a.KVCapacity = 257 }, "VarlenArgs.KVCapacity=257 is not allowed; allowed: 0 (KV_CAPACITY) or 1..MaxBlocksPerSeq·BlockSize=256"},
		{"kv capacity negative", func(a *VarlenArgs) { a.KVCapacity = -1 }, "VarlenArgs.KVCapacity=-1 is not allowed; allowed: 0 (KV_CAPACITY) or 1..MaxBlocksPerSeq·BlockSize=256"},
		{"host bounds length", func(a *VarlenArgs) { a.HostCuSeqlensQ = []int32{0, 40} }, "VarlenArgs.HostCuSeqlensQ has 2 values; allowed: none, or NumSeqs+1=4"},
		{"host bounds first", func(a *VarlenArgs) { a.HostCuSeqlensQ[0] = 1 }, "VarlenArgs.HostCuSeqlensQ[0]=1 is not allowed; allowed: 0"},
		{"host bounds decrease", func(a *VarlenArgs) { a.HostCuSeqlensQ[1] = 18 }, "VarlenArgs.HostCuSeqlensQ[2]=17 is below HostCuSeqlensQ[1]=18; allowed: a non-decreasing sequence"},
		{"host bounds total", func(a *VarlenArgs) { a.HostCuSeqlensQ[3] = 39 }, "VarlenArgs.HostCuSeqlensQ[3]=39 disagrees with NumTokens=40"},
		{"host offsets without bounds", func(a *VarlenArgs) { a.HostCuSeqlensQ = nil }, "VarlenArgs.HostPosOffsets is given without HostCuSeqlensQ; allowed: both or neither"},
		{"host offsets length", func(a *VarlenArgs) { a.HostPosOffsets = []int32{0, 0} }, "VarlenArgs.HostPosOffsets has 2 values; allowed: none, or NumSeqs=3"},
		{"host offset negative", func(a *VarlenArgs) { a.HostPosOffsets[1] = -1 }, "VarlenArgs.HostPosOffsets[1]=-1 is not allowed with 16 query tokens; allowed: 0..MaxKVLen−q_len=184"},
		{"host offset past max kv", func(a *VarlenArgs) { a.HostPosOffsets[2] = 178 }, "VarlenArgs.HostPosOffsets[2]=178 is not allowed with 23 query tokens; allowed: 0..MaxKVLen−q_len=177"},
		{"host offset past int32", func(a *VarlenArgs) { a.HostPosOffsets[2] = math.MaxInt32 }, "VarlenArgs.HostPosOffsets[2]=2147483647 is not allowed with 23 query tokens; allowed: 0..MaxKVLen−q_len=177"},
		{"workspace misaligned", func(a *VarlenArgs) { a.Workspace = fakeBuffer(4096); a.Workspace.Ptr += 16 }, "VarlenArgs.Workspace pointer 0x… is not 256-byte aligned"},
		{"workspace empty", func(a *VarlenArgs) { a.Workspace = fakeBuffer(0) }, "VarlenArgs.Workspace holds 0 bytes; the shapes need 1"},
		{"workspace null", func(a *VarlenArgs) { a.Workspace = Buffer{Bytes: 4096} }, "VarlenArgs.Workspace is missing (a null device pointer)"},
		{"scale", func(a *VarlenArgs) { a.Scale = -1 }, "VarlenArgs.Scale=-1 is not allowed; allowed: 0 (1/√HeadDim) or a finite value > 0"},
		{"scale nan", func(a *VarlenArgs) { a.Scale = float32(math.NaN()) }, "VarlenArgs.Scale=NaN is not allowed; allowed: 0 (1/√HeadDim) or a finite value > 0"},
		{"scale inf", func(a *VarlenArgs) { a.Scale = float32(math.Inf(1)) }, "VarlenArgs.Scale=+Inf is not allowed; allowed: 0 (1/√HeadDim) or a finite value > 0"},
		{"fp8 k scale", func(a *VarlenArgs) { a.CacheDType = E4M3 }, "VarlenArgs.KScale=0 is not allowed with an e4m3 cache; allowed: a finite value > 0"},
		{"fp8 v scale", func(a *VarlenArgs) { a.CacheDType, a.KScale, a.VScale = E4M3, 1, float32(math.Inf(1)) }, "VarlenArgs.VScale=+Inf is not allowed with an e4m3 cache; allowed: a finite value > 0"},
		{"scale ignored", func(a *VarlenArgs) { a.KScale = 0.5 }, "VarlenArgs.KScale=0.5 is only used with an e4m3 cache; with a bf16 cache leave it 0"},
		{"v scale ignored", func(a *VarlenArgs) { a.VScale = 2 }, "VarlenArgs.VScale=2 is only used with an e4m3 cache; with a bf16 cache leave it 0"},
		{"q stride short", func(a *VarlenArgs) { a.QTokenStride = 100 }, "VarlenArgs.QTokenStride=100 is not allowed; allowed: 0 (contiguous) or a multiple of 8 (16-byte rows) ≥ NumQHeads·HeadDim=2048 and ≤ 2147483648"},
		{"q stride unaligned", func(a *VarlenArgs) { a.QTokenStride = 2048 + 4 }, "VarlenArgs.QTokenStride=2052 is not allowed; allowed: 0 (contiguous) or a multiple of 8 (16-byte rows)"},
		{"q stride negative", func(a *VarlenArgs) { a.QTokenStride = -8 }, "VarlenArgs.QTokenStride=-8 is not allowed"},
		{"q stride 2^62", func(a *VarlenArgs) { a.QTokenStride = 1 << 62 }, "VarlenArgs.QTokenStride=4611686018427387904 is not allowed; allowed: 0 (contiguous) or a multiple of 8 (16-byte rows) ≥ NumQHeads·HeadDim=2048 and ≤ 2147483648"},
		{"q stride past 2^31", func(a *VarlenArgs) { a.QTokenStride = 1<<31 + 8 }, "VarlenArgs.QTokenStride=2147483656 is not allowed"},
		{"out token stride odd", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 2049, 128 }, "VarlenArgs.OutTokenStride=2049, OutHeadStride=128 " + outStrides},
		{"out head stride odd", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 40*129, 129 }, "VarlenArgs.OutTokenStride=5160, OutHeadStride=129 " + outStrides},
		{"out heads overlap", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 2048, 126 }, "VarlenArgs.OutTokenStride=2048, OutHeadStride=126 " + outStrides},
		{"out tokens overlap heads", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 2046, 128 }, "VarlenArgs.OutTokenStride=2046, OutHeadStride=128 " + outStrides},
		{"out head-major tokens overlap", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 126, 40*128 }, "VarlenArgs.OutTokenStride=126, OutHeadStride=5120 " + outStrides},
		{"out head-major heads overlap", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 128, 40*128-2 }, "VarlenArgs.OutTokenStride=128, OutHeadStride=5118 " + outStrides},
		{"out token stride alone", func(a *VarlenArgs) { a.OutTokenStride = 2048 }, "VarlenArgs.OutTokenStride=2048, OutHeadStride=0 " + outStrides},
		{"out head stride alone", func(a *VarlenArgs) { a.OutHeadStride = 128 }, "VarlenArgs.OutTokenStride=0, OutHeadStride=128 " + outStrides},
		{"out strides negative", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = -2048, -128 }, "VarlenArgs.OutTokenStride=-2048, OutHeadStride=-128 " + outStrides},
		{"out token stride 2^62", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 1<<62, 128 }, "VarlenArgs.OutTokenStride=4611686018427387904, OutHeadStride=128 " + outStrides},
		{"out head stride 2^62", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 128, 1<<62 }, "VarlenArgs.OutTokenStride=128, OutHeadStride=4611686018427387904 " + outStrides},
		{"out strides past 2^31", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = 1<<31+2, 128 }, "VarlenArgs.OutTokenStride=2147483650, OutHeadStride=128 " + outStrides},
		{"q small", func(a *VarlenArgs) { a.Q.Bytes-- }, "VarlenArgs.Q holds 163839 bytes; the shapes need 163840"},
		{"key cache small", func(a *VarlenArgs) { a.KCache.Bytes-- }, "VarlenArgs.KCache holds 1048575 bytes; the shapes need 1048576"},
		{"value cache small", func(a *VarlenArgs) { a.VCache.Bytes-- }, "VarlenArgs.VCache holds 1048575 bytes; the shapes need 1048576"},
		{"tables small", func(a *VarlenArgs) { a.BlockTables.Bytes-- }, "VarlenArgs.BlockTables holds 191 bytes; the shapes need 192"},
		{"cu seqlens small", func(a *VarlenArgs) { a.CuSeqlensQ.Bytes-- }, "VarlenArgs.CuSeqlensQ holds 15 bytes; the shapes need 16"},
		{"pos offsets small", func(a *VarlenArgs) { a.PosOffsets.Bytes-- }, "VarlenArgs.PosOffsets holds 11 bytes; the shapes need 12"},
		{"out small", func(a *VarlenArgs) { a.Out.Bytes-- }, "VarlenArgs.Out holds 163839 bytes; the shapes need 163840"},
		{"lse small", func(a *VarlenArgs) { a.LSE.Bytes-- }, "VarlenArgs.LSE holds 2559 bytes; the shapes need 2560"},
		{"q misaligned", func(a *VarlenArgs) { a.Q.Ptr += 8 }, "VarlenArgs.Q pointer 0x… is not 16-byte aligned"},
		{"key cache misaligned", func(a *VarlenArgs) { a.KCache.Ptr += 8 }, "VarlenArgs.KCache pointer 0x… is not 16-byte aligned"},
		{"value cache misaligned", func(a *VarlenArgs) { a.VCache.Ptr += 8 }, "VarlenArgs.VCache pointer 0x… is not 16-byte aligned"},
		{"tables misaligned", func(a *VarlenArgs) { a.BlockTables.Ptr += 2 }, "VarlenArgs.BlockTables pointer 0x… is not 4-byte aligned"},
		{"cu seqlens misaligned", func(a *VarlenArgs) { a.CuSeqlensQ.Ptr += 2 }, "VarlenArgs.CuSeqlensQ pointer 0x… is not 4-byte aligned"},
		{"pos offsets misaligned", func(a *VarlenArgs) { a.PosOffsets.Ptr += 2 }, "VarlenArgs.PosOffsets pointer 0x… is not 4-byte aligned"},
		{"out misaligned", func(a *VarlenArgs) { a.Out.Ptr += 2 }, "VarlenArgs.Out pointer 0x… is not 4-byte aligned"},
		{"lse misaligned", func(a *VarlenArgs) { a.LSE.Ptr += 2 }, "VarlenArgs.LSE pointer 0x… is not 4-byte aligned"},
		{"q missing", func(a *VarlenArgs) { a.Q = Buffer{} }, "VarlenArgs.Q is missing"},
		{"key cache missing", func(a *VarlenArgs) { a.KCache = Buffer{} }, "VarlenArgs.KCache is missing"},
		{"tables missing", func(a *VarlenArgs) { a.BlockTables = Buffer{} }, "VarlenArgs.BlockTables is missing"},
		{"cu seqlens missing", func(a *VarlenArgs) { a.CuSeqlensQ = Buffer{} }, "VarlenArgs.CuSeqlensQ is missing"},
		{"pos offsets missing", func(a *VarlenArgs) { a.PosOffsets = Buffer{} }, "VarlenArgs.PosOffsets is missing"},
		{"out missing", func(a *VarlenArgs) { a.Out = Buffer{} }, "VarlenArgs.Out is missing"},
		{"out negative size", func(a *VarlenArgs) { a.Out.Bytes = -4 }, "VarlenArgs.Out holds -4 bytes; allowed: a size ≥ 0"},
		{"cache too large", func(a *VarlenArgs) {
			a.NumBlocks, a.BlockSize, a.NumKVHeads, a.NumQHeads, a.Q.Bytes = math.MaxInt32, 256, 4096, 4096, 1<<40
		},
			"VarlenArgs.NumBlocks=2147483647 is too large for BlockSize=256; allowed: NumBlocks·BlockSize at most 2^31−1"},
		{"window", func(a *VarlenArgs) { a.SlidingWindow = -1 }, "VarlenArgs.SlidingWindow=-1 is out of range; allowed: 0 (none) or 1..1073741824"},
		{"window not causal", func(a *VarlenArgs) { a.SlidingWindow, a.Causal = 64, false },
			"VarlenArgs.SlidingWindow=64 needs Causal: a window ends at each query's own position; allowed: Causal=true, or SlidingWindow=0"},
		{"soft-cap", func(a *VarlenArgs) { a.SoftCap = float32(math.Inf(1)) }, "VarlenArgs.SoftCap=+Inf is not allowed; allowed: 0 (off) or a finite value > 0"},
		{"sinks small", func(a *VarlenArgs) { a.Sinks = fakeBuffer(15 * 4) }, "VarlenArgs.Sinks holds 60 bytes; the shapes need 64"},
		{"alibi over out", func(a *VarlenArgs) { a.AlibiSlopes = Buffer{Ptr: a.Out.Ptr, Bytes: 64} }, "VarlenArgs.AlibiSlopes"},
		{"mods fp8 layout", func(a *VarlenArgs) {
			a.CacheDType, a.KScale, a.VScale, a.SoftCap, a.Layout = E4M3, 1, 1, 30, LayoutXSplit
		}, "VarlenArgs: SlidingWindow, SoftCap, Sinks and AlibiSlopes with Layout=x-split are not supported; allowed: Layout=flash"},
		{"mods layout", func(a *VarlenArgs) { a.Layout, a.Sinks = LayoutShuffle, fakeBuffer(64) },
			"VarlenArgs: SlidingWindow, SoftCap, Sinks and AlibiSlopes with Layout=shuffle are not supported; allowed: Layout=flash"},
	}
	expectErrors(t, goodVarlen, cases)
	mods := goodVarlen()
	mods.SlidingWindow, mods.SoftCap, mods.Sinks, mods.AlibiSlopes = 4096, 50, fakeBuffer(64), fakeBuffer(64)
	require.NoError(t, mods.Validate(), "every modifier")
	mods.CacheDType, mods.KScale, mods.VScale = E4M3, 0.5, 0.5
	require.NoError(t, mods.Validate(), "every modifier over an e4m3 cache")
}

// TestVarlenTotalQTokensBound pins the NumTokens bound against two
// ways past it (both held while the bound was NumTokens·NumQHeads < 2^31,
// computed as an unchecked int64 product):
//
//   - "product wraps int64": with NumQHeads=16, NumTokens = MaxInt wrapped
//     the product to −16 and 2^59 to −2^63, both "in range", and the first
//     error was Q's extent, blaming QTokenStride (which the caller left 0)
//     and allowing "at most 0". The error must name NumTokens and its
//     range.
//   - "row tiles inside int32": one sequence of q_len·G packed rows
//     (NumKVHeads 1) in (2^31 − R, 2^31) made the kernel's last row tile end
//     (`min(t.row0 + ROWS, rows)` in kernels_src/varlen.cuh, R = 64 or 128)
//     2^31, an int32 overflow. At the bound the model must hold.
func TestVarlenTotalQTokensBound(t *testing.T) {
	t.Run("product wraps int64", func(t *testing.T) {
		for _, tq := range []int{math.MaxInt, 1 << 59, 1 << 60} {
			a := goodVarlen()
			a.NumTokens, a.HostCuSeqlensQ, a.HostPosOffsets = tq, nil, nil
			err := a.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.Contains(t, err.Error(), "VarlenArgs.NumTokens="+itoa(tq)+" is out of range; allowed: 0..67108864 (NumTokens·NumQHeads ≤ 2^30)")
		}
	})
	t.Run("row tiles inside int32", func(t *testing.T) {
		for _, d := range []int{64, 128, 256} {
			for _, tq := range []int{1 << 30, 1<<30 + 1, math.MaxInt32} {
				a := goodVarlen()
				a.NumSeqs, a.NumQHeads, a.NumKVHeads, a.HeadDim, a.NumTokens = 1, 1, 1, d, tq
				a.HostCuSeqlensQ, a.HostPosOffsets = nil, nil
				a.Q.Bytes, a.Out.Bytes, a.LSE.Bytes = int64(d)*2*int64(tq), int64(d)*2*int64(tq), 4*int64(tq)
				a.KCache.Bytes, a.VCache.Bytes = 64*16*int64(d)*2, 64*16*int64(d)*2
				err := a.Validate()
				if tq > 1<<30 {
					assert.ErrorContains(t, err, "VarlenArgs.NumTokens="+itoa(tq)+" is out of range; allowed: 0..1073741824", "head dim %d", d)
					continue
				}
				require.NoError(t, err, "head dim %d", d)
				checkModel(t, varlenModel(&a))
			}
		}
	})
}

// goodSequence is a valid SequenceArgs: one sequence of 40 query tokens over
// 200 positions.
func goodSequence() SequenceArgs {
	const qLen, qh, kh, d, bs, nb, mb = 40, 16, 4, 128, 16, 64, 16
	return SequenceArgs{
		Q: fakeBuffer(qLen * qh * d * 2), KCache: fakeBuffer(nb * bs * kh * d * 2), VCache: fakeBuffer(nb * bs * kh * d * 2),
		BlockTables: fakeBuffer(mb * 4), Out: fakeBuffer(qLen * qh * d * 2),
		NumSeqs: 1, QLen: qLen, HostKVLens: []int32{200},
		NumQHeads: qh, NumKVHeads: kh, HeadDim: d, BlockSize: bs, NumBlocks: nb, MaxBlocksPerSeq: mb,
		DType: F16, CacheDType: F16,
	}
}

// TestSequenceArgsValidate checks the dispatcher's own rules and that it
// passes the checks of the op it runs through: a several-token batch of
// several sequences names Varlen, a KV shorter than the query is an error,
// and the varlen's or decode's own errors come back (with their struct's
// name: the fields are the same).
func TestSequenceArgsValidate(t *testing.T) {
	a := goodSequence()
	require.NoError(t, a.Validate())
	one := goodSequence()
	one.QLen, one.NumSeqs, one.HostKVLens = 1, 3, []int32{5, 1, 200}
	one.KVLens, one.Q, one.Out = fakeBuffer(12), fakeBuffer(3*16*128*2), fakeBuffer(3*16*128*2)
	one.BlockTables = fakeBuffer(3 * 16 * 4)
	require.NoError(t, one.Validate(), "one token per sequence: a decode")
	for _, tt := range []struct {
		name string
		edit func(*SequenceArgs)
		want string
	}{
		{"q_len 0", func(a *SequenceArgs) { a.QLen = 0 }, "SequenceArgs.QLen=0 is out of range; allowed: ≥ 1"},
		{"no sequences", func(a *SequenceArgs) { a.NumSeqs = 0 }, "SequenceArgs.NumSeqs=0 is out of range"},
		{"a varlen batch", func(a *SequenceArgs) { a.NumSeqs, a.HostKVLens = 2, []int32{200, 200} }, "run them with Runtime.Varlen"},
		{"host lengths", func(a *SequenceArgs) { a.HostKVLens = nil }, "SequenceArgs.HostKVLens has 0 values; allowed: NumSeqs=1"},
		{"kv below q", func(a *SequenceArgs) { a.HostKVLens = []int32{39} }, "SequenceArgs.HostKVLens[0]=39 is below QLen=40"},
		{"kv past the table", func(a *SequenceArgs) { a.HostKVLens = []int32{257} }, "SequenceArgs.HostKVLens[0]=257 exceeds MaxBlocksPerSeq·BlockSize=256"},
		{"out too small", func(a *SequenceArgs) { a.Out.Bytes-- }, "SequenceArgs.Out holds"},
		{"decode kv lens missing", func(a *SequenceArgs) { a.QLen, a.Q.Bytes, a.Out.Bytes = 1, 16*128*2, 16*128*2 }, "SequenceArgs.KVLens"},
		{"head dim 120 over tokens, fp8", func(a *SequenceArgs) {
			a.HeadDim, a.Q.Bytes, a.Out.Bytes, a.KCache.Bytes, a.VCache.Bytes = 120, 40*16*120*2, 40*16*120*2, 64*16*4*120*2, 64*16*4*120*2
			a.CacheDType, a.KScale, a.VScale = E4M3, 1, 1
		}, "SequenceArgs.HeadDim=120 is not supported with CacheDType=e4m3"},
		{"decode q stride", func(a *SequenceArgs) {
			a.QLen, a.Q.Bytes, a.Out.Bytes, a.KVLens, a.QTokenStride = 1, 16*128*2, 16*128*2, fakeBuffer(4), 12
		}, "SequenceArgs.QTokenStride=12 is not allowed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := goodSequence()
			tt.edit(&b)
			err := b.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// BenchmarkValidate times the host checks of the attention ops, which every
// call runs before planning (part of the host path): they must allocate
// nothing.
func BenchmarkValidate(b *testing.B) {
	d, v := goodDecode(), goodVarlen()
	b.Run("DecodeArgs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := d.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("VarlenArgs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestValidateAllocatesNothing holds the attention ops' checks to zero heap
// allocations on valid arguments.
func TestValidateAllocatesNothing(t *testing.T) {
	d, v, q := goodDecode(), goodVarlen(), goodSequence()
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = d.Validate() }), "DecodeArgs.Validate")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = v.Validate() }), "VarlenArgs.Validate")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = q.Validate() }), "SequenceArgs.Validate")
}

// TestSlotRuns pins what makes an append's host slots a prefill's: at least
// 7 in 8 tokens after the first take the slot after their predecessor's.
func TestSlotRuns(t *testing.T) {
	run := func(starts ...int32) []int32 { // runs of 16 slots from each start
		var s []int32
		for _, b := range starts {
			for i := range int32(16) {
				s = append(s, b+i)
			}
		}
		return s
	}
	assert.True(t, slotRuns(run(32, 96, 0, 512)), "a prefill's pages, in any order")
	assert.True(t, slotRuns(run(5)), "one run from inside a page")
	assert.False(t, slotRuns([]int32{7, 3, 90, 12, 13, 40}), "random slots")
	assert.False(t, slotRuns([]int32{4}), "one token")
	assert.False(t, slotRuns(nil))
	half := run(0, 64)
	for i := 0; i < len(half); i += 2 {
		half[i] = -1 // every other token skipped
	}
	assert.False(t, slotRuns(half))
	// A large batch is sampled, not scanned: a prefill of 65536 tokens in
	// pages of 16 in random order, and the same slots shuffled.
	g := rand.New(rand.NewPCG(1, 2))
	pages := g.Perm(4096)
	prefill := make([]int32, 65536)
	for t := range prefill {
		prefill[t] = int32(pages[t/16]*16 + t%16)
	}
	assert.True(t, slotRuns(prefill))
	g.Shuffle(len(prefill), func(i, j int) { prefill[i], prefill[j] = prefill[j], prefill[i] })
	assert.False(t, slotRuns(prefill))
	assert.Zero(t, testing.AllocsPerRun(10, func() { _ = slotRuns(prefill) }))
}
