package dispatch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// varlenDev is an H200-like device on which every varlen kernel runs two
// blocks per SM.
func varlenDev() DeviceFacts {
	d := DeviceFacts{Name: "H200-like", SMs: 132, MaxSharedPerBlockOptin: 227 << 10, Occupancy: map[string]int{}}
	for _, name := range VarlenKernelNames() {
		d.Occupancy[name] = 2
	}
	return d
}

// prefill returns a varlen shape of seqs sequences of qLen query tokens over
// kvLen positions (32 query, 8 KV heads, head dim 128, bf16).
func prefill(seqs, qLen, kvLen int) VarlenShape {
	cu := make([]int32, seqs+1)
	for i := range seqs {
		cu[i+1] = cu[i] + int32(qLen)
	}
	return VarlenShape{NumSeqs: seqs, NumTokens: seqs * qLen, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128,
		MaxKVLen: kvLen, DType: BF16, CacheDType: BF16, HostCuSeqlensQ: cu}
}

func TestPlanVarlen(t *testing.T) {
	tests := []struct {
		name   string
		shape  VarlenShape
		knobs  Knobs
		kernel string
		grid   Dim3
		splits int
		reason string
	}{
		{"long prefill: 128-row blocks of 64-key tiles, no split", prefill(8, 2048, 2048), DefaultKnobs(),
			"paged_varlen_bf16_hd128_k64", Dim3{8 + 8*2048*4/128, 8, 1}, 1, ReasonGridFills},
		// 8 × 16 tokens × group 4 = 8 row tiles of 64 per KV head: 64
		// blocks against a wave of 264; 4 splits fill one wave exactly.
		{"small query over long KV: 64-row blocks, split to one wave", prefill(8, 16, 8192), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{8 + 8*16*4/64, 8, 4}, 4, ReasonFillSMs},
		{"SPLIT_K_ATTN=0", prefill(8, 16, 8192), knobs(func(k *Knobs) { k.SplitK = SplitOff }),
			"paged_varlen_bf16_hd128_r64", Dim3{16, 8, 1}, 1, ReasonSplitKOff},
		{"forced splits, clamped to the K/V tiles", prefill(1, 4, 100), knobs(func(k *Knobs) { k.ForcedSplits = 9 }),
			"paged_varlen_bf16_hd128_r64", Dim3{1, 8, 2}, 2, ReasonForced},
		{"short KV", prefill(1, 16, 100), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{2, 8, 1}, 1, ReasonShortKV},
		// One sequence's 16 new tokens (SequenceAttention) over short
		// caches: 8 blocks, so the split count is the one the cost model
		// picks, 128 positions a split at 512 and 1024, 256 at 2048 (the
		// fastest forced counts on an H100), none at 256.
		{"one chunk over 256 positions: no split", prefill(1, 16, 256), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{2, 8, 1}, 1, ReasonShortKV},
		// 4 rows of 4 tokens over 404 positions: the cost model alone would
		// split in two (404 < 448 keys), but below VarlenMinSplitSpan the
		// merge's launch costs the host more than the split saves.
		{"4x4 over 404 positions: one launch", prefill(4, 4, 404), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{5, 8, 1}, 1, ReasonShortKV},
		{"4x4 over 404 positions, SPLIT_K_ATTN=1", prefill(4, 4, 404), knobs(func(k *Knobs) { k.SplitK = SplitOn }),
			"paged_varlen_bf16_hd128_r64", Dim3{5, 8, 4}, 4, ReasonSplitOn},
		{"one chunk over 512 positions", prefill(1, 16, 512), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{2, 8, 4}, 4, ReasonFillSMs},
		{"one chunk over 1024 positions", prefill(1, 16, 1024), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{2, 8, 8}, 8, ReasonFillSMs},
		{"one chunk over 2048 positions", prefill(1, 16, 2048), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", Dim3{2, 8, 8}, 8, ReasonFillSMs},
		{"scratch limit", prefill(8, 16, 8192), knobs(func(k *Knobs) { k.ScratchLimitBytes = 3 * 128 * 32 * 130 * 4 }),
			"paged_varlen_bf16_hd128_r64", Dim3{16, 8, 3}, 3, ReasonScratchLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanVarlen(tt.shape, varlenDev(), tt.knobs)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, tt.grid, p.Grid)
			assert.Equal(t, tt.splits, p.Splits)
			assert.Equal(t, tt.reason, p.Reason)
			floats, mx, sum := VarlenPlanScratch(tt.shape.NumTokens, tt.shape.NumQHeads, tt.shape.HeadDim, p.Splits)
			assert.Equal(t, [3]int64{floats, mx, sum}, [3]int64{p.ScratchFloats, p.MaxOffset, p.SumOffset})
			assert.Equal(t, uint32(VarlenSharedBytes(p.Kernel)), p.SharedBytes)
			// A count the model chose lets each row tile split by its own
			// KV range; a forced or single one does not.
			if tt.reason == ReasonFillSMs || tt.reason == ReasonScratchLimit {
				assert.Equal(t, varlenDev().SMs*varlenDev().Occupancy[p.Kernel], p.SplitWave)
				assert.True(t, p.SplitBlocks > 0 && p.SplitBlocks < p.SplitWave, "SplitBlocks=%d", p.SplitBlocks)
				assert.Contains(t, p.String(), "each row tile takes up to")
			} else {
				assert.Zero(t, p.SplitWave)
				assert.Zero(t, p.SplitBlocks)
			}
		})
	}
}

// TestVarlenGraphSplitsAsEager: a varlen planned for a graph's KV capacity
// and replayed over shorter lengths splits each row tile (the kernels'
// model, VarlenModelSplits with the plan's SplitBlocks and SplitWave, at
// most its Splits) as an eager plan for those lengths does, from one
// chunk of 16 tokens to 300-token chunks and small-query batches.
func TestVarlenGraphSplitsAsEager(t *testing.T) {
	const capacity = 32768
	for _, sq := range [][2]int{{1, 16}, {1, 300}, {8, 16}, {8, 5}, {4, 64}} {
		graph := prefill(sq[0], sq[1], capacity)
		graph.HostCuSeqlensQ = nil // a graph's plan counts the grid's row tiles
		gp, err := PlanVarlen(graph, varlenDev(), DefaultKnobs())
		require.NoError(t, err)
		_, keys, ok := VarlenGeometry(gp.Kernel)
		require.True(t, ok)
		for _, kv := range []int{sq[1], 300, 512, 700, 1024, 2000, 4096, 10000, capacity} {
			if kv < sq[1] {
				continue
			}
			eager := graph
			eager.MaxKVLen = kv
			ep, err := PlanVarlen(eager, varlenDev(), DefaultKnobs())
			require.NoError(t, err)
			got := 1
			if gp.SplitWave > 0 {
				got = VarlenModelSplits((kv+keys-1)/keys, kv, keys, gp.Splits, gp.SplitBlocks, gp.SplitWave)
			}
			assert.Equal(t, ep.Splits, got, "%dx%d graph for %d (%s), replayed over %d", sq[0], sq[1], capacity, gp.String(), kv)
		}
	}
}

// TestPlanVarlenWG checks where the planner takes a wgmma kernel: a
// flash- or HND-layout varlen over a cache of the queries' type at head dim
// 64 or 128, on a device whose wgmma modules load, with VarlenWGMMA on or
// auto (then only where varlenWGAuto says: long enough KV, and for the
// 128-row kernels long enough sequences and, without score modifiers, a
// grid of at most VarlenWGMaxWaves waves), keys not forced;
// the mma.sync kernel elsewhere. The plan's TensorCores note says which.
func TestPlanVarlenWG(t *testing.T) {
	hopper := varlenDev()
	hopper.WGMMA = true
	off := knobs(func(k *Knobs) { k.VarlenWGMMA = SplitOff })
	on := knobs(func(k *Knobs) { k.VarlenWGMMA = SplitOn })
	keys := knobs(func(k *Knobs) { k.VarlenKeys = 64 })
	// 1×4096: 1024 blocks of 128 rows, 3.9 waves of two blocks an SM;
	// 8×2048: 4096 blocks, 15.5 waves.
	with := func(edit func(*VarlenShape)) VarlenShape {
		s := prefill(1, 4096, 4096)
		edit(&s)
		return s
	}
	tests := []struct {
		name   string
		shape  VarlenShape
		dev    DeviceFacts
		knobs  Knobs
		kernel string
	}{
		{"prefill", prefill(1, 4096, 4096), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg"},
		{"prefill of many waves", prefill(8, 2048, 2048), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"prefill of many waves, without host bounds", func() VarlenShape { s := prefill(8, 2048, 2048); s.HostCuSeqlensQ = nil; return s }(), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"prefill of many waves, VarlenWGMMA on", prefill(8, 2048, 2048), hopper, on, "paged_varlen_bf16_hd128_wg"},
		{"score modifiers, many waves", func() VarlenShape { s := prefill(8, 2048, 2048); s.Mods = true; return s }(), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg_mods"},
		{"short rows", prefill(8, 16, 8192), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg"},
		{"head dim 64, f16", with(func(s *VarlenShape) { s.HeadDim, s.DType, s.CacheDType = 64, F16, F16 }), hopper, DefaultKnobs(), "paged_varlen_f16_hd64_wg"},
		{"HND layout", with(func(s *VarlenShape) { s.Layout = LayoutHND }), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg"},
		{"short KV", prefill(32, 512, 512), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"short KV, VarlenWGMMA on", prefill(32, 512, 512), hopper, on, "paged_varlen_bf16_hd128_wg"},
		{"128 rows, KV at the threshold", prefill(2, VarlenWGMinTokens, VarlenWGMinKVLong), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg"},
		{"128 rows, KV below the threshold", prefill(2, VarlenWGMinTokens, VarlenWGMinKVLong-1), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"128 rows, short sequences", prefill(2, VarlenWGMinTokens-1, 32768), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"64 rows, KV at the threshold", prefill(8, 5, VarlenWGMinKV), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg"},
		{"64 rows, KV below the threshold", prefill(8, 5, VarlenWGMinKV-1), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_r64"},
		{"no wgmma modules", prefill(8, 2048, 2048), varlenDev(), DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"VarlenWGMMA off", prefill(8, 2048, 2048), hopper, off, "paged_varlen_bf16_hd128_k64"},
		{"keys forced", prefill(8, 2048, 2048), hopper, keys, "paged_varlen_bf16_hd128_k64"},
		{"score modifiers", with(func(s *VarlenShape) { s.Mods = true }), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_wg_mods"},
		{"score modifiers, VarlenWGMMA off", with(func(s *VarlenShape) { s.Mods = true }), hopper, off, "paged_varlen_bf16_hd128_mods"},
		{"fp8 cache", with(func(s *VarlenShape) { s.CacheDType = E4M3 }), hopper, DefaultKnobs(), "paged_varlen_bf16_e4m3_hd128"},
		{"x-split layout", with(func(s *VarlenShape) { s.Layout = LayoutXSplit }), hopper, DefaultKnobs(), "paged_varlen_bf16_hd128_k64_xsplit"},
		{"head dim 256", with(func(s *VarlenShape) { s.HeadDim = 256 }), hopper, DefaultKnobs(), "paged_varlen_bf16_hd256"},
		{"head dim 96", with(func(s *VarlenShape) { s.HeadDim = 96 }), hopper, DefaultKnobs(), "paged_varlen_bf16_hd96"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanVarlen(tt.shape, tt.dev, tt.knobs)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, uint32(VarlenSharedBytes(p.Kernel)), p.SharedBytes)
			assert.Equal(t, strings.Contains(tt.kernel, "_wg"), VarlenWGKernel(p.Kernel))
			switch {
			case !tt.dev.WGMMA:
				assert.Empty(t, p.TensorCores)
			case VarlenWGKernel(p.Kernel):
				assert.Contains(t, []string{WGMMAOn, WGMMAAuto}, p.TensorCores)
			default:
				assert.True(t, strings.HasPrefix(p.TensorCores, "mma.sync ("), p.TensorCores)
			}
			if p.TensorCores != "" {
				assert.Contains(t, p.String(), "; "+p.TensorCores)
			}
		})
	}
	for _, c := range []struct {
		shape VarlenShape
		knobs Knobs
		note  string
	}{
		{prefill(1, 4096, 4096), DefaultKnobs(), WGMMAAuto},
		{prefill(8, 2048, 2048), DefaultKnobs(), WGMMAWaves},
		{prefill(32, 512, 512), on, WGMMAOn},
		{prefill(32, 512, 512), DefaultKnobs(), WGMMAShort},
		{prefill(8, 2048, 2048), off, WGMMAOff},
		{prefill(8, 2048, 2048), keys, WGMMAKeys},
		{with(func(s *VarlenShape) { s.Mods = true }), DefaultKnobs(), WGMMAAuto},
		{with(func(s *VarlenShape) { s.CacheDType = E4M3 }), DefaultKnobs(), WGMMANoKernel},
		{with(func(s *VarlenShape) { s.HeadDim = 256 }), DefaultKnobs(), WGMMANoKernel},
	} {
		p, err := PlanVarlen(c.shape, hopper, c.knobs)
		require.NoError(t, err)
		assert.Equal(t, c.note, p.TensorCores, "%s", p)
	}
	rows, k, ok := VarlenGeometry("paged_varlen_f16_hd128_wg")
	assert.True(t, ok)
	assert.Equal(t, [2]int{64, 64}, [2]int{rows, k})
	assert.Equal(t, 64*128*2+2*2*64*128*2+VarlenWGAlign, VarlenSharedBytes("paged_varlen_f16_hd128_wg"))
	// A split-K wgmma plan merges in global memory: the kernel has no
	// cluster twin.
	p, err := PlanVarlen(prefill(1, 16, 32768), hopper, knobs(func(k *Knobs) { k.ForcedSplits = 4 }))
	require.NoError(t, err)
	assert.Equal(t, "paged_varlen_bf16_hd128_wg", p.Kernel)
	assert.Equal(t, 4, p.Splits)
	assert.Zero(t, p.Cluster)
}

// TestPlanVarlenK64 checks the choice between a 128-row kernel and its
// 64-key twin: the twin where two of its blocks fit an SM, or as
// Knobs.VarlenKeys forces; kernels without a twin stay.
func TestPlanVarlenK64(t *testing.T) {
	a100 := varlenDev() // 164 KB an SM: one 96 KiB block
	a100.Name, a100.SMs, a100.MaxSharedPerBlockOptin = "A100-like", 108, 163<<10
	a100.Occupancy["paged_varlen_bf16_hd128_k64"] = 1
	a100.Occupancy["paged_varlen_bf16_hd128_k64_shuffle"] = 1
	unloaded := varlenDev()
	unloaded.Occupancy = nil
	keys := func(n int) Knobs { return knobs(func(k *Knobs) { k.VarlenKeys = n }) }
	shuffle := prefill(8, 2048, 2048)
	shuffle.Layout = LayoutShuffle
	fp8 := prefill(8, 2048, 2048)
	fp8.CacheDType = E4M3
	hd64 := prefill(8, 2048, 2048)
	hd64.HeadDim = 64
	tests := []struct {
		name   string
		shape  VarlenShape
		dev    DeviceFacts
		knobs  Knobs
		kernel string
	}{
		{"two blocks fit", prefill(8, 2048, 2048), varlenDev(), DefaultKnobs(), "paged_varlen_bf16_hd128_k64"},
		{"two blocks fit, shuffle layout", shuffle, varlenDev(), DefaultKnobs(), "paged_varlen_bf16_hd128_k64_shuffle"},
		{"one block fits", prefill(8, 2048, 2048), a100, DefaultKnobs(), "paged_varlen_bf16_hd128"},
		{"one block fits, shuffle layout", shuffle, a100, DefaultKnobs(), "paged_varlen_bf16_hd128_shuffle"},
		{"occupancy not measured yet", prefill(8, 2048, 2048), unloaded, DefaultKnobs(), "paged_varlen_bf16_hd128"},
		{"forced 32", prefill(8, 2048, 2048), varlenDev(), keys(32), "paged_varlen_bf16_hd128"},
		{"forced 64", prefill(8, 2048, 2048), a100, keys(64), "paged_varlen_bf16_hd128_k64"},
		{"fp8 cache: no twin", fp8, varlenDev(), keys(64), "paged_varlen_bf16_e4m3_hd128"},
		{"head dim 64: no twin", hd64, varlenDev(), keys(64), "paged_varlen_bf16_hd64"},
		{"short rows: the _r64 kernel", prefill(8, 16, 8192), varlenDev(), keys(64), "paged_varlen_bf16_hd128_r64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanVarlen(tt.shape, tt.dev, tt.knobs)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, uint32(VarlenSharedBytes(p.Kernel)), p.SharedBytes)
		})
	}
	rows, k, ok := VarlenGeometry("paged_varlen_f16_hd128_k64_xsplit")
	assert.True(t, ok)
	assert.Equal(t, [2]int{128, 64}, [2]int{rows, k})
	assert.Equal(t, 128*128*2+2*2*64*128*2, VarlenSharedBytes("paged_varlen_f16_hd128_k64"), "96 KiB")
	twin, ok := VarlenK64KernelName("paged_varlen_f16_hd128_xsplit")
	assert.True(t, ok)
	assert.Equal(t, "paged_varlen_f16_hd128_k64_xsplit", twin)
	_, ok = VarlenK64KernelName("paged_varlen_f16_hd128_r64")
	assert.False(t, ok)
	_, err := PlanVarlen(prefill(8, 2048, 2048), varlenDev(), keys(48))
	require.ErrorIs(t, err, ErrInvalidShape)
	assert.Contains(t, err.Error(), "Knobs.VarlenKeys=48 is not supported; supported: 0 (the planner's), 32, 64")
	small := varlenDev() // 64 KiB blocks fit, 96 KiB ones do not
	small.Name, small.MaxSharedPerBlockOptin = "small", 80<<10
	_, err = PlanVarlen(prefill(8, 2048, 2048), small, keys(64))
	require.ErrorIs(t, err, ErrInvalidShape)
	assert.Contains(t, err.Error(), "Knobs.VarlenKeys=64 needs 98304 bytes of shared memory per block at VarlenShape.HeadDim=128; small allows 81920")
	p, err := PlanVarlen(prefill(8, 2048, 2048), small, DefaultKnobs())
	require.NoError(t, err)
	assert.Equal(t, "paged_varlen_bf16_hd128", p.Kernel, "the planner never picks a twin the device cannot hold")
}

// TestVarlenGridCoversEveryBatch checks the row-tile mapping the kernels
// use (tile_start): for random query lengths, each sequence owns at least
// ⌈q_len·G/rows⌉ consecutive tiles and all of them lie inside the grid.
func TestVarlenGridCoversEveryBatch(t *testing.T) {
	for _, rows := range []int{64, 128} {
		for seed := range 200 {
			seqs := 1 + seed%7
			group := 1 + seed%16
			cu := make([]int32, seqs+1)
			for i := range seqs {
				cu[i+1] = cu[i] + int32((seed*7919+i*104729)%300)
			}
			grid := VarlenGridX(seqs, int(cu[seqs]), group, rows)
			start := func(s int) int64 { return int64(s) + int64(cu[s])*int64(group)/int64(rows) }
			for s := range seqs {
				need := (int64(cu[s+1]-cu[s])*int64(group) + int64(rows) - 1) / int64(rows)
				end := grid
				if s+1 < seqs {
					end = start(s + 1)
				}
				assert.GreaterOrEqual(t, end-start(s), need, "rows %d, sequence %d of %v", rows, s, cu)
			}
		}
	}
}

func TestPlanVarlenErrors(t *testing.T) {
	bad := prefill(2, 4, 64)
	bad.HeadDim = 72
	_, err := PlanVarlen(bad, varlenDev(), DefaultKnobs())
	assert.ErrorIs(t, err, ErrInvalidShape)
	assert.ErrorContains(t, err, "VarlenShape.HeadDim=72 is not supported; supported: 64, 80, 96, 112, 120, 128, 192, 256")
	for _, edit := range []func(*VarlenShape){
		func(s *VarlenShape) { s.CacheDType, s.HeadDim = E4M3, 112 },
		func(s *VarlenShape) { s.Layout, s.HeadDim = LayoutShuffle, 96 },
		func(s *VarlenShape) { s.CacheDType, s.Layout, s.HeadDim = E4M3, LayoutXSplit, 192 },
	} {
		bad = prefill(2, 4, 64)
		edit(&bad)
		_, err = PlanVarlen(bad, varlenDev(), DefaultKnobs())
		assert.ErrorIs(t, err, ErrInvalidShape)
		assert.ErrorContains(t, err, fmt.Sprintf("VarlenShape.HeadDim=%d is not supported with", bad.HeadDim))
	}
	fp8 := prefill(2, 4, 64)
	fp8.CacheDType, fp8.HeadDim = E4M3, 96
	p, err := PlanVarlen(fp8, varlenDev(), DefaultKnobs())
	require.NoError(t, err)
	assert.Contains(t, p.Kernel, "paged_varlen_bf16_e4m3_hd96")
	bad = prefill(2, 4, 64)
	bad.HostCuSeqlensQ = bad.HostCuSeqlensQ[:2]
	_, err = PlanVarlen(bad, varlenDev(), DefaultKnobs())
	assert.ErrorContains(t, err, "VarlenShape.HostCuSeqlensQ has 2 values; allowed: none, or NumSeqs+1=3")
	bad = prefill(2, 4, 64)
	bad.NumQHeads = 36
	_, err = PlanVarlen(bad, varlenDev(), DefaultKnobs())
	assert.ErrorContains(t, err, "VarlenShape.NumQHeads=36 is not allowed")
}

// TestPlanVarlenAllocatesNothing holds the varlen planner, which every
// Varlen call runs, to zero heap allocations (with and without the host's
// lengths).
func TestPlanVarlenAllocatesNothing(t *testing.T) {
	dev, k := varlenDev(), DefaultKnobs()
	with, without := prefill(8, 16, 8192), prefill(8, 16, 8192)
	without.HostCuSeqlensQ = nil
	for _, s := range []VarlenShape{with, without} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := PlanVarlen(s, dev, k); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "host lengths: %v", s.HostCuSeqlensQ != nil)
	}
}

func BenchmarkPlanVarlen(b *testing.B) {
	dev, k, s := varlenDev(), DefaultKnobs(), prefill(8, 2048, 2048)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlanVarlen(s, dev, k); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPlanVarlenLayouts pins the kernels of the x-split and shuffle layouts:
// the flash plan's kernel with the layout's suffix, the same geometry and
// shared memory, for 16-bit and e4m3 caches.
func TestPlanVarlenLayouts(t *testing.T) {
	dev := varlenDev()
	for _, c := range []struct {
		s      VarlenShape
		suffix string
	}{{prefill(8, 2048, 2048), "_k64"}, {prefill(8, 16, 8192), "_r64"}} {
		flash, err := PlanVarlen(c.s, dev, DefaultKnobs())
		require.NoError(t, err)
		for l, name := range map[Layout]string{LayoutXSplit: "xsplit", LayoutShuffle: "shuffle"} {
			s := c.s
			s.Layout = l
			p, err := PlanVarlen(s, dev, DefaultKnobs())
			require.NoError(t, err)
			assert.Equal(t, "paged_varlen_bf16_hd128"+c.suffix+"_"+name, p.Kernel)
			assert.Equal(t, flash.Kernel+"_"+name, p.Kernel)
			assert.Equal(t, flash.Grid, p.Grid)
			assert.Equal(t, flash.SharedBytes, p.SharedBytes)
			assert.Equal(t, flash.Splits, p.Splits)
		}
	}
	s := prefill(2, 64, 512)
	s.Layout, s.CacheDType = LayoutXSplit, E4M3
	p, err := PlanVarlen(s, dev, DefaultKnobs())
	require.NoError(t, err)
	assert.Equal(t, "paged_varlen_bf16_e4m3_hd128_xsplit", p.Kernel)
	s.Layout, s.CacheDType = 9, BF16
	_, err = PlanVarlen(s, dev, DefaultKnobs())
	assert.ErrorContains(t, err, "VarlenShape.Layout=9 is not supported")
	name, err := VarlenKernelName(F16, F16, LayoutShuffle, 256, true)
	require.NoError(t, err)
	assert.Equal(t, "paged_varlen_f16_hd256_shuffle", name, "head dim 256 has one kernel")
}

// TestPlanVarlenClusters: on a device with clusters, a split count of 2..8
// over a kernel with a _cluster twin runs the twin, its splits as the
// clusters, with no scratch; more splits, the _k64 kernel, score
// modifiers, Knobs.Clusters off, a device without clusters, or one that
// places no cluster of that size keep the global merge.
func TestPlanVarlenClusters(t *testing.T) {
	dev := varlenDev()
	dev.Clusters = true
	noPlace := dev
	noPlace.ActiveClusters = map[string][]int{"paged_varlen_bf16_hd128_r64_cluster": {0, 264, 132, 0, 0, 0, 0, 0, 0}}
	// The H100's clusters of 4 blocks of the 64-row kernel: 62 at once.
	h100 := dev
	h100.ActiveClusters = map[string][]int{"paged_varlen_bf16_hd128_r64_cluster": {0, 264, 132, 80, 62, 48, 40, 32, 30}}
	mods := prefill(1, 16, 512)
	mods.Mods = true
	tests := []struct {
		name    string
		shape   VarlenShape
		dev     DeviceFacts
		knobs   Knobs
		kernel  string
		cluster uint32
	}{
		{"one chunk over 512: 4 splits in a cluster", prefill(1, 16, 512), dev, DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64_cluster", 4},
		{"over 2048: 8 splits, global merge", prefill(1, 16, 2048), dev, DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", 0},
		{"forced 8 splits over 2048: a cluster", prefill(1, 16, 2048), dev, knobs(func(k *Knobs) { k.ForcedSplits = 8 }),
			"paged_varlen_bf16_hd128_r64_cluster", 8},
		{"8 clusters of 4 fit the H100 at once", prefill(1, 16, 512), h100, DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64_cluster", 4},
		{"64 clusters of 4 do not", prefill(8, 16, 8192), h100, DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", 0},
		{"more than 8 splits: global merge", prefill(1, 16, 8192), dev, knobs(func(k *Knobs) { k.ForcedSplits = 12 }),
			"paged_varlen_bf16_hd128_r64", 0},
		{"Knobs.Clusters off", prefill(1, 16, 512), dev, knobs(func(k *Knobs) { k.Clusters = false }),
			"paged_varlen_bf16_hd128_r64", 0},
		{"no clusters on the device", prefill(1, 16, 512), varlenDev(), DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", 0},
		{"clusters of 4 not placed", prefill(1, 16, 512), noPlace, DefaultKnobs(),
			"paged_varlen_bf16_hd128_r64", 0},
		{"score modifiers", mods, dev, DefaultKnobs(), "paged_varlen_bf16_hd128_r64_mods", 0},
		{"single-pass", prefill(8, 2048, 2048), dev, DefaultKnobs(), "paged_varlen_bf16_hd128_k64", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanVarlen(tt.shape, tt.dev, tt.knobs)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel, p.String())
			assert.Equal(t, tt.cluster, p.Cluster)
			assert.Equal(t, uint32(VarlenSharedBytes(p.Kernel)), p.SharedBytes)
			if tt.cluster > 0 {
				assert.Equal(t, tt.cluster, p.Grid.Z)
				assert.Zero(t, p.ScratchFloats, "the splits merge on chip")
				assert.Zero(t, p.WorkspaceBytes())
				assert.Contains(t, p.String(), "splits in clusters of")
				plain, ok := VarlenClusterPlain(p.Kernel)
				require.True(t, ok)
				// The twin holds the merge's staging beside the ring.
				rows, _, _ := VarlenGeometry(plain)
				assert.GreaterOrEqual(t, VarlenSharedBytes(p.Kernel), max(VarlenSharedBytes(plain), rows*(128+4+2+8)*4))
			} else if p.Splits > 1 {
				assert.Positive(t, p.ScratchFloats)
			}
		})
	}
	_, ok := VarlenClusterKernel("paged_varlen_bf16_hd128_k64")
	assert.False(t, ok, "the 64-key kernel has no twin")
	_, ok = VarlenClusterPlain("paged_varlen_bf16_hd128_k64_cluster")
	assert.False(t, ok)
}

// TestVarlenPaddedHeadDim: head dim 120 plans the kernels of tiles of 128
// (their shared memory is head dim 128's), merges with its own merge
// kernel, and has no 64-key or cluster twin.
func TestVarlenPaddedHeadDim(t *testing.T) {
	for _, s := range []VarlenShape{prefill(8, 2048, 2048), prefill(8, 16, 8192)} {
		s.HeadDim = PaddedHeadDim
		p, err := PlanVarlen(s, varlenDev(), DefaultKnobs())
		require.NoError(t, err)
		assert.Contains(t, p.Kernel, "_hd120")
		tile := strings.Replace(p.Kernel, "_hd120", "_hd128", 1)
		assert.Equal(t, VarlenSharedBytes(tile), VarlenSharedBytes(p.Kernel), p.Kernel)
		assert.Equal(t, uint32(VarlenSharedBytes(p.Kernel)), p.SharedBytes)
		assert.Zero(t, p.Cluster, p.Kernel)
		_, ok := VarlenK64KernelName(p.Kernel)
		assert.False(t, ok, p.Kernel)
		merge, err := VarlenMergeKernelName(s.DType, PaddedHeadDim)
		require.NoError(t, err)
		assert.Equal(t, "paged_varlen_merge_"+s.DType.String()+"_hd120", merge)
		s.Mods = true
		m, err := PlanVarlen(s, varlenDev(), DefaultKnobs())
		require.NoError(t, err)
		assert.Equal(t, p.Kernel+"_mods", m.Kernel)
	}
}
