package dispatch

import (
	"fmt"
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
	}{
		// 48 heads · 8 units = 384 units / 4 = 96 threads, one token per block.
		{QKVShape{NumTokens: 65536, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, In: F16, Cache: F16}, "qkv_norm_rope_f16", 65536, Dim3{96, 1, 1}},
		// 24 · 8 = 192 units → 48 threads → 64; 2 tokens per block, 7 → 4 blocks.
		{QKVShape{NumTokens: 7, NumQHeads: 16, NumKVHeads: 4, HeadDim: 128, In: BF16, Cache: E4M3}, "qkv_norm_rope_bf16_e4m3", 4, Dim3{64, 2, 1}},
		// 4 · 4 = 16 units → 4 threads → one warp; 4 tokens per block, 10 → 3 blocks.
		{QKVShape{NumTokens: 10, NumQHeads: 2, NumKVHeads: 1, HeadDim: 64, In: F16, Cache: E4M3}, "qkv_norm_rope_f16_e4m3", 3, Dim3{32, 4, 1}},
		// 3 heads of one unit each.
		{QKVShape{NumTokens: 5, NumQHeads: 1, NumKVHeads: 1, HeadDim: 16, In: BF16, Cache: BF16}, "qkv_norm_rope_bf16", 2, Dim3{32, 4, 1}},
		// 80 · 16 = 1280 units: 256 threads, two passes.
		{QKVShape{NumTokens: 3, NumQHeads: 64, NumKVHeads: 8, HeadDim: 256, In: F16, Cache: F16}, "qkv_norm_rope_f16", 3, Dim3{256, 1, 1}},
		// 40 · 8 = 320 units → 80 threads → 96.
		{QKVShape{NumTokens: 1, NumQHeads: 32, NumKVHeads: 4, HeadDim: 128, In: F16, Cache: F16}, "qkv_norm_rope_f16", 1, Dim3{96, 1, 1}},
		{QKVShape{NumTokens: 0, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, In: F16, Cache: F16}, "qkv_norm_rope_f16", 0, Dim3{96, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.shape), func(t *testing.T) {
			p, err := PlanQKV(tt.shape)
			require.NoError(t, err)
			assert.Equal(t, tt.kernel, p.Kernel)
			assert.Equal(t, Dim3{tt.grid, 1, 1}, p.Grid)
			assert.Equal(t, tt.block, p.Block)
			assert.Zero(t, p.SharedBytes)
			assert.Equal(t, 1, p.Splits)
		})
	}
}

// TestPlanQKVGeometry checks what the kernel relies on and what the plan
// promises, over a sweep of shapes: whole warps per token, at most
// QKVMaxThreads per block, every token covered, and at most
// QKVUnitsPerThread units per thread unless the token already has the most
// threads.
func TestPlanQKVGeometry(t *testing.T) {
	for _, hd := range []int{16, 32, 64, 128, 256} {
		for _, kv := range []int{1, 2, 3, 8, 16} {
			for _, group := range []int{1, 2, 4, 7, 8} {
				for _, tokens := range []int{0, 1, 3, 4, 5, 1000} {
					s := QKVShape{NumTokens: tokens, NumQHeads: kv * group, NumKVHeads: kv, HeadDim: hd, In: F16, Cache: F16}
					p, err := PlanQKV(s)
					require.NoError(t, err)
					units := int(s.NumQHeads+2*s.NumKVHeads) * hd / 16
					x, y := int(p.Block.X), int(p.Block.Y)
					assert.Zero(t, x%32, "%+v: %d threads per token", s, x)
					assert.LessOrEqual(t, x*y, QKVMaxThreads, "%+v", s)
					assert.GreaterOrEqual(t, int(p.Grid.X)*y, tokens, "%+v", s)
					assert.Less(t, (int(p.Grid.X)-1)*y, max(tokens, 1), "%+v: an empty block", s)
					if x < QKVMaxThreads {
						assert.GreaterOrEqual(t, x*QKVUnitsPerThread, units, "%+v", s)
						assert.Less(t, (x-32)*QKVUnitsPerThread, units, "%+v: a warp too many", s)
					}
				}
			}
		}
	}
}

func TestPlanQKVErrors(t *testing.T) {
	ok := QKVShape{NumTokens: 16, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, In: F16, Cache: F16}
	tests := []struct {
		name  string
		edit  func(a *QKVShape)
		error string
	}{
		{"negative tokens", func(a *QKVShape) { a.NumTokens = -1 }, "dispatch: QKVShape.NumTokens=-1 is out of range; allowed: 0..2147483647"},
		{"no q heads", func(a *QKVShape) { a.NumQHeads = 0 }, "dispatch: QKVShape.NumQHeads=0 is out of range; allowed: 1..65536"},
		{"no kv heads", func(a *QKVShape) { a.NumKVHeads = 0 }, "dispatch: QKVShape.NumKVHeads=0 is out of range; allowed: 1..65536"},
		{"head dim 8", func(a *QKVShape) { a.HeadDim = 8 }, "dispatch: QKVShape.HeadDim=8 is not supported; supported: a power of two from 16 to 256"},
		{"head dim 96", func(a *QKVShape) { a.HeadDim = 96 }, "dispatch: QKVShape.HeadDim=96 is not supported; supported: a power of two from 16 to 256"},
		{"head dim 512", func(a *QKVShape) { a.HeadDim = 512 }, "dispatch: QKVShape.HeadDim=512 is not supported; supported: a power of two from 16 to 256"},
		{"input fp8", func(a *QKVShape) { a.In = E4M3; a.Cache = E4M3 }, "dispatch: QKVShape.In=e4m3 is not supported; supported: f16, bf16"},
		{"cache mismatch", func(a *QKVShape) { a.Cache = BF16 }, "dispatch: QKVShape.Cache=bf16 is not supported with In=f16; supported: f16, e4m3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ok
			tt.edit(&a)
			_, err := PlanQKV(a)
			assert.EqualError(t, err, tt.error)
			assert.ErrorIs(t, err, ErrInvalidShape)
		})
	}
}
