package dispatch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanQKV(t *testing.T) {
	tests := []struct {
		shape  QKVShape
		kernel string
		grid   uint32
		block  Dim3
		shared uint32
	}{
		// 48 heads · 8 units = 384 units / 4 = 96 threads, one token per block;
		// 65536 tokens over 8·132 blocks: runs of 63 → capped at 16 tokens.
		// Stage: 96·8·16 pieces + 64·8 row bytes + 16.
		{QKVShape{NumTokens: 65536, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, RotDim: 64, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 4096, Dim3{96, 1, 1}, 3 * (12288 + 512 + 16)},
		// 4096 tokens: runs of ⌈4096/1056⌉ = 4 → 1024 blocks; full-width rows.
		{QKVShape{NumTokens: 4096, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, RotDim: 128, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 1024, Dim3{96, 1, 1}, 3 * (12288 + 1024 + 16)},
		// 24 · 8 = 192 units → 48 threads → 64; 2 tokens per block, 7 → 4 blocks of one group.
		{QKVShape{NumTokens: 7, NumQHeads: 16, NumKVHeads: 4, HeadDim: 128, RotDim: 64, DType: BF16, CacheDType: E4M3}, "qkv_norm_rope_bf16_e4m3", 4, Dim3{64, 2, 1}, 3 * (16384 + 2*512 + 32)},
		// 4 · 4 = 16 units → 4 threads → one warp; 4 tokens per block, 10 → 3 blocks.
		{QKVShape{NumTokens: 10, NumQHeads: 2, NumKVHeads: 1, HeadDim: 64, RotDim: 64, DType: F16, CacheDType: E4M3}, "qkv_norm_rope_f16_e4m3", 3, Dim3{32, 4, 1}, 3 * (16384 + 4*512 + 64)},
		// 3 heads of one unit each.
		{QKVShape{NumTokens: 5, NumQHeads: 1, NumKVHeads: 1, HeadDim: 16, RotDim: 8, DType: BF16, CacheDType: BF16}, "qkv_norm_rope_bf16", 2, Dim3{32, 4, 1}, 3 * (16384 + 4*64 + 64)},
		// 80 · 16 = 1280 units: 256 threads, two passes.
		{QKVShape{NumTokens: 3, NumQHeads: 64, NumKVHeads: 8, HeadDim: 256, RotDim: 256, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 3, Dim3{256, 1, 1}, 3 * (32768 + 2048 + 16)},
		// 40 · 8 = 320 units → 80 threads → 96.
		{QKVShape{NumTokens: 1, NumQHeads: 32, NumKVHeads: 4, HeadDim: 128, RotDim: 64, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 1, Dim3{96, 1, 1}, 3 * (12288 + 512 + 16)},
		{QKVShape{NumTokens: 0, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, RotDim: 64, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 0, Dim3{96, 1, 1}, 3 * (12288 + 512 + 16)},
		// HeadDim 96: 6 units per head on a group of 8 lanes, as 128 does.
		{QKVShape{NumTokens: 1, NumQHeads: 32, NumKVHeads: 4, HeadDim: 96, RotDim: 48, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 1, Dim3{96, 1, 1}, 3 * (12288 + 384 + 16)},
		// HeadDim 80 (5 units on 8 lanes): 48 · 8 = 384 units → 96 threads.
		{QKVShape{NumTokens: 16, NumQHeads: 32, NumKVHeads: 8, HeadDim: 80, RotDim: 80, DType: BF16, CacheDType: E4M3}, "qkv_norm_rope_bf16_e4m3", 16, Dim3{96, 1, 1}, 3 * (12288 + 640 + 16)},
		// HeadDim 192 (12 units on 16 lanes): 24 · 16 = 384 units → 96 threads.
		{QKVShape{NumTokens: 2, NumQHeads: 16, NumKVHeads: 4, HeadDim: 192, RotDim: 96, DType: F16, CacheDType: F16}, "qkv_norm_rope_f16", 2, Dim3{96, 1, 1}, 3 * (12288 + 768 + 16)},
		// HeadDim 120, halves of 60: the _split kernel, 8 units (the last
		// of 4 elements per half) per head.
		{QKVShape{NumTokens: 4, NumQHeads: 32, NumKVHeads: 8, HeadDim: 120, RotDim: 60, DType: BF16, CacheDType: BF16}, "qkv_norm_rope_bf16_split", 4, Dim3{96, 1, 1}, 3 * (12288 + 480 + 16)},
		{QKVShape{NumTokens: 4, NumQHeads: 2, NumKVHeads: 1, HeadDim: 24, RotDim: 24, DType: F16, CacheDType: E4M3}, "qkv_norm_rope_f16_e4m3_split", 1, Dim3{32, 4, 1}, 3 * (16384 + 4*192 + 64)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.shape), func(t *testing.T) {
			p, err := PlanQKV(tt.shape, hopper)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, Dim3{tt.grid, 1, 1}, p.Grid)
			assert.Equal(t, tt.block, p.Block)
			assert.Equal(t, tt.shared, p.SharedBytes)
			assert.Equal(t, int(tt.shared), qkvStages*QKVStageBytes(int(tt.block.X), int(tt.block.Y), tt.shape.RotDim))
			assert.LessOrEqual(t, int(p.SharedBytes), KernelSharedBytes(p.Kernel, hopper.MaxSharedPerBlockOptin))
		})
	}
}

// TestPlanQKVStages checks the ring depth against a device's shared memory:
// three stages where they fit, two where only two do, and an error naming
// the shape where not even two do.
func TestPlanQKVStages(t *testing.T) {
	big := QKVShape{NumTokens: 100, NumQHeads: 64, NumKVHeads: 8, HeadDim: 256, RotDim: 256, DType: F16, CacheDType: F16}
	stage := QKVStageBytes(256, 1, 256)
	for _, tt := range []struct {
		optin, stages int
	}{{227 << 10, 3}, {3 * stage, 3}, {3*stage - 1, 2}, {99 << 10, 2}, {2 * stage, 2}} {
		dev := DeviceFacts{Name: "test", SMs: 10, MaxSharedPerBlockOptin: tt.optin}
		p, err := PlanQKV(big, dev)
		require.NoError(t, err, "optin %d", tt.optin)
		assert.Equal(t, tt.stages*stage, int(p.SharedBytes), "optin %d", tt.optin)
		assert.LessOrEqual(t, int(p.SharedBytes), KernelSharedBytes(p.Kernel, tt.optin), "optin %d", tt.optin)
	}
	_, err := PlanQKV(big, DeviceFacts{Name: "tiny", SMs: 10, MaxSharedPerBlockOptin: 2*stage - 1})
	assert.EqualError(t, err, fmt.Sprintf("dispatch: QKVShape with 80 heads of HeadDim=256 needs %d bytes of shared memory per block; tiny allows %d", 2*stage, 2*stage-1))
	assert.ErrorIs(t, err, ErrInvalidShape)
}

// TestPlanQKVGeometry checks what the kernel relies on and what the plan
// promises, over a sweep of shapes: whole warps per token, at most
// QKVMaxThreads per block, every token group in some block's run (the
// kernel deals them out in runs of ceil(groups/Grid.X)), no block without
// tokens, runs of at most qkvMaxRun groups, and at most QKVUnitsPerThread
// units per thread unless the token already has the most threads.
func TestPlanQKVGeometry(t *testing.T) {
	for _, dev := range []DeviceFacts{hopper, ampere, {Name: "one SM", SMs: 1, MaxSharedPerBlockOptin: 99 << 10}} {
		for _, hd := range []int{16, 24, 32, 64, 80, 96, 112, 120, 128, 192, 256} {
			for _, kv := range []int{1, 2, 3, 8, 16} {
				for _, group := range []int{1, 2, 4, 7, 8} {
					for _, tokens := range []int{0, 1, 3, 4, 5, 1000, 100000} {
						s := QKVShape{NumTokens: tokens, NumQHeads: kv * group, NumKVHeads: kv, HeadDim: hd, RotDim: hd / 2, DType: F16, CacheDType: F16}
						p, err := PlanQKV(s, dev)
						require.NoError(t, err)
						units := int(s.NumQHeads+2*s.NumKVHeads) * QKVHeadLanes(hd)
						assert.Equal(t, hd%16 != 0, strings.HasSuffix(p.Kernel, "_split"), "%+v: %s", s, p.Kernel)
						x, y := int(p.Block.X), int(p.Block.Y)
						assert.Zero(t, x%32, "%+v: %d threads per token", s, x)
						assert.LessOrEqual(t, x*y, QKVMaxThreads, "%+v", s)
						groups := (tokens + y - 1) / y
						blocks := int(p.Grid.X)
						if groups == 0 {
							assert.Zero(t, blocks, "%+v", s)
							continue
						}
						run := (groups + blocks - 1) / blocks
						assert.LessOrEqual(t, run, qkvMaxRun, "%+v", s)
						assert.Less(t, (blocks-1)*run, groups, "%+v: an empty block", s)
						if x < QKVMaxThreads {
							assert.GreaterOrEqual(t, x*QKVUnitsPerThread, units, "%+v", s)
							assert.Less(t, (x-32)*QKVUnitsPerThread, units, "%+v: a warp too many", s)
						}
					}
				}
			}
		}
	}
}

// TestQKVHeadLanes checks each head's lanes: a power of two that holds its
// ceil(HeadDim/16) units, HeadDim/16 for a power of two, and never more than
// a warp.
func TestQKVHeadLanes(t *testing.T) {
	for _, tt := range []struct{ headDim, lanes int }{
		{16, 1}, {24, 2}, {32, 2}, {64, 4}, {80, 8}, {96, 8}, {112, 8}, {120, 8}, {128, 8}, {192, 16}, {256, 16},
	} {
		assert.Equal(t, tt.lanes, QKVHeadLanes(tt.headDim), "HeadDim=%d", tt.headDim)
	}
	for d := 16; d <= 256; d += 8 {
		l := QKVHeadLanes(d)
		assert.Zero(t, l&(l-1), "HeadDim=%d", d)
		assert.GreaterOrEqual(t, 16*l, d, "HeadDim=%d", d)
		assert.LessOrEqual(t, l, 32, "HeadDim=%d", d)
	}
}

func TestPlanQKVErrors(t *testing.T) {
	ok := QKVShape{NumTokens: 16, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, RotDim: 128, DType: F16, CacheDType: F16}
	tests := []struct {
		name  string
		edit  func(a *QKVShape)
		error string
	}{
		{"negative tokens", func(a *QKVShape) { a.NumTokens = -1 }, "dispatch: QKVShape.NumTokens=-1 is out of range; allowed: 0..2147483647"},
		{"no q heads", func(a *QKVShape) { a.NumQHeads = 0 }, "dispatch: QKVShape.NumQHeads=0 is out of range; allowed: 1..65536"},
		{"no kv heads", func(a *QKVShape) { a.NumKVHeads = 0 }, "dispatch: QKVShape.NumKVHeads=0 is out of range; allowed: 1..65536"},
		{"head dim 8", func(a *QKVShape) { a.HeadDim = 8 }, "dispatch: QKVShape.HeadDim=8 is not supported; supported: a multiple of 8 from 16 to 256"},
		{"head dim 100", func(a *QKVShape) { a.HeadDim = 100 }, "dispatch: QKVShape.HeadDim=100 is not supported; supported: a multiple of 8 from 16 to 256"},
		{"head dim 264", func(a *QKVShape) { a.HeadDim = 264 }, "dispatch: QKVShape.HeadDim=264 is not supported; supported: a multiple of 8 from 16 to 256"},
		{"head dim 512", func(a *QKVShape) { a.HeadDim = 512 }, "dispatch: QKVShape.HeadDim=512 is not supported; supported: a multiple of 8 from 16 to 256"},
		{"input fp8", func(a *QKVShape) { a.DType = E4M3; a.CacheDType = E4M3 }, "dispatch: QKVShape.DType=e4m3 is not supported; supported: f16, bf16"},
		{"cache mismatch", func(a *QKVShape) { a.CacheDType = BF16 }, "dispatch: QKVShape.CacheDType=bf16 is not supported with DType=f16; supported: f16, e4m3"},
		{"rot dim 32", func(a *QKVShape) { a.RotDim = 32 }, "dispatch: QKVShape.RotDim=32 is not allowed; allowed: HeadDim=128 or HeadDim/2=64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ok
			tt.edit(&a)
			_, err := PlanQKV(a, hopper)
			assert.EqualError(t, err, tt.error)
			assert.ErrorIs(t, err, ErrInvalidShape)
		})
	}
	_, err := PlanQKV(ok, DeviceFacts{Name: "none"})
	assert.EqualError(t, err, "dispatch: DeviceFacts.SMs=0 is out of range; allowed: 1 or more")
}

// TestPlanQKVValues checks when V into a laid cache takes its own launch:
// from QKVValuesMinTokens tokens a sequence on average, never for the flash
// layout; the first launch then holds the q and K heads only, and the
// values launch has an append's geometry with the qkv_values kernel.
func TestPlanQKVValues(t *testing.T) {
	base := QKVShape{NumQHeads: 32, NumKVHeads: 16, HeadDim: 128, RotDim: 64, DType: BF16, CacheDType: E4M3}
	for _, tt := range []struct {
		tokens, seqs int
		laid, values bool
	}{
		{4096, 1, true, true}, {4096, 0, true, true}, {4096, 1, false, false},
		{16 * 64, 64, true, true}, {16*64 - 1, 64, true, false}, {64, 64, true, false}, {15, 1, true, false},
	} {
		a := base
		a.NumTokens, a.NumSeqs = tt.tokens, tt.seqs
		if tt.laid {
			a.Layout = LayoutXSplit // BlockSize 0: no page tiles
		}
		p, err := PlanQKV(a, hopper)
		require.NoError(t, err)
		if !tt.values {
			assert.Empty(t, p.Values.Kernel, "%+v", tt)
			assert.Equal(t, Dim3{128, 1, 1}, p.Block, "%+v: 64 heads of 8 units", tt)
			continue
		}
		assert.Equal(t, Dim3{96, 1, 1}, p.Block, "%+v: 48 heads of 8 units, V left out", tt)
		rows, err := planRows(AppendShape{NumTokens: tt.tokens, NumKVHeads: 16, HeadDim: 128}, "qkv_values_bf16_e4m3", AppendGroupTokens)
		require.NoError(t, err)
		assert.Equal(t, rows.Launch, p.Values, "%+v", tt)
		assert.Contains(t, p.String(), "; after qkv_values_bf16_e4m3 grid(")
	}
}

// TestPlanQKVTiles checks when a prefill into the x-split and shuffle layouts
// runs a _tile kernel for q and K, and its chunk: the most of 16, 8, 4, 2
// slots that divides the block size and whose K tile fits QKVTileBytesMax;
// never for the flash or HND layouts, decode steps, pages of one slot,
// blocks of more than QKVTileMaxThreads threads, or where two stages and
// the tile do not fit the device. V always goes by qkv_values, and the
// kernel's shared memory holds the tile.
func TestPlanQKVTiles(t *testing.T) {
	small := DeviceFacts{Name: "small", SMs: 10, MaxSharedPerBlockOptin: 40 << 10}
	for _, tt := range []struct {
		name      string
		edit      func(a *QKVShape)
		dev       DeviceFacts
		kernel    string
		tile      int
		tileBytes int
	}{
		{"x-split", func(a *QKVShape) {}, hopper, "qkv_norm_rope_f16_tile", 8, 8 * 8 * 128 * 2},
		{"shuffle", func(a *QKVShape) { a.Layout = LayoutShuffle }, hopper, "qkv_norm_rope_f16_tile", 8, 8 * 8 * 128 * 2},
		{"4 KV heads: 16 slots", func(a *QKVShape) { a.NumKVHeads = 4 }, hopper, "qkv_norm_rope_f16_tile", 16, 16 * 4 * 128 * 2},
		{"pages of 4", func(a *QKVShape) { a.BlockSize = 4 }, hopper, "qkv_norm_rope_f16_tile", 4, 4 * 8 * 128 * 2},
		{"pages of 2", func(a *QKVShape) { a.BlockSize = 2 }, hopper, "qkv_norm_rope_f16_tile", 2, 2 * 8 * 128 * 2},
		{"pages of 256", func(a *QKVShape) { a.BlockSize = 256 }, hopper, "qkv_norm_rope_f16_tile", 8, 8 * 8 * 128 * 2},
		{"fp8", func(a *QKVShape) { a.CacheDType = E4M3 }, hopper, "qkv_norm_rope_f16_e4m3_tile", 16, 16 * 8 * 128},
		{"head dim 120", func(a *QKVShape) { a.HeadDim, a.RotDim = 120, 60 }, hopper, "qkv_norm_rope_f16_split_tile", 8, 8 * 8 * 120 * 2},
		{"16 KV heads of 256: 2 slots", func(a *QKVShape) { a.NumKVHeads, a.NumQHeads, a.HeadDim, a.RotDim = 16, 16, 256, 128 }, hopper, "qkv_norm_rope_f16_tile", 2, 2 * 16 * 256 * 2},
		{"192 threads", func(a *QKVShape) { a.NumKVHeads, a.NumQHeads, a.HeadDim, a.RotDim = 16, 32, 256, 128 }, hopper, "qkv_norm_rope_f16", 0, 0},
		{"pages of 1", func(a *QKVShape) { a.BlockSize = 1 }, hopper, "qkv_norm_rope_f16", 0, 0},
		{"flash", func(a *QKVShape) { a.Layout = LayoutFlash }, hopper, "qkv_norm_rope_f16", 0, 0},
		{"HND", func(a *QKVShape) { a.Layout = LayoutHND }, hopper, "qkv_norm_rope_f16", 0, 0},
		{"decode steps", func(a *QKVShape) { a.NumSeqs = a.NumTokens }, hopper, "qkv_norm_rope_f16", 0, 0},
		{"small device", func(a *QKVShape) {}, small, "qkv_norm_rope_f16", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := QKVShape{NumTokens: 4096, NumSeqs: 2, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, RotDim: 64, DType: F16, CacheDType: F16,
				Layout: LayoutXSplit, BlockSize: 16}
			tt.edit(&a)
			p, err := PlanQKV(a, tt.dev)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, tt.tile, p.TileTokens)
			assert.LessOrEqual(t, int(p.SharedBytes), KernelSharedBytes(p.Kernel, tt.dev.MaxSharedPerBlockOptin))
			heads := a.NumQHeads + a.NumKVHeads
			if !a.Layout.Laid() || a.NumSeqs == a.NumTokens {
				heads += a.NumKVHeads
				assert.Empty(t, p.Values.Kernel)
			} else {
				assert.NotEmpty(t, p.Values.Kernel, "V goes by qkv_values")
			}
			threads, perBlock, stage := qkvGeometry(heads, &a)
			assert.Equal(t, Dim3{uint32(threads), uint32(perBlock), 1}, p.Block)
			if tt.tile == 0 {
				assert.NotContains(t, p.String(), "tiles")
				return
			}
			assert.LessOrEqual(t, threads*perBlock, QKVTileMaxThreads)
			assert.Equal(t, qkvStages*stage+tt.tileBytes, int(p.SharedBytes))
			assert.Contains(t, p.String(), fmt.Sprintf("; tiles of %d slots", tt.tile))
		})
	}
}

// TestPlanRopeValues checks when RopeCache writes V by a launch of its own:
// into the x-split and shuffle layouts only, from RopeValuesMinTokens tokens
// without host slots, and with them exactly when they come in runs.
func TestPlanRopeValues(t *testing.T) {
	for _, tt := range []struct {
		tokens                 int
		flash, host, runs, out bool
	}{
		{RopeValuesMinTokens, false, false, false, true}, {RopeValuesMinTokens - 1, false, false, false, false},
		{65536, true, false, false, false}, {65536, true, true, true, false},
		{16, false, true, true, true}, {65536, false, true, false, false},
	} {
		a := AppendShape{NumTokens: tt.tokens, NumKVHeads: 8, HeadDim: 128, DType: F16, CacheDType: E4M3,
			Flash: tt.flash, HostSlots: tt.host, SlotRuns: tt.runs}
		p, err := PlanRope(a)
		require.NoError(t, err)
		assert.Equal(t, "rope_cache_f16_e4m3", p.Kernel, "%+v", tt)
		assert.Equal(t, Dim3{uint32(tt.tokens), 1, 1}, p.Grid, "%+v", tt)
		if !tt.out {
			assert.Empty(t, p.Values.Kernel, "%+v", tt)
			continue
		}
		rows, err := planRows(a, "rope_values_f16_e4m3", AppendGroupTokens)
		require.NoError(t, err)
		assert.Equal(t, rows.Launch, p.Values, "%+v", tt)
		assert.Contains(t, p.String(), "; after rope_values_f16_e4m3 grid(")
	}
}
