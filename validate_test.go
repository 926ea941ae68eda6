package pagedkv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/dispatch"
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
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// fakeBuffer is a buffer at a plausible, aligned device address.
func fakeBuffer(bytes int64) Buffer { return Buffer{Ptr: 0x7f0000000000, Bytes: bytes} }

func goodAppend() AppendArgs {
	const t, h, d, bs, nb = 10, 4, 128, 16, 8
	return AppendArgs{
		Key: fakeBuffer(t * h * d * 2), Value: fakeBuffer(t * h * d * 2),
		KeyCache: fakeBuffer(nb * bs * h * d * 2), ValueCache: fakeBuffer(nb * bs * h * d * 2),
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

	cases := []badCase[AppendArgs]{
		{"dtype", func(a *AppendArgs) { a.DType = E4M3 }, "AppendArgs.DType=e4m3 is not supported; allowed: f16, bf16"},
		{"cache dtype", func(a *AppendArgs) { a.CacheDType = BF16 }, "AppendArgs.CacheDType=bf16 is not supported with DType=f16"},
		{"head dim", func(a *AppendArgs) { a.HeadDim = 100 }, "AppendArgs.HeadDim=100 is not supported; allowed: a multiple of 8 from 8 to 256"},
		{"head dim big", func(a *AppendArgs) { a.HeadDim = 264 }, "AppendArgs.HeadDim=264"},
		{"block size", func(a *AppendArgs) { a.BlockSize = 24 }, "AppendArgs.BlockSize=24 is not allowed; allowed: a power of two from 1 to 256"},
		{"block size big", func(a *AppendArgs) { a.BlockSize = 512 }, "AppendArgs.BlockSize=512"},
		{"kv heads", func(a *AppendArgs) { a.NumKVHeads = 0 }, "AppendArgs.NumKVHeads=0 is out of range"},
		{"tokens", func(a *AppendArgs) { a.NumTokens = -1 }, "AppendArgs.NumTokens=-1 is out of range"},
		{"key small", func(a *AppendArgs) { a.Key.Bytes-- }, "AppendArgs.Key holds 10239 bytes; the shapes need 10240"},
		{"value missing", func(a *AppendArgs) { a.Value = Buffer{} }, "AppendArgs.Value is missing"},
		{"cache small", func(a *AppendArgs) { a.ValueCache.Bytes -= 2 }, "AppendArgs.ValueCache holds"},
		{"slots small", func(a *AppendArgs) { a.SlotMapping.Bytes = 72 }, "AppendArgs.SlotMapping holds 72 bytes; the shapes need 80"},
		{"misaligned", func(a *AppendArgs) { a.Key.Ptr += 8 }, "AppendArgs.Key pointer 0x7f0000000008 is not 16-byte aligned"},
		{"token stride", func(a *AppendArgs) { a.KeyTokenStride = 100 }, "AppendArgs.KeyTokenStride=100 is not allowed"},
		{"token stride short", func(a *AppendArgs) { a.KeyTokenStride = 256 }, "AppendArgs.KeyTokenStride=256 is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ 512"},
		{"head stride", func(a *AppendArgs) { a.ValueHeadStride = 64 }, "AppendArgs.ValueHeadStride=64 is not allowed"},
		{"scale ignored", func(a *AppendArgs) { a.KScale = 0.5 }, "AppendArgs.KScale=0.5 is only used with an e4m3 cache"},
		{"fp8 scale", func(a *AppendArgs) { a.CacheDType = E4M3; a.KScale = 1; a.VScale = 0 }, "AppendArgs.VScale=0 is not allowed with an e4m3 cache"},
		{"remap ragged", func(a *AppendArgs) { a.SlotRemap = fakeBuffer(12) }, "AppendArgs.SlotRemap holds 12 bytes, not a whole number"},
		{"blocks", func(a *AppendArgs) { a.NumBlocks = 0 }, "AppendArgs.NumBlocks=0 is out of range"},
		{"layout", func(a *AppendArgs) { a.Layout = 7 }, "AppendArgs.Layout=7 is not supported; allowed: LayoutFlash, LayoutXSplit, LayoutShuffle"},
		{"x-split fp8 head dim", func(a *AppendArgs) {
			a.HeadDim, a.CacheDType, a.KScale, a.VScale, a.Layout = 120, E4M3, 1, 1, LayoutXSplit
		}, "AppendArgs.HeadDim=120 is not allowed with the x-split layout and a e4m3 cache; allowed: a multiple of 16"},
		{"shuffle block size", func(a *AppendArgs) { a.BlockSize, a.Layout = 4, LayoutShuffle }, "AppendArgs.BlockSize=4 is not allowed with the shuffle layout and a f16 cache; allowed: a multiple of 8"},
	}
	expectErrors(t, goodAppend, cases)
}

func TestAppendDegenerateStridesAreCanonical(t *testing.T) {
	a := goodAppend()
	a.NumKVHeads, a.KeyHeadStride, a.ValueHeadStride = 1, 3, 1 // one head: its stride never moves an address
	a.KeyCache.Bytes, a.ValueCache.Bytes = 8*16*128*2, 8*16*128*2
	require.NoError(t, a.Validate())
	_, kh, _, vh := a.strides()
	assert.Equal(t, int64(128), kh)
	assert.Equal(t, int64(128), vh)
	a = goodAppend()
	a.NumTokens, a.KeyTokenStride = 1, 5 // one token
	require.NoError(t, a.Validate())
}

func TestAppendStridedInputNeedsOnlyItsSpan(t *testing.T) {
	a := goodAppend()
	a.KeyTokenStride = 4*128 + 64
	// The last token needs only its heads, not a whole stride.
	a.Key.Bytes = int64((9*(4*128+64) + 4*128) * 2)
	require.NoError(t, a.Validate())
	a.Key.Bytes--
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
	cases := []badCase[DecodeArgs]{
		{"heads", func(a *DecodeArgs) { a.NumQHeads = 30 }, "DecodeArgs.NumQHeads=30 is not a multiple of NumKVHeads=8"},
		{"group", func(a *DecodeArgs) { a.NumKVHeads = 1 }, "DecodeArgs.NumQHeads/NumKVHeads=32 is not supported; allowed: a group size from 1 to 16"},
		{"head dim", func(a *DecodeArgs) { a.HeadDim = 96 }, "DecodeArgs.HeadDim=96 is not supported; allowed: 64, 128, 256"},
		{"block size", func(a *DecodeArgs) { a.BlockSize = 3 }, "DecodeArgs.BlockSize=3 is not allowed"},
		{"max kv", func(a *DecodeArgs) { a.MaxKVLen = 257 }, "DecodeArgs.MaxKVLen=257 is not allowed; allowed: 0..MaxBlocksPerSeq·BlockSize=256"},
		{"q small", func(a *DecodeArgs) { a.Q.Bytes -= 2 }, "DecodeArgs.Q holds"},
		{"q stride", func(a *DecodeArgs) { a.QSeqStride = 100 }, "DecodeArgs.QSeqStride=100 is not allowed"},
		{"q stride unaligned", func(a *DecodeArgs) { a.QSeqStride = 32*128 + 4 }, "allowed: 0 (contiguous) or a multiple of 8"},
		{"cache small", func(a *DecodeArgs) { a.KCache.Bytes = 100 }, "DecodeArgs.KCache holds 100 bytes"},
		{"tables small", func(a *DecodeArgs) { a.BlockTables.Bytes = 4 }, "DecodeArgs.BlockTables holds 4 bytes; the shapes need 256"},
		{"lens", func(a *DecodeArgs) { a.KVLens = Buffer{} }, "DecodeArgs.KVLens is missing"},
		{"out", func(a *DecodeArgs) { a.Out.Bytes = 0 }, "DecodeArgs.Out holds 0 bytes"},
		{"lse", func(a *DecodeArgs) { a.LSE = fakeBuffer(8) }, "DecodeArgs.LSE holds 8 bytes; the shapes need 512"},
		{"scale", func(a *DecodeArgs) { a.Scale = -1 }, "DecodeArgs.Scale=-1 is not allowed"},
		{"fp8 scale", func(a *DecodeArgs) { a.CacheDType = E4M3 }, "DecodeArgs.KScale=0 is not allowed with an e4m3 cache"},
		{"cache dtype", func(a *DecodeArgs) { a.CacheDType = BF16 }, "DecodeArgs.CacheDType=bf16 is not supported with DType=f16"},
		{"seqs", func(a *DecodeArgs) { a.NumSeqs = 0 }, "DecodeArgs.NumSeqs=0 is out of range"},
		{"misaligned cache", func(a *DecodeArgs) { a.VCache.Ptr += 2 }, "DecodeArgs.VCache pointer"},
	}
	expectErrors(t, goodDecode, cases)
}

func TestGatherArgsValidate(t *testing.T) {
	good := func() GatherArgs {
		const tok, h, d, bs, nb = 10, 4, 128, 16, 8
		return GatherArgs{
			KeyCache: fakeBuffer(nb * bs * h * d * 2), ValueCache: fakeBuffer(nb * bs * h * d * 2), Slots: fakeBuffer(tok * 8),
			KeyOut: fakeBuffer(tok * h * d * 2), ValueOut: fakeBuffer(tok * h * d * 2),
			NumTokens: tok, NumKVHeads: h, HeadDim: d, BlockSize: bs, NumBlocks: nb, CacheDType: F16, Layout: LayoutShuffle,
		}
	}
	a := good()
	require.NoError(t, a.Validate())
	cases := []badCase[GatherArgs]{
		{"dtype", func(a *GatherArgs) { a.CacheDType = 0 }, "GatherArgs.CacheDType=DType(0) is not supported"},
		{"out small", func(a *GatherArgs) { a.ValueOut.Bytes-- }, "GatherArgs.ValueOut holds 10239 bytes; the shapes need 10240"},
		{"slots", func(a *GatherArgs) { a.Slots = Buffer{} }, "GatherArgs.Slots is missing"},
		{"shuffle fp8 block", func(a *GatherArgs) { a.CacheDType = E4M3; a.BlockSize = 8 }, "GatherArgs.BlockSize=8 is not allowed with the shuffle layout and a e4m3 cache; allowed: a multiple of 16"},
		{"cache small", func(a *GatherArgs) { a.KeyCache.Bytes = 64 }, "GatherArgs.KeyCache holds 64 bytes"},
	}
	expectErrors(t, good, cases)
}

func TestRopeCacheArgsValidate(t *testing.T) {
	good := func() RopeCacheArgs {
		const tok, qh, kh, d, bs, nb, maxPos = 10, 8, 2, 64, 16, 4, 100
		return RopeCacheArgs{
			Q: fakeBuffer(tok * qh * d * 2), K: fakeBuffer(tok * kh * d * 2), V: fakeBuffer(tok * kh * d * 2),
			QOut: fakeBuffer(tok * qh * d * 2), KOut: fakeBuffer(tok * kh * d * 2),
			KeyCache: fakeBuffer(nb * bs * kh * d * 2), ValueCache: fakeBuffer(nb * bs * kh * d * 2),
			Positions: fakeBuffer(tok * 8), CosSin: fakeBuffer(maxPos * d * 4), SlotMapping: fakeBuffer(tok * 8),
			NumTokens: tok, NumQHeads: qh, NumKVHeads: kh, HeadDim: d, BlockSize: bs, NumBlocks: nb,
			MaxPos: maxPos, RotDim: d / 2, NeoX: true, DType: F16, CacheDType: F16,
		}
	}
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
	}
	expectErrors(t, good, cases)
}

// TestCheckDecodePlan checks what DecodeWithPlan accepts: the planner's own
// plans (single-pass, global-memory split-K, cluster split-K where the
// device has clusters), the same plans with another ring depth the kernel
// takes; and nothing else.
func TestCheckDecodePlan(t *testing.T) {
	a := goodDecode()
	plain := dispatch.DeviceFacts{Name: "A100-like", SMs: 108, MaxSharedPerBlockOptin: 163 << 10}
	sm90 := dispatch.DeviceFacts{Name: "H200-like", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Clusters: true}
	plan := func(dev dispatch.DeviceFacts, k dispatch.Knobs) dispatch.Plan {
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
		plan dispatch.Plan
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
			assert.Error(t, checkDecodePlan(&a, &p, &tt.dev), "another shape's grid")
		})
	}

	cluster := plan(sm90, forced)
	require.Equal(t, uint32(4), cluster.Cluster)
	// Checking a plan allocates nothing (DecodeWithPlan runs it per call).
	for _, p := range []dispatch.Plan{cluster, plan(plain, forced), plan(plain, single)} {
		dev := sm90
		if p.Cluster == 0 {
			dev = plain
		}
		allocs := testing.AllocsPerRun(100, func() { require.NoError(t, checkDecodePlan(&a, &p, &dev)) })
		assert.Zero(t, allocs, "%s", p.Kernel)
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
	rows := int64(more.Grid.Y) * int64(a.NumQHeads)
	shape := a.shape(false, 0)
	more.ScratchFloats, more.WorkOffset = dispatch.BalancedScratch(&shape, int(more.Grid.Y))
	more.MaxOffset, more.SumOffset = rows*int64(a.HeadDim), rows*int64(a.HeadDim)+rows
	assert.NoError(t, checkDecodePlan(&a, &more, &plain))
	few := bal
	few.Grid.Y = uint32(a.NumSeqs)
	shape = a.shape(false, 0)
	few.ScratchFloats, few.WorkOffset = dispatch.BalancedScratch(&shape, int(few.Grid.Y))
	rows = int64(few.Grid.Y) * int64(a.NumQHeads)
	few.MaxOffset, few.SumOffset = rows*int64(a.HeadDim), rows*int64(a.HeadDim)+rows
	assert.ErrorContains(t, checkDecodePlan(&a, &few, &plain), "work items")
	off := bal
	off.WorkOffset++
	assert.Error(t, checkDecodePlan(&a, &off, &plain), "a work list off its place")
	bal.Cluster = 2
	assert.Error(t, checkDecodePlan(&a, &bal, &sm90), "a balanced plan in clusters")
}
