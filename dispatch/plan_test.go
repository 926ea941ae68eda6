package dispatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// occupancyHD128 gives every head-dim-128 decode kernel (wide and narrow) 4
// resident blocks per SM and leaves the others out (so they count as 1).
func occupancyHD128() map[string]int {
	occ := map[string]int{}
	for _, name := range DecodeKernelNames() {
		if strings.Contains(name, "_hd128") {
			occ[name] = 4
		}
	}
	return occ
}

// Two device profiles: 528 slots for a head-dim-128 kernel on the H100/H200-like part,
// 432 on the A100-like one.
var (
	hopper = DeviceFacts{Name: "H100-like", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Occupancy: occupancyHD128()}
	ampere = DeviceFacts{Name: "A100-like", SMs: 108, MaxSharedPerBlockOptin: 163 << 10, Occupancy: occupancyHD128()}
)

// llama returns a Llama-style GQA shape: 32 q heads over 8 KV heads (group 4),
// head dim 128, 16-token pages, f16.
func llama(seqs, kvLen int) DecodeShape {
	return DecodeShape{
		NumSeqs: seqs, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16,
		MaxKVLen: kvLen, MaxBlocksPerSeq: max(ceilDiv(kvLen, 16), 1),
		DType: F16, CacheDType: F16,
	}
}

// known is s with host lengths, every sequence MaxKVLen long: the uniform
// batch of an engine that passes them (without them a batch of
// BalanceGraphMinSeqs or more is planned balanced); a graph's shape, or one
// with lengths already, as it is.
func known(s DecodeShape) DecodeShape {
	if s.Graph || len(s.HostKVLens) > 0 {
		return s
	}
	s.HostKVLens = make([]int32, s.NumSeqs)
	for i := range s.HostKVLens {
		s.HostKVLens[i] = int32(s.MaxKVLen)
	}
	return s
}

// group16 is llama with GQA group 16: 64 query heads over 4 KV heads.
func group16(seqs, kvLen int) DecodeShape {
	s := llama(seqs, kvLen)
	s.NumQHeads, s.NumKVHeads = 64, 4
	return s
}

func knobs(edit func(*Knobs)) Knobs {
	k := DefaultKnobs()
	if edit != nil {
		edit(&k)
	}
	return k
}

func TestPlanDecodeSplits(t *testing.T) {
	// Auto: splits = min(slots / blocks, maxSplits) with slots = SMs ×
	// occupancy, blocks = seqs × KV heads and maxSplits = min(MaxSplits,
	// pages, round(√(MaxKVLen / 32))): fill one wave, never add one. The
	// winner is then normalized to whole pages. The comments give the
	// arithmetic each pinned number comes from.
	tests := []struct {
		name      string
		dev       DeviceFacts
		shape     DecodeShape
		knobs     Knobs
		splits    int
		requested int
		clamped   bool
		reason    string
	}{
		{
			// 8 blocks, 528/8 = 66; maxSplits = min(64, 32 pages, √(512/32) = 4).
			name: "h100 seqs=1 kv=512", dev: hopper, shape: llama(1, 512), knobs: DefaultKnobs(),
			splits: 4, requested: 4, reason: ReasonFillSMs,
		},
		{
			// 1024 blocks over 528 slots: already two waves.
			name: "h100 seqs=128 kv=512", dev: hopper, shape: llama(128, 512), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonGridFills,
		},
		{
			// 66 capped at √(32768/32) = 32; 2048 pages / 32 = 64 each.
			name: "h100 seqs=1 kv=32768", dev: hopper, shape: llama(1, 32768), knobs: DefaultKnobs(),
			splits: 32, requested: 32, reason: ReasonFillSMs,
		},
		{
			// 64 blocks: 528/64 = 8 fills one wave (512 ≤ 528).
			name: "h100 seqs=8 kv=8192", dev: hopper, shape: llama(8, 8192), knobs: DefaultKnobs(),
			splits: 8, requested: 8, reason: ReasonFillSMs,
		},
		{
			// 4096 blocks are 7.76 waves: splitting only adds blocks.
			name: "h100 seqs=512 kv=8192", dev: hopper, shape: llama(512, 8192), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonGridFills,
		},
		{
			// 528 blocks are exactly one wave.
			name: "h100 seqs=66 kv=8192", dev: hopper, shape: llama(66, 8192), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonGridFills,
		},
		{
			// 256 blocks: two splits fill 512 of 528 slots.
			name: "h100 seqs=32 kv=32768", dev: hopper, shape: llama(32, 32768), knobs: DefaultKnobs(),
			splits: 2, requested: 2, reason: ReasonFillSMs,
		},
		{
			name: "a100 seqs=128 kv=512", dev: ampere, shape: llama(128, 512), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonGridFills,
		},
		{
			// 432/8 = 54, capped by √(512/32) = 4.
			name: "a100 seqs=1 kv=512", dev: ampere, shape: llama(1, 512), knobs: DefaultKnobs(),
			splits: 4, requested: 4, reason: ReasonFillSMs,
		},
		{
			// 432/8 = 54, capped by √(32768/32) = 32: 64 pages each.
			name: "a100 seqs=1 kv=32768", dev: ampere, shape: llama(1, 32768), knobs: DefaultKnobs(),
			splits: 32, requested: 32, reason: ReasonFillSMs,
		},
		{
			// 432/64 = 6; 512 pages / 6 → 86 each → 6.
			name: "a100 seqs=8 kv=8192", dev: ampere, shape: llama(8, 8192), knobs: DefaultKnobs(),
			splits: 6, requested: 6, reason: ReasonFillSMs,
		},
		{
			// 416 blocks fit one wave of 432; a second split would not.
			name: "a100 seqs=52 kv=4096", dev: ampere, shape: llama(52, 4096), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonGridFills,
		},
		{
			// Head dim 64 has no occupancy entry, so 1 block per SM: 32
			// blocks on 132 slots → 4.
			name: "h100 mha occupancy missing", dev: hopper,
			shape: DecodeShape{NumSeqs: 1, NumQHeads: 32, NumKVHeads: 32, HeadDim: 64, BlockSize: 16,
				MaxKVLen: 4096, MaxBlocksPerSeq: 256, DType: BF16, CacheDType: BF16},
			knobs:  DefaultKnobs(),
			splits: 4, requested: 4, reason: ReasonFillSMs,
		},
		{
			// √(16/32) rounds to 1.
			name: "kv too short to split", dev: hopper, shape: llama(1, 16), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonShortKV,
		},
		{
			name: "empty kv", dev: hopper, shape: llama(1, 0), knobs: DefaultKnobs(),
			splits: 1, requested: 1, reason: ReasonEmptyKV,
		},
		{
			name: "paged flash off", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.PagedFlash = false; k.ForcedSplits = 8 }),
			splits: 1, requested: 1, reason: ReasonPagedFlashOff,
		},
		{
			name: "split-K off", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.SplitK = SplitOff; k.ForcedSplits = 8 }),
			splits: 1, requested: 1, reason: ReasonSplitKOff,
		},
		{
			// Forced counts ignore the √ rule (auto stops at 4).
			name: "forced 16", dev: hopper, shape: llama(1, 512), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 16 }),
			splits: 16, requested: 16, reason: ReasonForced,
		},
		{
			name: "forced 1 on a short grid", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 1 }),
			splits: 1, requested: 1, reason: ReasonForced,
		},
		{
			name: "forced 1000 clamped to 32 pages", dev: hopper, shape: llama(1, 512), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 1000 }),
			splits: 32, requested: 1000, clamped: true, reason: ReasonForcedClamped,
		},
		{
			// Forced counts are clamped to MaxSplits: 4096 pages.
			name: "forced 1000 clamped to MaxSplits", dev: hopper, shape: llama(1, 65536), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 1000 }),
			splits: 64, requested: 1000, clamped: true, reason: ReasonForcedClamped,
		},
		{
			// 32 pages / 12 → 3 pages each → 11 splits.
			name: "forced 12 rounded to whole pages", dev: hopper, shape: llama(1, 512), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 12 }),
			splits: 11, requested: 12, clamped: true, reason: ReasonForcedRounded,
		},
		{
			name: "forced on empty kv", dev: hopper, shape: llama(1, 0), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 4 }),
			splits: 1, requested: 4, clamped: true, reason: ReasonForcedClamped,
		},
		{
			// Auto picks 1 here; SplitOn takes at least 2.
			name: "split-K on", dev: hopper, shape: llama(128, 512), knobs: knobs(func(k *Knobs) { k.SplitK = SplitOn }),
			splits: 2, requested: 2, reason: ReasonSplitOn,
		},
		{
			name: "split-K on keeps a larger auto choice", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.SplitK = SplitOn }),
			splits: 32, requested: 32, reason: ReasonSplitOn,
		},
		{
			name: "split-K on, kv too short", dev: hopper, shape: llama(1, 16), knobs: knobs(func(k *Knobs) { k.SplitK = SplitOn }),
			splits: 1, requested: 1, reason: ReasonSplitOnShortKV,
		},
		{
			// 32 splits need 32·32·130·4 = 532480 bytes. 100000 bytes hold
			// floor(100000 / (32·130·4)) = 6 splits; 2048 pages / 6 → 342 each → 6.
			name: "scratch limit lowers splits", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.ScratchLimitBytes = 100000 }),
			splits: 6, requested: 32, clamped: true, reason: ReasonScratchLimit,
		},
		{
			name: "scratch limit forces single pass", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.ScratchLimitBytes = 10000 }),
			splits: 1, requested: 32, clamped: true, reason: ReasonScratchLimit,
		},
		{
			name: "scratch limit large enough", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.ScratchLimitBytes = 532480 }),
			splits: 32, requested: 32, reason: ReasonFillSMs,
		},
		{
			name: "scratch limit lowers a forced count", dev: hopper, shape: llama(1, 32768), knobs: knobs(func(k *Knobs) { k.ForcedSplits = 64; k.ScratchLimitBytes = 100000 }),
			splits: 6, requested: 64, clamped: true, reason: ReasonForcedScratchLimit,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanDecode(known(tt.shape), tt.dev, tt.knobs)
			require.NoError(t, err)
			assert.Equal(t, tt.splits, p.Splits, "splits")
			assert.Equal(t, tt.requested, p.RequestedSplits, "requested splits")
			assert.Equal(t, tt.clamped, p.Clamped, "clamped")
			assert.Equal(t, tt.reason, p.Reason, "reason")
			checkGeometry(t, tt.shape, tt.dev, p)
		})
	}
}

// checkGeometry checks what follows from the split count.
func checkGeometry(t *testing.T, s DecodeShape, dev DeviceFacts, p DecodePlan) {
	t.Helper()
	assert.Equal(t, Dim3{uint32(s.NumKVHeads), uint32(s.NumSeqs), uint32(p.Splits)}, p.Grid)
	assert.Equal(t, Dim3{128, 1, 1}, p.Block)
	checkRing(t, dev, p)
	wantKernel, err := DecodeKernelName(s.DType, s.CacheDType, s.HeadDim, s.NumQHeads/s.NumKVHeads)
	require.NoError(t, err)
	assert.Equal(t, wantKernel, p.Kernel)
	if p.Splits == 1 {
		assert.Zero(t, p.Counters)
		assert.Zero(t, p.ScratchFloats)
		assert.Zero(t, p.MaxOffset)
		assert.Zero(t, p.SumOffset)
		return
	}
	// Every split covers whole pages and none is empty.
	pages := ceilDiv(s.MaxKVLen, s.BlockSize)
	chunk := ceilDiv(pages, p.Splits)
	assert.Greater(t, pages, chunk*(p.Splits-1), "the last split has no pages")
	assert.Equal(t, int64(s.NumSeqs*s.NumKVHeads), p.Counters)
	rows := int64(s.NumSeqs * s.NumQHeads * p.Splits)
	assert.Equal(t, rows*int64(s.HeadDim+2), p.ScratchFloats)
	assert.Zero(t, p.PartialOutOffset)
	assert.Equal(t, rows*int64(s.HeadDim), p.MaxOffset)
	assert.Equal(t, rows*int64(s.HeadDim+1), p.SumOffset)
}

// checkRing checks the plan's ring: the one-wave ring when every block of the
// grid is resident at once, else the deep one or (short blocks, see
// TestPlanDecodeRing) the one-wave one.
func checkRing(t *testing.T, dev DeviceFacts, p DecodePlan) {
	t.Helper()
	deep := uint32(KernelSharedBytes(p.Kernel, dev.MaxSharedPerBlockOptin))
	oneWave := uint32(DecodeOneWaveSharedBytes(p.Kernel, dev.MaxSharedPerBlockOptin))
	occ := max(dev.Occupancy[p.Kernel], 1)
	if p.Cluster > 0 {
		occ = max(dev.Occupancy[strings.TrimSuffix(p.Kernel, "_cluster")], dev.Occupancy[p.Kernel], 1)
	}
	if int(p.Grid.X*p.Grid.Y*p.Grid.Z) <= dev.SMs*occ {
		assert.Equal(t, oneWave, p.SharedBytes, "one wave: the one-wave ring, grid %v", p.Grid)
		return
	}
	assert.Contains(t, []uint32{deep, oneWave}, p.SharedBytes, "ring of %v", p.Grid)
}

// TestPlanDecodeRing pins the ring depth: grids of one wave get a ring of
// OneWaveRingBytes per warp (2 stages at head dim 128, 16-bit), larger grids
// the deep ring of DecodeSharedBytes; where that is already as shallow, both
// are the same.
func TestPlanDecodeRing(t *testing.T) {
	const q128, stage128 = 4096, 32768 // head dim 128, 16-bit cache
	group16 := func(seqs, kv int) DecodeShape {
		s := llama(seqs, kv)
		s.NumQHeads = 16 * s.NumKVHeads
		return s
	}
	fp8 := llama(32, 2048)
	fp8.CacheDType = E4M3
	hd256 := llama(16, 2048) // 128 blocks: one wave at the 1 block per SM h200() gives it
	hd256.HeadDim = 256
	fp8hd256 := hd256
	fp8hd256.CacheDType = E4M3
	for _, tt := range []struct {
		name         string
		shape        DecodeShape
		want, stages int
	}{
		{"one wave: 256 blocks of 264", llama(32, 2048), q128 + 2*stage128, 2},
		{"split to one wave", llama(8, 8192), q128 + 2*stage128, 2},
		{"clusters, one wave", llama(1, 512), q128 + 2*stage128, 2},
		{"four waves of 512-token blocks: 3 blocks per SM with the shallow ring", llama(128, 512), q128 + 2*stage128, 2},
		{"four waves of 1024-token blocks", llama(128, 1024), q128 + 2*stage128, 2},
		{"four waves of 1040-token blocks", llama(128, 1040), q128 + 3*stage128, 3},
		{"four waves of 2048-token blocks", llama(128, 2048), q128 + 3*stage128, 3},
		{"272 blocks: two waves of 264, one of 396 with the shallow ring", llama(34, 32768), q128 + 2*stage128, 2},
		{"400 blocks: two waves either way", llama(50, 32768), q128 + 3*stage128, 3},
		{"wide kernel (group 16), short blocks: no more blocks per SM", group16(128, 512), q128 + 3*stage128, 3},
		{"fp8 head dim 128, one wave: 3 stages of 4 KiB per warp (OneWaveRingBytesFP8)", fp8, 4096 + 3*16384, 3},
		{"head dim 256: 2 stages either way", hd256, 8192 + 2*65536, 2},
		{"fp8 head dim 256: 2 stages of 8 KiB per warp", fp8hd256, 8192 + 2*32768, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanDecode(known(tt.shape), h200(), DefaultKnobs())
			require.NoError(t, err)
			assert.Equal(t, uint32(tt.want), p.SharedBytes, "%s, grid %v", p.Kernel, p.Grid)
			assert.Equal(t, tt.stages, DecodeRingStages(p.Kernel, int(p.SharedBytes)))
		})
	}
}

func TestPlanDecodeScratchLayout(t *testing.T) {
	// 1 seq, 32 q heads, 4 splits, head dim 128: out 32·4·128 = 16384
	// floats, max 128 floats, sum 128 floats; 8 counters (1 seq × 8 KV heads).
	p, err := PlanDecode(llama(1, 512), hopper, DefaultKnobs())
	require.NoError(t, err)
	assert.Equal(t, DecodePlan{
		Launch: Launch{Kernel: "paged_decode_f16_hd128_g8", Grid: Dim3{8, 1, 4}, Block: Dim3{128, 1, 1}, SharedBytes: 69632}, // one wave: 2 stages
		SplitK: SplitK{
			Splits: 4, Counters: 8,
			ScratchFloats: 16640, PartialOutOffset: 0, MaxOffset: 16384, SumOffset: 16512,
			RequestedSplits: 4, Reason: ReasonFillSMs,
		},
	}, p)
}

func TestPlanDecodeKernelNames(t *testing.T) {
	tests := []struct {
		q, cache       DType
		headDim, group int
		kernel         string
	}{
		{F16, F16, 128, 1, "paged_decode_f16_hd128_g8"},
		{F16, F16, 128, 2, "paged_decode_f16_hd128_g8"},
		{F16, F16, 64, 3, "paged_decode_f16_hd64_g8"},
		{BF16, BF16, 64, 4, "paged_decode_bf16_hd64_g8"},
		{BF16, BF16, 256, 5, "paged_decode_bf16_hd256_g8"},
		{F16, F16, 128, 8, "paged_decode_f16_hd128_g8"}, // the largest narrow group
		{F16, F16, 128, 9, "paged_decode_f16_hd128"},
		{BF16, BF16, 256, 16, "paged_decode_bf16_hd256"},
		{F16, E4M3, 128, 7, "paged_decode_f16_e4m3_hd128_g8"},
		{BF16, E4M3, 128, 8, "paged_decode_bf16_e4m3_hd128_g8"},
		{BF16, E4M3, 256, 9, "paged_decode_bf16_e4m3_hd256"},
		{F16, E4M3, 64, 16, "paged_decode_f16_e4m3_hd64"},
	}
	for _, tt := range tests {
		t.Run(tt.kernel, func(t *testing.T) {
			s := DecodeShape{NumSeqs: 2, NumQHeads: 2 * tt.group, NumKVHeads: 2, HeadDim: tt.headDim, BlockSize: 16,
				MaxKVLen: 4096, MaxBlocksPerSeq: 256, DType: tt.q, CacheDType: tt.cache}
			p, err := PlanDecode(s, hopper, knobs(func(k *Knobs) { k.ForcedSplits = 2 }))
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, int64(4), p.Counters)
			assert.Equal(t, Dim3{2, 2, 2}, p.Grid)
		})
	}
}

// TestPlanDecodeLayoutKernels: fp8 caches in the x-split and shuffle
// layouts take the _laid builds, in every plan family, planned exactly as
// their flash twins; 16-bit caches keep one kernel for every layout.
func TestPlanDecodeLayoutKernels(t *testing.T) {
	tests := []struct {
		cache  DType
		splits int
		flash  string // the flash layout's kernel; the others' is it + laid
		laid   string
	}{
		{E4M3, 1, "paged_decode_f16_e4m3_hd128_g8_sm90", "_laid"},
		{E4M3, 4, "paged_decode_f16_e4m3_hd128_g8_cluster", "_laid"},
		{E4M3, 12, "paged_decode_f16_e4m3_hd128_g8_sm90", "_laid"},
		{F16, 1, "paged_decode_f16_hd128_g8", ""},
		{F16, 4, "paged_decode_f16_hd128_g8_cluster", ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/x%d", tt.cache, tt.splits), func(t *testing.T) {
			s := DecodeShape{NumSeqs: 2, NumQHeads: 8, NumKVHeads: 2, HeadDim: 128, BlockSize: 16,
				MaxKVLen: 4096, MaxBlocksPerSeq: 256, DType: F16, CacheDType: tt.cache}
			k := knobs(func(k *Knobs) { k.ForcedSplits = tt.splits })
			flash, err := PlanDecode(s, h200(), k)
			require.NoError(t, err)
			assert.Equal(t, tt.flash, flash.Kernel)
			for _, layout := range []Layout{LayoutXSplit, LayoutShuffle} {
				s.Layout = layout
				p, err := PlanDecode(s, h200(), k)
				require.NoError(t, err)
				assert.Equal(t, tt.flash+tt.laid, p.Kernel, "%v", layout)
				p.Kernel = flash.Kernel
				assert.Equal(t, flash, p, "%v: the plan but for its kernel", layout)
			}
		})
	}
	assert.Equal(t, "paged_decode_bf16_e4m3_hd64_laid", DecodeLayoutKernel("paged_decode_bf16_e4m3_hd64", LayoutXSplit))
	assert.Equal(t, "paged_decode_bf16_e4m3_hd64", DecodeLayoutKernel("paged_decode_bf16_e4m3_hd64", LayoutFlash))
	assert.Equal(t, "paged_decode_bf16_hd64", DecodeLayoutKernel("paged_decode_bf16_hd64", LayoutShuffle))
}

func TestPlanDecodeNarrowKnob(t *testing.T) {
	s := llama(8, 2048) // group 4
	p, err := PlanDecode(s, h200(), DefaultKnobs())
	require.NoError(t, err)
	assert.Equal(t, "paged_decode_f16_hd128_g8_cluster", p.Kernel)
	k := DefaultKnobs()
	k.Narrow = false
	p, err = PlanDecode(s, h200(), k)
	require.NoError(t, err)
	assert.Equal(t, "paged_decode_f16_hd128_cluster", p.Kernel, "DECODE_NARROW=0: the wide kernels")
	k.PagedFlash = false
	p, err = PlanDecode(s, h200(), k)
	require.NoError(t, err)
	assert.Equal(t, "paged_decode_f16_hd128", p.Kernel)
}

func TestDecodeSharedBytes(t *testing.T) {
	// q (16 rows × D × 2 bytes), then 2..4 stages (2..3 for fp8) of 4 warps
	// × K and V × 16 tokens × D elements in half of optin less 2 KiB.
	const h200, a100, sm86 = 227 << 10, 163 << 10, 99 << 10
	for _, tt := range []struct{ headDim, size, optin, want int }{
		{64, 2, h200, 2048 + 4*16384},
		{128, 2, h200, 4096 + 3*32768},
		{256, 2, h200, 8192 + 2*65536},
		{64, 1, h200, 2048 + 3*8192}, // fp8: at most DecodeDeepStagesFP8
		{128, 1, h200, 4096 + 3*16384},
		{256, 1, h200, 8192 + 3*32768},
		{128, 2, a100, 4096 + 2*32768},
		{128, 2, sm86, 4096 + 2*32768}, // two stages at least: one block per SM
		{256, 2, sm86, 8192 + 2*65536}, // more than sm86 holds: the planner refuses
	} {
		assert.Equal(t, tt.want, DecodeSharedBytes(tt.headDim, tt.size, tt.optin), "head dim %d, %d-byte cache, optin %d", tt.headDim, tt.size, tt.optin)
	}
	assert.Equal(t, 4096+3*32768, KernelSharedBytes("paged_decode_bf16_hd128", h200))
	assert.Equal(t, 8192+3*32768, KernelSharedBytes("paged_decode_f16_e4m3_hd256", h200))
	assert.Zero(t, KernelSharedBytes("cache_append_f16", h200))
	assert.Equal(t, 3, DecodeRingStages("paged_decode_bf16_hd128", 4096+3*32768))
	assert.Equal(t, 4, DecodeRingStages("paged_decode_f16_hd128_cluster", 4096+5*32768), "at most DecodeMaxStages")
	assert.Zero(t, DecodeRingStages("cache_append_f16", 4096))
	assert.Equal(t, 4096+4*32768, DecodeSharedLimit("paged_decode_f16_hd128", h200), "4 stages fit 227 KiB")
	assert.Equal(t, 4096+3*32768, DecodeSharedLimit("paged_decode_f16_hd128", 120<<10), "3 stages fit 120 KiB")
	assert.Equal(t, 8192+2*65536, DecodeSharedLimit("paged_decode_f16_hd256", sm86), "more than sm86 holds: the default")
	assert.Equal(t, KernelSharedBytes("qkv_norm_rope_f16", h200), DecodeSharedLimit("qkv_norm_rope_f16", h200))
}

func TestPlanDecodeSharedMemoryLimit(t *testing.T) {
	// An sm_86-like part (99 KiB per block) cannot hold the head-dim-256
	// f16 kernel (136 KiB): the planner says so by name.
	small := hopper
	small.Name, small.MaxSharedPerBlockOptin = "sm86-like", 99<<10
	s := llama(4, 1024)
	s.HeadDim = 256
	_, err := PlanDecode(s, small, DefaultKnobs())
	require.ErrorIs(t, err, ErrInvalidShape)
	assert.Contains(t, err.Error(), "HeadDim=256")
	assert.Contains(t, err.Error(), "sm86-like allows 101376")
	s.HeadDim = 128
	_, err = PlanDecode(s, small, DefaultKnobs())
	assert.NoError(t, err)
}

func TestKernelNameLists(t *testing.T) {
	decode := DecodeKernelNames()
	// q dtype × (wide, e4m3, narrow, e4m3 narrow) × the powers of two,
	// (wide, narrow) × the dims between them (120 among them), (e4m3,
	// e4m3 narrow) × 96 and 192, then the power-of-two e4m3 ones' _laid
	// twins.
	assert.Len(t, decode, 2*4*3+2*2*5+2*2*2+2*2*3)
	assert.Contains(t, decode, "paged_decode_f16_hd80")
	assert.Contains(t, decode, "paged_decode_bf16_hd120_g8")
	assert.Contains(t, decode, "paged_decode_bf16_hd192_g8")
	assert.Contains(t, decode, "paged_decode_bf16_e4m3_hd96")
	assert.Contains(t, decode, "paged_decode_f16_e4m3_hd192_g8")
	assert.NotContains(t, decode, "paged_decode_bf16_e4m3_hd80")
	assert.NotContains(t, decode, "paged_decode_bf16_e4m3_hd96_laid")
	assert.Contains(t, decode, "paged_decode_f16_e4m3_hd64_laid")
	assert.Contains(t, decode, "paged_decode_bf16_e4m3_hd128_g8_laid")
	assert.Contains(t, decode, "paged_decode_f16_hd64")
	assert.Contains(t, decode, "paged_decode_bf16_e4m3_hd256")
	assert.Contains(t, decode, "paged_decode_bf16_hd128_g8")
	assert.Contains(t, decode, "paged_decode_bf16_e4m3_hd128_g8")
	assert.Equal(t, []string{
		"cache_append_f16", "cache_append_f16_e4m3", "cache_append_f16_e4m3_sm90", "cache_append_f16_e4m3_t2_sm90",
		"cache_claim_f16", "cache_append_pages_f16", "cache_claim_f16_e4m3", "cache_append_pages_f16_e4m3",
		"cache_append_bf16", "cache_append_bf16_e4m3", "cache_append_bf16_e4m3_sm90", "cache_append_bf16_e4m3_t2_sm90",
		"cache_claim_bf16", "cache_append_pages_bf16", "cache_claim_bf16_e4m3", "cache_append_pages_bf16_e4m3",
	}, AppendKernelNames())

	cluster := ClusterDecodeKernelNames()
	// Every decode kernel of a power-of-two head dim has a cluster twin.
	decode = slices.DeleteFunc(decode, func(n string) bool {
		return strings.Contains(n, "_hd80") || strings.Contains(n, "_hd96") || strings.Contains(n, "_hd112") ||
			strings.Contains(n, "_hd120") || strings.Contains(n, "_hd192")
	})
	assert.Len(t, cluster, len(decode))
	for i := range decode {
		if base, ok := strings.CutSuffix(decode[i], "_laid"); ok {
			assert.Equal(t, base+"_cluster_laid", cluster[i])
		} else {
			assert.Equal(t, decode[i]+"_cluster", cluster[i])
		}
	}
	twin, err := ClusterDecodeKernelName(BF16, E4M3, 256, 8)
	require.NoError(t, err)
	assert.Equal(t, "paged_decode_bf16_e4m3_hd256_g8_cluster", twin)
	twin, err = ClusterDecodeKernelName(BF16, E4M3, 256, 9)
	require.NoError(t, err)
	assert.Equal(t, "paged_decode_bf16_e4m3_hd256_cluster", twin)
	_, err = ClusterDecodeKernelName(F16, F16, 72, 4)
	assert.ErrorIs(t, err, ErrInvalidShape)
	_, err = ClusterDecodeKernelName(F16, F16, 96, 4)
	assert.ErrorIs(t, err, ErrInvalidShape, "no cluster kernels between the powers of two")
	_, err = ClusterDecodeKernelName(F16, F16, 128, 17)
	assert.ErrorIs(t, err, ErrInvalidShape)

	all := KernelNames()
	// … decode_partition, the 24 _mods kernels (wide and narrow over 16-bit
	// and e4m3 caches, q dtype × head dim), the six _g8_sm90 fp8
	// kernels and their _laid twins, varlen: q dtype × ((16-bit and e4m3 caches in three
	// layouts) × (three head dims + two _r64) + the 16-bit caches' three
	// _k64 + three merges + the flash kernels' five _mods twins per cache
	// dtype and the 16-bit ones' five _cluster twins, two _wg kernels and
	// their two _mods twins); the 16 appends include the page path's claim and page kernels, the 8
	// qkv_norm_rope kernels their 4 _split twins, their 6 _tile twins
	// (none for the fp8 _split ones) and the 4 qkv_values
	// kernels, the 4 rope_cache kernels the 4 rope_values ones. The dims
	// between the
	// powers of two add 20 decode kernels (q dtype × wide and narrow × 5,
	// 120 among them), their 20 _mods twins, and per q dtype 9 varlen
	// kernels (5 + 4 _r64, 120 among them), their 9 _mods twins and 5
	// merges; over e4m3 caches, 96 and 192 add 8 decode kernels, their 8
	// _mods twins, and per q dtype 3 varlen kernels (96, 96_r64, 192) and
	// their 3 _mods twins.
	assert.Len(t, all, 2*len(decode)+16+3+4+4+4+8+4+6+1+24+2*6+2*(6*5+3+3+5+5+5+2+2)+20+20+2*(9+9+5)+8+8+2*(3+3))
	assert.Contains(t, all, "paged_varlen_f16_e4m3_hd96_r64_mods")
	assert.Contains(t, all, "paged_varlen_bf16_hd128_wg")
	assert.Contains(t, all, "paged_varlen_f16_hd64_wg_mods")
	assert.Contains(t, all, "qkv_norm_rope_bf16_split_tile")
	assert.NotContains(t, all, "qkv_norm_rope_bf16_e4m3_split_tile")
	assert.Contains(t, all, "paged_decode_bf16_e4m3_hd192_g8_mods")
	assert.Contains(t, all, "paged_varlen_f16_hd120_r64_mods")
	assert.Contains(t, all, "paged_varlen_merge_bf16_hd120")
	assert.Contains(t, all, "paged_varlen_bf16_hd128_r64_mods")
	assert.Contains(t, all, "paged_decode_bf16_hd256_g8_mods")
	assert.Contains(t, all, "paged_decode_f16_e4m3_hd64_g8_mods")
	assert.Contains(t, all, "paged_varlen_bf16_e4m3_hd128_r64_mods")
	assert.Contains(t, all, "paged_decode_f16_e4m3_hd256_g8_sm90_laid")
	assert.Contains(t, all, "cache_claim_bf16_e4m3")
	assert.Contains(t, all, "paged_varlen_f16_hd128_r64_shuffle")
	assert.Contains(t, all, "cache_append_pages_f16")
	assert.Contains(t, all, "qkv_values_bf16_e4m3")
	assert.Contains(t, all, "paged_varlen_bf16_e4m3_hd128")
	assert.Contains(t, all, "paged_varlen_bf16_hd128_k64_xsplit")
	assert.Contains(t, all, "paged_varlen_merge_f16_hd256")
	assert.Contains(t, all, "paged_varlen_bf16_hd128_r64_cluster")
	seen := map[string]bool{}
	for _, name := range all {
		assert.False(t, seen[name], "duplicate %s", name)
		seen[name] = true
	}
	// Callers own the returned slices.
	decode[0] = "changed"
	assert.Equal(t, "paged_decode_f16_hd64", DecodeKernelNames()[0])
}

func TestPlanDecodeErrors(t *testing.T) {
	ok := llama(4, 1024)
	tests := []struct {
		name  string
		edit  func(s *DecodeShape, d *DeviceFacts, k *Knobs)
		error string
	}{
		{"seqs zero", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.NumSeqs = 0 },
			"dispatch: DecodeShape.NumSeqs=0 is out of range; allowed: 1..65535"},
		{"seqs over grid", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.NumSeqs = 70000 },
			"dispatch: DecodeShape.NumSeqs=70000 is out of range; allowed: 1..65535"},
		{"kv heads zero", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.NumKVHeads = 0 },
			"dispatch: DecodeShape.NumKVHeads=0 is out of range; allowed: ≥ 1"},
		{"q heads zero", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.NumQHeads = 0 },
			"dispatch: DecodeShape.NumQHeads=0 is out of range; allowed: ≥ 1"},
		{"q heads not a multiple", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.NumQHeads = 30 },
			"dispatch: DecodeShape.NumQHeads=30 is not a multiple of NumKVHeads=8"},
		{"group too large", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.NumQHeads = 32; s.NumKVHeads = 1 },
			"dispatch: DecodeShape.NumQHeads=32 / NumKVHeads=1 is a GQA group of 32; supported: 1..16"},
		{"head dim", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.HeadDim = 72 },
			"dispatch: DecodeShape.HeadDim=72 is not supported; supported: 64, 80, 96, 112, 120, 128, 192, 256"},
		{"head dim with fp8", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.HeadDim, s.CacheDType = 80, E4M3 },
			"dispatch: DecodeShape.HeadDim=80 is not supported with CacheDType=e4m3; supported there: 64, 96, 128, 192, 256"},
		{"block size not a power of two", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.BlockSize = 24 },
			"dispatch: DecodeShape.BlockSize=24 is not supported; supported: a power of two from 1 to 256"},
		{"block size too large", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.BlockSize = 512 },
			"dispatch: DecodeShape.BlockSize=512 is not supported; supported: a power of two from 1 to 256"},
		{"layout", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.Layout = 4 },
			"dispatch: DecodeShape.Layout=4 is not supported; supported: LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND"},
		{"negative kv", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.MaxKVLen = -1 },
			"dispatch: DecodeShape.MaxKVLen=-1 is out of range; allowed: 0..2147483647 (the kernels' lengths are int32)"},
		{"block table empty", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.MaxBlocksPerSeq = 0 },
			"dispatch: DecodeShape.MaxBlocksPerSeq=0 is out of range; allowed: ≥ 1"},
		{"block table too short", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.MaxBlocksPerSeq = 63 },
			"dispatch: DecodeShape.MaxBlocksPerSeq=63 × BlockSize=16 holds fewer than MaxKVLen=1024 tokens"},
		{"q type unset", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.DType = 0 },
			"dispatch: DecodeShape.DType=DType(0) is not supported; supported: f16, bf16"},
		{"q type fp8", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.DType = E4M3; s.CacheDType = E4M3 },
			"dispatch: DecodeShape.DType=e4m3 is not supported; supported: f16, bf16"},
		{"cache type mismatch", func(s *DecodeShape, _ *DeviceFacts, _ *Knobs) { s.CacheDType = BF16 },
			"dispatch: DecodeShape.CacheDType=bf16 is not supported with DType=f16; supported: f16, e4m3"},
		{"no SMs", func(_ *DecodeShape, d *DeviceFacts, _ *Knobs) { d.SMs = 0 },
			"dispatch: DeviceFacts.SMs=0 is out of range; allowed: ≥ 1"},
		{"negative forced splits", func(_ *DecodeShape, _ *DeviceFacts, k *Knobs) { k.ForcedSplits = -2 },
			"dispatch: Knobs.ForcedSplits=-2 is negative; allowed: 0 (auto) or 1..64"},
		{"bad split mode", func(_ *DecodeShape, _ *DeviceFacts, k *Knobs) { k.SplitK = 7 },
			"dispatch: Knobs.SplitK=SplitMode(7) is not supported; supported: auto, off, on"},
		{"negative scratch limit", func(_ *DecodeShape, _ *DeviceFacts, k *Knobs) { k.ScratchLimitBytes = -1 },
			"dispatch: Knobs.ScratchLimitBytes=-1 is negative; allowed: 0 (no limit) or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, d, k := ok, hopper, DefaultKnobs()
			tt.edit(&s, &d, &k)
			p, err := PlanDecode(s, d, k)
			require.Error(t, err)
			assert.EqualError(t, err, tt.error)
			assert.ErrorIs(t, err, ErrInvalidShape)
			assert.Zero(t, p)
		})
	}
	_, err := PlanDecode(ok, hopper, DefaultKnobs())
	require.NoError(t, err, "the base shape must be valid")
}

func TestPlanDecodeCaptureCapacity(t *testing.T) {
	// A plan made for KV_CAPACITY at capture stays valid for shorter replays;
	// the block table must span the capacity even if no sequence is that long.
	s := llama(4, 0)
	s.MaxKVLen, s.MaxBlocksPerSeq = 8192, 512
	p, err := PlanDecode(s, hopper, DefaultKnobs())
	require.NoError(t, err)
	// 32 blocks: one wave up to s = 16 (512 ≤ 528), which maxSplits = 32 allows;
	// s = 32 is two waves (2/32) and ties.
	assert.Equal(t, 16, p.Splits)
}

func TestPlanAppend(t *testing.T) {
	tests := []struct {
		shape  AppendShape
		kernel string
		gridX  uint32
	}{
		// 1 pair of groups of 8 tokens · 8 heads · 128/8 = 256 threads → 2 blocks.
		{AppendShape{NumTokens: 1, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16}, "cache_append_f16", 2},
		// 4096/8 = 512 groups · 8 · 16 = 65536 threads → 512 blocks.
		{AppendShape{NumTokens: 4096, NumKVHeads: 8, HeadDim: 128, DType: BF16, CacheDType: BF16}, "cache_append_bf16", 512},
		// 1 pair · 1 · 1 = 2 threads → 1 block.
		{AppendShape{NumTokens: 3, NumKVHeads: 1, HeadDim: 8, DType: F16, CacheDType: E4M3}, "cache_append_f16_e4m3", 1},
		// ceil(100/16) = 7 pairs = 14 groups · 5 · 32 = 2240 threads → 17.5 → 18 blocks.
		{AppendShape{NumTokens: 100, NumKVHeads: 5, HeadDim: 256, DType: BF16, CacheDType: E4M3}, "cache_append_bf16_e4m3", 18},
		// 17 tokens: 2 pairs = 4 groups · 8 · 16 = 512 threads → 4 blocks.
		{AppendShape{NumTokens: 17, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16}, "cache_append_f16", 4},
		// 9 tokens are two groups, one pair: 2 · 8 · 16 = 256 threads → 2 blocks.
		{AppendShape{NumTokens: 9, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16}, "cache_append_f16", 2},
		{AppendShape{NumTokens: 0, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16}, "cache_append_f16", 0},
		// On sm_90 the fp8 appends take their compute_90 build, same grid;
		// 16-bit caches keep the compute_80 kernel.
		{AppendShape{NumTokens: 100, NumKVHeads: 5, HeadDim: 256, DType: BF16, CacheDType: E4M3, SM90: true}, "cache_append_bf16_e4m3_sm90", 18},
		{AppendShape{NumTokens: 3, NumKVHeads: 1, HeadDim: 8, DType: F16, CacheDType: E4M3, SM90: true}, "cache_append_f16_e4m3_sm90", 1},
		{AppendShape{NumTokens: 17, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16, SM90: true}, "cache_append_f16", 4},
		// In the flash layout they move 2 tokens per thread: T = 64 is 16
		// pairs = 32 groups · 8 · 16 = 4096 threads → 32 blocks (8 with 8
		// tokens per thread).
		{AppendShape{NumTokens: 64, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: E4M3, SM90: true, Flash: true}, "cache_append_f16_e4m3_t2_sm90", 32},
		{AppendShape{NumTokens: 64, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: E4M3, SM90: true}, "cache_append_f16_e4m3_sm90", 8},
		// T = 1: one pair (the second group empty) · 8 · 16 = 256 threads.
		{AppendShape{NumTokens: 1, NumKVHeads: 8, HeadDim: 128, DType: BF16, CacheDType: E4M3, SM90: true, Flash: true}, "cache_append_bf16_e4m3_t2_sm90", 2},
		// ceil(5/4) = 2 pairs = 4 groups · 1 · 1 = 4 threads → 1 block.
		{AppendShape{NumTokens: 5, NumKVHeads: 1, HeadDim: 8, DType: F16, CacheDType: E4M3, SM90: true, Flash: true}, "cache_append_f16_e4m3_t2_sm90", 1},
		// ceil(100/4) = 25 pairs = 50 groups · 5 · 32 = 8000 threads → 62.5 → 63 blocks.
		{AppendShape{NumTokens: 100, NumKVHeads: 5, HeadDim: 256, DType: BF16, CacheDType: E4M3, SM90: true, Flash: true}, "cache_append_bf16_e4m3_t2_sm90", 63},
		// Without compute_90, or with a 16-bit cache, the flash layout changes nothing.
		{AppendShape{NumTokens: 64, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: E4M3, Flash: true}, "cache_append_f16_e4m3", 8},
		{AppendShape{NumTokens: 64, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16, SM90: true, Flash: true}, "cache_append_f16", 8},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/T=%d", tt.kernel, tt.shape.NumTokens), func(t *testing.T) {
			p, err := PlanAppend(tt.shape)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, Dim3{tt.gridX, 1, 1}, p.Grid)
			assert.Equal(t, Dim3{128, 1, 1}, p.Block)
		})
	}
}

// TestPlanAppendPages checks when an append takes the page path: the
// x-split or shuffle layout, BlockSize ≥ x, a power-of-two HeadDim, and tokens that could fill
// 1/AppendPagesMinCover of the slots; one block per page after the claims.
func TestPlanAppendPages(t *testing.T) {
	dense := AppendShape{NumTokens: 65536, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16, BlockSize: 16, NumSlots: 65536}
	p, err := PlanAppend(dense)
	require.NoError(t, err)
	assert.Equal(t, "cache_append_pages_f16", p.Kernel)
	assert.Equal(t, "cache_claim_f16", p.Claim)
	assert.Equal(t, Dim3{4096, 1, 1}, p.Grid)
	assert.Equal(t, Dim3{128, 1, 1}, p.Block)
	assert.Equal(t, "cache_append_pages_f16 grid(4096,1,1) block 128 smem 0 B; after cache_claim_f16 (one thread per token)", p.String())

	fp8 := dense
	fp8.DType, fp8.CacheDType, fp8.SM90 = BF16, E4M3, true
	p, err = PlanAppend(fp8)
	require.NoError(t, err)
	assert.Equal(t, "cache_append_pages_bf16_e4m3", p.Kernel)
	assert.Equal(t, "cache_claim_bf16_e4m3", p.Claim)

	// The token path: the flash layout, slots in runs, a block smaller than x (8 rows of a
	// 16-bit cache, 16 of fp8), a sparse append (a decode step's tokens in
	// a large cache), a head_dim not a power of two (the page kernel's
	// places are shifts), no cache facts, or the rule turned off.
	token := func(mod func(*AppendShape)) {
		a := dense
		mod(&a)
		p, err := PlanAppend(a)
		require.NoError(t, err)
		assert.Empty(t, p.Claim, "%+v", a)
		assert.NotContains(t, p.Kernel, "pages", "%+v", a)
	}
	token(func(a *AppendShape) { a.Flash = true })
	token(func(a *AppendShape) { a.SlotRuns = true }) // a prefill's slots, as the host sees them
	token(func(a *AppendShape) { a.BlockSize = 4 })
	token(func(a *AppendShape) { a.CacheDType, a.BlockSize = E4M3, 8 })
	token(func(a *AppendShape) { a.NumTokens = 128 })
	token(func(a *AppendShape) { a.HeadDim = 96 })
	token(func(a *AppendShape) { a.NumTokens = 16383 }) // 16383·4 < 65536
	token(func(a *AppendShape) { a.BlockSize, a.NumSlots = 0, 0 })
	token(func(a *AppendShape) { a.Path = AppendPathTokens })
	pages := dense
	pages.NumTokens, pages.Path = 1, AppendPathPages // forced: any cover
	p, err = PlanAppend(pages)
	require.NoError(t, err)
	assert.NotEmpty(t, p.Claim, "a forced page path")
	edge := dense
	edge.NumTokens = 16384 // 16384·4 = 65536: the page path
	p, err = PlanAppend(edge)
	require.NoError(t, err)
	assert.Equal(t, "cache_claim_f16", p.Claim)
}

func TestPlanAppendErrors(t *testing.T) {
	ok := AppendShape{NumTokens: 16, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16}
	tests := []struct {
		name  string
		edit  func(a *AppendShape)
		error string
	}{
		{"negative tokens", func(a *AppendShape) { a.NumTokens = -1 }, "dispatch: AppendShape.NumTokens=-1 is negative"},
		{"no heads", func(a *AppendShape) { a.NumKVHeads = 0 }, "dispatch: AppendShape.NumKVHeads=0 is out of range; allowed: ≥ 1"},
		{"head dim not a multiple of 8", func(a *AppendShape) { a.HeadDim = 100 },
			"dispatch: AppendShape.HeadDim=100 is not supported; supported: a multiple of 8 from 8 to 256"},
		{"head dim too large", func(a *AppendShape) { a.HeadDim = 264 },
			"dispatch: AppendShape.HeadDim=264 is not supported; supported: a multiple of 8 from 8 to 256"},
		{"head dim zero", func(a *AppendShape) { a.HeadDim = 0 },
			"dispatch: AppendShape.HeadDim=0 is not supported; supported: a multiple of 8 from 8 to 256"},
		{"input fp8", func(a *AppendShape) { a.DType = E4M3; a.CacheDType = E4M3 },
			"dispatch: AppendShape.DType=e4m3 is not supported; supported: f16, bf16"},
		{"cache mismatch", func(a *AppendShape) { a.CacheDType = BF16 },
			"dispatch: AppendShape.CacheDType=bf16 is not supported with DType=f16; supported: f16, e4m3"},
		{"grid too large", func(a *AppendShape) { a.NumTokens = 1 << 40 },
			"dispatch: AppendShape.NumTokens=1099511627776 × NumKVHeads=8 × HeadDim=128 needs a grid larger than 2147483647 blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ok
			tt.edit(&a)
			_, err := PlanAppend(a)
			assert.EqualError(t, err, tt.error)
			assert.ErrorIs(t, err, ErrInvalidShape)
		})
	}

	// The largest grid that fits: 2^31-1 blocks of 128 threads, 16 threads
	// per group of 8 tokens; one more token starts another group.
	p, err := PlanAppend(AppendShape{NumTokens: (1<<31 - 1) * 128 / 16 * 8, NumKVHeads: 1, HeadDim: 128, DType: F16, CacheDType: F16})
	require.NoError(t, err)
	assert.Equal(t, uint32(1<<31-1), p.Grid.X)
	_, err = PlanAppend(AppendShape{NumTokens: (1<<31-1)*128/16*8 + 1, NumKVHeads: 1, HeadDim: 128, DType: F16, CacheDType: F16})
	assert.ErrorIs(t, err, ErrInvalidShape)
	// With 2 tokens per thread (fp8, flash, compute_90) the same grid holds a quarter of the tokens.
	flash := AppendShape{NumKVHeads: 1, HeadDim: 128, DType: F16, CacheDType: E4M3, SM90: true, Flash: true}
	flash.NumTokens = (1<<31 - 1) * 128 / 16 * 2
	p, err = PlanAppend(flash)
	require.NoError(t, err)
	assert.Equal(t, uint32(1<<31-1), p.Grid.X)
	flash.NumTokens++
	_, err = PlanAppend(flash)
	assert.ErrorIs(t, err, ErrInvalidShape)
}

func TestDType(t *testing.T) {
	for _, tt := range []struct {
		d    DType
		name string
		size int
	}{{F16, "f16", 2}, {BF16, "bf16", 2}, {E4M3, "e4m3", 1}} {
		assert.Equal(t, tt.name, tt.d.String())
		assert.Equal(t, tt.size, tt.d.Size())
		assert.True(t, tt.d.Valid())
		parsed, err := ParseDType(tt.name)
		require.NoError(t, err)
		assert.Equal(t, tt.d, parsed)
	}
	assert.False(t, DType(0).Valid())
	assert.Zero(t, DType(9).Size())
	_, err := ParseDType("fp32")
	assert.EqualError(t, err, `dispatch: dtype "fp32" is not supported; supported: f16, bf16, e4m3`)
}

func TestSplitModeString(t *testing.T) {
	assert.Equal(t, "auto", SplitAuto.String())
	assert.Equal(t, "off", SplitOff.String())
	assert.Equal(t, "on", SplitOn.String())
}

// TestPlanNoAllocs checks that the success path allocates nothing, for every
// kind of decision.
func TestPlanNoAllocs(t *testing.T) {
	shapes := []DecodeShape{llama(1, 512), llama(128, 512), llama(1, 32768), llama(8, 8192), llama(1, 0)}
	knobSets := []Knobs{
		DefaultKnobs(),
		{},
		knobs(func(k *Knobs) { k.ForcedSplits = 1000 }),
		knobs(func(k *Knobs) { k.SplitK = SplitOn }),
		knobs(func(k *Knobs) { k.ScratchLimitBytes = 100000 }),
	}
	// A device with clusters whose modules are not loaded yet: every figure
	// is estimated, and kernel names are long (bf16 e4m3 head dim 256).
	fresh := DeviceFacts{Name: "fresh", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Clusters: true}
	long := llama(8, 8192)
	long.DType, long.CacheDType, long.HeadDim = BF16, E4M3, 256
	shapes = append(shapes, long)
	for _, dev := range []DeviceFacts{hopper, h200(), fresh} {
		for _, s := range shapes {
			for _, k := range knobSets {
				allocs := testing.AllocsPerRun(100, func() {
					if _, err := PlanDecode(s, dev, k); err != nil {
						t.Fatal(err)
					}
				})
				assert.Zero(t, allocs, "PlanDecode(%s, %+v, %+v)", dev.Name, s, k)
			}
		}
	}
	a := AppendShape{NumTokens: 4096, NumKVHeads: 8, HeadDim: 128, DType: BF16, CacheDType: E4M3}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := PlanAppend(a); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "PlanAppend")
	q := QKVShape{NumTokens: 4096, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, RotDim: 64, DType: BF16, CacheDType: E4M3}
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := PlanQKV(q, hopper); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "PlanQKV")
}

func BenchmarkPlanDecode(b *testing.B) {
	for _, bc := range []struct {
		name  string
		shape DecodeShape
		dev   DeviceFacts
	}{
		{"seqs=1/kv=32768", llama(1, 32768), hopper},
		{"seqs=8/kv=8192", llama(8, 8192), hopper},
		{"seqs=128/kv=512", llama(128, 512), hopper},
		{"clusters/seqs=1/kv=512", llama(1, 512), h200()},
		{"clusters/seqs=8/kv=8192", llama(8, 8192), h200()},
		{"clusters/seqs=128/kv=32768", llama(128, 32768), h200()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ReportMetric(SplitCostTokens, "split_cost_tokens")
			k := DefaultKnobs()
			for b.Loop() {
				if _, err := PlanDecode(bc.shape, bc.dev, k); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPlanAppend(b *testing.B) {
	a := AppendShape{NumTokens: 4096, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: F16}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlanAppend(a); err != nil {
			b.Fatal(err)
		}
	}
}

// h200 is the H200 as pagedkv measured it: 2 blocks per SM of the head-dim
// 128 kernels, and how many clusters of 1..8 of them fit at once
// (cuOccupancyMaxActiveClusters on the H200, 2026-11-29).
func h200() DeviceFacts {
	occ := map[string]int{}
	for _, name := range DecodeKernelNames() {
		if strings.Contains(name, "_hd128") {
			occ[name], occ[name+"_cluster"] = 2, 2
		}
	}
	clusters := map[string][]int{}
	for _, name := range ClusterDecodeKernelNames() {
		if strings.Contains(name, "_hd128") {
			clusters[name] = []int{0, 264, 132, 79, 62, 47, 39, 32, 30}
		}
	}
	// With the one-wave ring (2 stages at head dim 128) the narrow kernels
	// (128 registers) fit 3 blocks per SM, the wide ones (190) still 2.
	shallow := map[string]int{}
	for name, n := range occ {
		shallow[name] = n
		if strings.Contains(name, "_g8") {
			shallow[name] = 3
		}
	}
	return DeviceFacts{Name: "H200", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Clusters: true, Occupancy: occ,
		ShallowOccupancy: shallow, ActiveClusters: clusters}
}

// TestPlanDecodeClusters pins the split plans of a device with clusters
// against the H200's forced-split sweeps (2026-11-29 to 2026-12-02): the most
// splits whose clusters fit in one wave while a split is at most
// ClusterMaxSplitTokens long; the plain kernel's plan for longer splits,
// full grids, past 8 splits, with the knob off, or on a device without
// clusters. A cluster plan names the _cluster kernel and needs no scratch
// and no counters.
func TestPlanDecodeClusters(t *testing.T) {
	sm90 := h200()
	estimated := sm90
	estimated.ActiveClusters = nil
	noClusters := sm90
	noClusters.Clusters = false
	noneFit := h200()
	for name := range noneFit.ActiveClusters {
		noneFit.ActiveClusters[name] = make([]int, MaxClusterSplits+1)
	}
	tests := []struct {
		name    string
		dev     DeviceFacts
		shape   DecodeShape
		knobs   Knobs
		splits  int
		cluster uint32
	}{
		// 8 clusters: round(√(512/8)) = 8 splits, 8 ≤ 30 clusters of 8 fit.
		{"seqs=1 kv=512", sm90, llama(1, 512), knobs(nil), 8, 8},
		{"seqs=1 kv=2048", sm90, llama(1, 2048), knobs(nil), 8, 8},
		// The global path wants √(8192/32) = 16 splits, more than a cluster.
		{"seqs=1 kv=8192", sm90, llama(1, 8192), knobs(nil), 16, 0},
		// 64 clusters: 62 clusters of 4 fit, 79 of 3; splits of 171 and
		// 683 tokens.
		{"seqs=8 kv=512", sm90, llama(8, 512), knobs(nil), 3, 3},
		{"seqs=8 kv=2048", sm90, llama(8, 2048), knobs(nil), 3, 3},
		// The boundary: 3 splits of exactly ClusterMaxSplitTokens (2048)
		// tokens still run as clusters, 3 of 2054 do not.
		{"seqs=8 kv=6144", sm90, llama(8, 6144), knobs(nil), 3, 3},
		{"seqs=8 kv=6160", sm90, llama(8, 6160), knobs(nil), 4, 0},
		// Group 16 (64/4 heads): 32 clusters; 30 of 8 fit, 32 of 7, whose
		// splits of 1171 tokens run as clusters (not the ×8 global merge).
		{"seqs=8 kv=8192 group 16", sm90, group16(8, 8192), knobs(nil), 7, 7},
		// Splits of 2731 tokens would be too long: 4 global splits fill
		// the 264 block slots.
		{"seqs=8 kv=8192", sm90, llama(8, 8192), knobs(nil), 4, 0},
		{"seqs=8 kv=32768", sm90, llama(8, 32768), knobs(nil), 4, 0},
		// 256 clusters do not fit even as pairs (132): single-pass.
		{"seqs=32 kv=512", sm90, llama(32, 512), knobs(nil), 1, 0},
		{"seqs=32 kv=2048", sm90, llama(32, 2048), knobs(nil), 1, 0},
		{"seqs=128 kv=512", sm90, llama(128, 512), knobs(nil), 1, 0},
		{"seqs=128 kv=32768", sm90, llama(128, 32768), knobs(nil), 1, 0},
		// Before the cluster module loads: 64·s ≤ 132·2 → s = 4 fits, and
		// 512-token splits are short enough.
		{"seqs=8 kv=2048 estimated", estimated, llama(8, 2048), knobs(nil), 4, 4},
		// 4 splits of 2048 tokens: clusters.
		{"seqs=8 kv=8192 estimated", estimated, llama(8, 8192), knobs(nil), 4, 4},
		{"knob off", sm90, llama(1, 512), knobs(func(k *Knobs) { k.Clusters = false }), 4, 0},
		{"no clusters", noClusters, llama(1, 512), knobs(nil), 4, 0},
		{"forced 8", sm90, llama(1, 8192), knobs(func(k *Knobs) { k.ForcedSplits = 8 }), 8, 8},
		{"forced 16", sm90, llama(1, 8192), knobs(func(k *Knobs) { k.ForcedSplits = 16 }), 16, 0},
		{"forced 2", sm90, llama(4, 8192), knobs(func(k *Knobs) { k.ForcedSplits = 2 }), 2, 2},
		{"paged flash off", sm90, llama(1, 8192), knobs(func(k *Knobs) { k.PagedFlash = false }), 1, 0},
		// KV too short for the global path to split stays single-pass
		// (clusters were not measured there).
		{"short kv", sm90, llama(1, 64), knobs(nil), 1, 0},
		// The driver placed no cluster: the global-memory merge, forced or not.
		{"no cluster fits", noneFit, llama(1, 512), knobs(nil), 4, 0},
		{"no cluster fits, forced 8", noneFit, llama(1, 8192), knobs(func(k *Knobs) { k.ForcedSplits = 8 }), 8, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanDecode(known(tt.shape), tt.dev, tt.knobs)
			require.NoError(t, err)
			assert.Equal(t, tt.splits, p.Splits, p.Reason)
			assert.Equal(t, tt.cluster, p.Cluster)
			plain, _ := DecodeKernelName(F16, F16, 128, tt.shape.NumQHeads/tt.shape.NumKVHeads)
			if tt.cluster > 0 {
				assert.Equal(t, plain+"_cluster", p.Kernel)
				assert.True(t, IsClusterKernel(p.Kernel))
				assert.Zero(t, p.ScratchFloats)
				assert.Zero(t, p.Counters)
				assert.Equal(t, p.Grid.Z%p.Cluster, uint32(0))
			} else {
				assert.Equal(t, plain, p.Kernel)
				assert.False(t, IsClusterKernel(p.Kernel))
				if p.Splits > 1 {
					assert.NotZero(t, p.ScratchFloats)
					assert.NotZero(t, p.Counters)
				}
			}
			checkRing(t, tt.dev, p)
		})
	}
}

// TestPlanDecodeFP8Dims: fp8 caches at head dims 96 and 192 plan their
// kernels (wide and narrow, every layout, with and without modifiers), and
// 80, 112 and 120 are refused.
func TestPlanDecodeFP8Dims(t *testing.T) {
	dev := DeviceFacts{Name: "H200-like", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Clusters: true}
	for _, d := range []int{96, 192} {
		for _, group := range []int{4, 12} {
			for _, layout := range []Layout{LayoutFlash, LayoutXSplit, LayoutShuffle} {
				for _, mods := range []bool{false, true} {
					s := DecodeShape{NumSeqs: 8, NumQHeads: 8 * group, NumKVHeads: 8, HeadDim: d, BlockSize: 16, MaxKVLen: 8192,
						MaxBlocksPerSeq: 512, DType: BF16, CacheDType: E4M3, Layout: layout, Mods: mods}
					p, err := PlanDecode(s, dev, DefaultKnobs())
					require.NoError(t, err, "hd %d group %d %v mods %v", d, group, layout, mods)
					want := fmt.Sprintf("paged_decode_bf16_e4m3_hd%d", d)
					if group <= NarrowMaxGroup {
						want += "_g8"
					}
					if mods {
						want += "_mods"
					}
					assert.Equal(t, want, p.Kernel)
					assert.Zero(t, p.Cluster)
				}
			}
		}
	}
	for _, d := range []int{80, 112, 120} {
		s := DecodeShape{NumSeqs: 8, NumQHeads: 32, NumKVHeads: 8, HeadDim: d, BlockSize: 16, MaxKVLen: 8192,
			MaxBlocksPerSeq: 512, DType: BF16, CacheDType: E4M3}
		_, err := PlanDecode(s, dev, DefaultKnobs())
		assert.ErrorIs(t, err, ErrInvalidShape, "hd %d", d)
	}
}
