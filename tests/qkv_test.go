package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

func TestQKVNormRopeMatchesReference(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	shapes := []check.QKVShape{
		{Seqs: 1, MaxLen: 100, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, NeoX: true, HalfRot: true},
		{Seqs: 4, MaxLen: 40, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Varlen: true, PadToken: 8, QKVOffset: 32, QOutOffset: 16},
		{Seqs: 3, MaxLen: 20, QHeads: 4, KVHeads: 4, HeadDim: 256, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, Varlen: true},
		// Several tokens per block (one warp per token), token counts that
		// leave the last block part empty.
		{Seqs: 1, MaxLen: 37, QHeads: 2, KVHeads: 1, HeadDim: 64, BlockSize: 4, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, HalfRot: true},
		{Seqs: 2, MaxLen: 11, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Norm: true, Varlen: true, HalfRot: true},
		// Many short sequences: the warp's search over cu_seqlens takes
		// several steps.
		{Seqs: 300, MaxLen: 3, QHeads: 4, KVHeads: 1, HeadDim: 32, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, Varlen: true},
		{Seqs: 1000, MaxLen: 2, QHeads: 2, KVHeads: 1, HeadDim: 16, BlockSize: 128, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, Varlen: true, HalfRot: true},
		// Head boundaries inside a warp: q, k and v heads of one token share
		// warps (5 heads of 8 units).
		{Seqs: 2, MaxLen: 30, QHeads: 3, KVHeads: 1, HeadDim: 128, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Norm: true, NeoX: true, Varlen: true},
		// head_dim 16: one unit per head, no shuffles; GPT-J, pairs.
		{Seqs: 1, MaxLen: 50, QHeads: 8, KVHeads: 2, HeadDim: 16, BlockSize: 2, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, HalfRot: true},
		// More units than one pass holds: 80 heads of 16 units, two passes.
		{Seqs: 2, MaxLen: 6, QHeads: 64, KVHeads: 8, HeadDim: 256, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, NeoX: true, Varlen: true},
		{Seqs: 1, MaxLen: 5, QHeads: 128, KVHeads: 16, HeadDim: 128, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, HalfRot: true},
		// Cos/sin not 16-byte aligned: the scalar path.
		{Seqs: 3, MaxLen: 25, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, Varlen: true, TableOffset: 4},
		{Seqs: 1, MaxLen: 25, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, HalfRot: true, TableOffset: 8},
		// Enough tokens that each block takes a run of several token groups
		// through its ring (more than 8 blocks per SM's worth): sequence
		// boundaries inside runs, two passes per token, the scalar cos/sin
		// path.
		{Seqs: 3, MaxLen: 6000, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, HalfRot: true, Varlen: true},
		{Seqs: 2, MaxLen: 1500, QHeads: 128, KVHeads: 16, HeadDim: 128, BlockSize: 8, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Norm: true, Varlen: true},
		{Seqs: 1, MaxLen: 9000, QHeads: 4, KVHeads: 1, HeadDim: 64, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, TableOffset: 4},
		// The x-split and shuffle layouts (K by x-groups, V token-minor),
		// 16-bit and fp8 (x = 16), one sequence and varlen.
		{Seqs: 3, MaxLen: 300, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, NeoX: true, Varlen: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 1, MaxLen: 70, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, HalfRot: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 4, MaxLen: 90, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Norm: true, Varlen: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 2, MaxLen: 40, QHeads: 4, KVHeads: 2, HeadDim: 256, BlockSize: 1, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, NeoX: true, Varlen: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 1, MaxLen: 2000, QHeads: 8, KVHeads: 8, HeadDim: 16, BlockSize: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, HalfRot: true, Layout: pagedkv.LayoutXSplit},
		// The HND layout (the flash layout's token path, heads a page apart).
		{Seqs: 3, MaxLen: 300, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, NeoX: true, Varlen: true, Layout: pagedkv.LayoutHND},
		{Seqs: 2, MaxLen: 90, QHeads: 12, KVHeads: 4, HeadDim: 72, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, HalfRot: true, Varlen: true, Layout: pagedkv.LayoutHND},
		// Prefills whose V goes through the values launch (16 or more tokens
		// a sequence): aligned ones, whose pages are whole runs (shared-memory
		// tiles for 16-bit caches and power-of-two head dims, the lane-pair
		// path otherwise), and ones at random offsets, whose runs start
		// anywhere (8-row runs, single rows at their edges); a sequence
		// boundary inside a token group; pages of 8 and 32 rows.
		{Seqs: 1, MaxLen: 500, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, HalfRot: true, Aligned: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 3, MaxLen: 200, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 4, MaxLen: 150, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, NeoX: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 2, MaxLen: 300, QHeads: 8, KVHeads: 4, HeadDim: 256, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Norm: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 2, MaxLen: 300, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, HalfRot: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 3, MaxLen: 120, QHeads: 8, KVHeads: 2, HeadDim: 96, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, NeoX: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 5, MaxLen: 400, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, Varlen: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 5, MaxLen: 400, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, NeoX: true, HalfRot: true, Varlen: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 4, MaxLen: 400, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Norm: true, Varlen: true, Layout: pagedkv.LayoutXSplit},
		// Prefills through the page tiles (dispatch.QKVTileTokens, K
		// staged, V by qkv_values): chunks of 4 and 8 slots (16 KV heads;
		// fp8 in pages of 8), the _split kernel's tile, and several tokens
		// per block, whose token groups straddle chunks at random offsets
		// (those tokens are written directly).
		{Seqs: 2, MaxLen: 300, QHeads: 32, KVHeads: 16, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, Varlen: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 2, MaxLen: 300, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 8, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Norm: true, Varlen: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 3, MaxLen: 200, QHeads: 8, KVHeads: 2, HeadDim: 120, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, NeoX: true, HalfRot: true, Varlen: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 3, MaxLen: 200, QHeads: 2, KVHeads: 1, HeadDim: 64, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, Varlen: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 1, MaxLen: 700, QHeads: 4, KVHeads: 2, HeadDim: 32, BlockSize: 64, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, HalfRot: true, Layout: pagedkv.LayoutXSplit},
	}
	for range 12 {
		shapes = append(shapes, check.RandomQKVShape(g))
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			require.NoError(t, check.RunQKV(r, r.Stream(), g, c))
		})
	}
}

// TestQKVNormRopeHeadDims covers the head dims that are not powers of two
// in both styles and table widths, with and without the norm: those whose
// halves are whole 16-byte pieces (80, 96, 112, 192: idle lanes in each
// head's group) and those whose halves are not (24, 120: the _split
// kernels), through every layout and f16, bf16 and fp8 caches where the
// layout allows them, one sequence and varlen.
func TestQKVNormRopeHeadDims(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	layouts := []pagedkv.CacheLayout{pagedkv.LayoutFlash, pagedkv.LayoutXSplit, pagedkv.LayoutShuffle, pagedkv.LayoutHND}
	i := 0
	for _, d := range []int{24, 80, 96, 112, 120, 192} {
		for _, neox := range []bool{true, false} {
			for _, halfRot := range []bool{true, false} {
				c := check.QKVShape{Seqs: 1 + 2*(i%2), MaxLen: 45, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 16,
					DType: []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[i%2], Norm: i%3 != 1, NeoX: neox, HalfRot: halfRot,
					Varlen: i%2 == 1, Layout: layouts[i/2%4]}
				c.CacheDType = c.DType
				if i%3 == 2 && (!c.Layout.Laid() || d%16 == 0) {
					c.CacheDType = pagedkv.E4M3
				}
				i++
				t.Run(c.String(), func(t *testing.T) {
					require.NoError(t, check.RunQKV(r, r.Stream(), g, c))
				})
			}
		}
	}
}

// TestQKVNormRopeFaults checks the fault record and what is (not) written
// for a position outside the cos/sin table (nothing of those tokens) and a
// block id outside the pool (q_out, but no cache rows), with and without the
// checking mode.
func TestQKVNormRopeFaults(t *testing.T) {
	shapes := []check.QKVShape{
		{Seqs: 3, MaxLen: 20, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 4, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, HalfRot: true, Varlen: true, Fault: check.QKVPositionFault},
		{Seqs: 1, MaxLen: 20, QHeads: 2, KVHeads: 1, HeadDim: 64, BlockSize: 4, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Norm: true, Fault: check.QKVPositionFault},
		{Seqs: 3, MaxLen: 20, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 4, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Norm: true, NeoX: true, Varlen: true, Fault: check.QKVBlockFault},
		{Seqs: 40, MaxLen: 4, QHeads: 4, KVHeads: 4, HeadDim: 32, BlockSize: 2, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, HalfRot: true, Varlen: true, Fault: check.QKVBlockFault},
		// Long runs per block, with the bad sequence inside them.
		{Seqs: 3, MaxLen: 5000, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, NeoX: true, Varlen: true, Fault: check.QKVPositionFault},
		{Seqs: 3, MaxLen: 5000, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, HalfRot: true, Varlen: true, Fault: check.QKVBlockFault},
		// A bad block in the x-split and shuffle layouts: no byte of the
		// pool outside the good rows changes.
		{Seqs: 3, MaxLen: 60, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, Varlen: true, Layout: pagedkv.LayoutXSplit, Fault: check.QKVBlockFault},
		{Seqs: 2, MaxLen: 60, QHeads: 4, KVHeads: 1, HeadDim: 64, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, NeoX: true, Varlen: true, Layout: pagedkv.LayoutShuffle, Fault: check.QKVBlockFault},
		// The same through the values launch (whole-page runs).
		{Seqs: 3, MaxLen: 200, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, Norm: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutXSplit, Fault: check.QKVBlockFault},
		{Seqs: 3, MaxLen: 200, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, NeoX: true, Varlen: true, Aligned: true, Layout: pagedkv.LayoutShuffle, Fault: check.QKVPositionFault},
	}
	for _, checking := range []bool{false, true} {
		t.Run(fmt.Sprintf("check=%v", checking), func(t *testing.T) {
			r := open(t, config.Options{CheckBounds: ptr(checking)})
			g := rng(t)
			for _, c := range shapes {
				t.Run(c.String(), func(t *testing.T) {
					require.NoError(t, check.RunQKV(r, r.Stream(), g, c))
				})
			}
		})
	}
}
