package dispatch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanString(t *testing.T) {
	tests := []struct {
		name string
		plan Plan
		want string
	}{
		{
			name: "global merge",
			plan: Plan{
				Kernel: "paged_decode_f16_hd128_g8", Grid: Dim3{8, 128, 4}, Block: Dim3{128, 1, 1}, SharedBytes: 66048,
				Splits: 4, RequestedSplits: 4, Counters: 1024, ScratchFloats: 41943040, Reason: ReasonFillSMs,
			},
			want: "paged_decode_f16_hd128_g8 grid(8,128,4) block 128 smem 66048 B, 4 splits (global merge, 41943040 scratch floats, 1024 counters): auto: split to fill SMs",
		},
		{
			name: "global merge clamped",
			plan: Plan{
				Kernel: "paged_decode_f16_hd128", Grid: Dim3{8, 1, 32}, Block: Dim3{128, 1, 1}, SharedBytes: 69632,
				Splits: 32, RequestedSplits: 100, Clamped: true, Counters: 8, ScratchFloats: 133120, Reason: ReasonForcedClamped,
			},
			want: "paged_decode_f16_hd128 grid(8,1,32) block 128 smem 69632 B, 32 splits (global merge, 133120 scratch floats, 8 counters; requested 100): forced split count clamped to the number of pages",
		},
		{
			name: "varlen after a decode",
			plan: Plan{
				Kernel: "paged_varlen_bf16_hd128", Grid: Dim3{34, 8, 1}, Block: Dim3{128, 1, 1}, SharedBytes: 65536,
				Splits: 1, RequestedSplits: 1, Reason: ReasonGridFills, DecodePrefix: 64,
			},
			want: "paged_varlen_bf16_hd128 grid(34,8,1) block 128 smem 65536 B, single-pass: auto: grid fills the GPU; after a decode of the first 64 sequences",
		},
		{
			name: "cluster",
			plan: Plan{
				Kernel: "paged_decode_f16_hd128_g8_cluster", Grid: Dim3{8, 8, 4}, Block: Dim3{128, 1, 1}, SharedBytes: 69632,
				Splits: 4, Cluster: 4, RequestedSplits: 4, Reason: ReasonClusterWave,
			},
			want: "paged_decode_f16_hd128_g8_cluster grid(8,8,4) block 128 smem 69632 B, 4 splits in clusters of 4: auto: clusters of splits, one wave",
		},
		{
			name: "cluster clamped",
			plan: Plan{
				Kernel: "paged_decode_bf16_hd64_cluster", Grid: Dim3{2, 1, 2}, Block: Dim3{128, 1, 1}, SharedBytes: 1024,
				Splits: 2, Cluster: 2, RequestedSplits: 5, Clamped: true, Reason: ReasonForcedRounded,
			},
			want: "paged_decode_bf16_hd64_cluster grid(2,1,2) block 128 smem 1024 B, 2 splits in clusters of 2 (requested 5): forced split count rounded to whole pages per split",
		},
		{
			name: "single-pass",
			plan: Plan{
				Kernel: "paged_decode_f16_hd128_g8", Grid: Dim3{8, 128, 1}, Block: Dim3{128, 1, 1}, SharedBytes: 102400,
				Splits: 1, RequestedSplits: 1, Reason: ReasonGridFills,
			},
			want: "paged_decode_f16_hd128_g8 grid(8,128,1) block 128 smem 102400 B, single-pass: auto: grid fills the GPU",
		},
		{
			name: "single-pass clamped by the scratch limit",
			plan: Plan{
				Kernel: "paged_decode_f16_hd128", Grid: Dim3{8, 1, 1}, Block: Dim3{128, 1, 1}, SharedBytes: 69632,
				Splits: 1, RequestedSplits: 4, Clamped: true, Reason: ReasonScratchLimit,
			},
			want: "paged_decode_f16_hd128 grid(8,1,1) block 128 smem 69632 B, single-pass (requested 4): auto: scratch limit reduced splits",
		},
		{
			name: "no split decision",
			plan: Plan{Kernel: "cache_append_f16", Grid: Dim3{2, 1, 1}, Block: Dim3{128, 1, 1}, Splits: 1, RequestedSplits: 1},
			want: "cache_append_f16 grid(2,1,1) block 128 smem 0 B",
		},
		{
			name: "two-dimensional block",
			plan: Plan{
				Kernel: "qkv_norm_rope_f16", Grid: Dim3{7, 1, 1}, Block: Dim3{96, 4, 1}, SharedBytes: 39984,
				Splits: 1, RequestedSplits: 1,
			},
			want: "qkv_norm_rope_f16 grid(7,1,1) block(96,4,1) smem 39984 B",
		},
		{
			name: "zero plan",
			want: " grid(0,0,0) block(0,0,0) smem 0 B",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.plan.String())
		})
	}
}

// TestPlanStringOfPlans checks String on what the planner returns: one line
// naming the kernel and ending in the reason, whichever split path was taken
// (the split counts themselves are pinned by TestPlanDecodeSplits and
// TestPlanDecodeClusters).
func TestPlanStringOfPlans(t *testing.T) {
	tests := []struct {
		name  string
		dev   DeviceFacts
		shape DecodeShape
		knobs Knobs
		mode  string // what String says about the splits
	}{
		{"global merge", hopper, llama(1, 512), knobs(nil), "splits (global merge, "},
		{"cluster", h200(), llama(1, 512), knobs(nil), "splits in clusters of "},
		{"single-pass", hopper, llama(1, 512), knobs(func(k *Knobs) { k.PagedFlash = false }), ", single-pass"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanDecode(tt.shape, tt.dev, tt.knobs)
			require.NoError(t, err)
			s := p.String()
			assert.True(t, strings.HasPrefix(s, p.Kernel+" grid("), s)
			assert.True(t, strings.HasSuffix(s, ": "+p.Reason), s)
			assert.Contains(t, s, tt.mode)
			assert.NotContains(t, s, "\n")
		})
	}
}

func TestPlanStringBalanced(t *testing.T) {
	p := Plan{Kernel: "paged_decode_f16_hd128_g8", Grid: Dim3{8, 524, 1}, Block: Dim3{128, 1, 1}, SharedBytes: 69632,
		Splits: 64, ScratchFloats: 100, Counters: 1024, BalanceMinPages: 16, Reason: ReasonBalancedRagged}
	assert.Equal(t, "paged_decode_f16_hd128_g8 grid(8,524,1) block 128 smem 69632 B, balanced: 524 work items, up to 64 splits of ≥ 16 pages per sequence (100 scratch floats, 1024 counters): "+ReasonBalancedRagged, p.String())
}
