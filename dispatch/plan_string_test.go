package dispatch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanString(t *testing.T) {
	l := func(kernel string, grid Dim3, smem uint32) Launch {
		return Launch{Kernel: kernel, Grid: grid, Block: Dim3{128, 1, 1}, SharedBytes: smem}
	}
	tests := []struct {
		name string
		plan fmt.Stringer
		want string
	}{
		{
			name: "global merge",
			plan: DecodePlan{
				Launch: l("paged_decode_f16_hd128_g8", Dim3{8, 128, 4}, 66048),
				SplitK: SplitK{Splits: 4, RequestedSplits: 4, Counters: 1024, ScratchFloats: 41943040, Reason: ReasonFillSMs},
			},
			want: "paged_decode_f16_hd128_g8 grid(8,128,4) block 128 smem 66048 B, 4 splits (global merge, 41943040 scratch floats, 1024 counters): auto: split to fill SMs",
		},
		{
			name: "global merge clamped",
			plan: DecodePlan{
				Launch: l("paged_decode_f16_hd128", Dim3{8, 1, 32}, 69632),
				SplitK: SplitK{Splits: 32, RequestedSplits: 100, Clamped: true, Counters: 8, ScratchFloats: 133120, Reason: ReasonForcedClamped},
			},
			want: "paged_decode_f16_hd128 grid(8,1,32) block 128 smem 69632 B, 32 splits (global merge, 133120 scratch floats, 8 counters; requested 100): forced split count clamped to the number of pages",
		},
		{
			name: "varlen after a decode",
			plan: VarlenPlan{
				Launch:       l("paged_varlen_bf16_hd128", Dim3{34, 8, 1}, 65536),
				SplitK:       SplitK{Splits: 1, RequestedSplits: 1, Reason: ReasonGridFills},
				DecodePrefix: 64,
			},
			want: "paged_varlen_bf16_hd128 grid(34,8,1) block 128 smem 65536 B, single-pass: auto: grid fills the GPU; after a decode of the first 64 sequences",
		},
		{
			name: "varlen of decodes only",
			plan: VarlenPlan{DecodePrefix: 64},
			want: "a decode of all 64 sequences (one query token each), no varlen launch",
		},
		{
			name: "varlen split-K",
			plan: VarlenPlan{
				Launch: l("paged_varlen_bf16_hd128_k64", Dim3{2, 8, 6}, 65536),
				SplitK: SplitK{Splits: 6, RequestedSplits: 6, ScratchFloats: 4000, Reason: ReasonFillSMs},
			},
			want: "paged_varlen_bf16_hd128_k64 grid(2,8,6) block 128 smem 65536 B, 6 splits (global merge, 4000 scratch floats, 0 counters): auto: split to fill SMs",
		},
		{
			name: "cluster",
			plan: DecodePlan{
				Launch:  l("paged_decode_f16_hd128_g8_cluster", Dim3{8, 8, 4}, 69632),
				SplitK:  SplitK{Splits: 4, RequestedSplits: 4, Reason: ReasonClusterWave},
				Cluster: 4,
			},
			want: "paged_decode_f16_hd128_g8_cluster grid(8,8,4) block 128 smem 69632 B, 4 splits in clusters of 4: auto: clusters of splits, one wave",
		},
		{
			name: "cluster clamped",
			plan: DecodePlan{
				Launch:  l("paged_decode_bf16_hd64_cluster", Dim3{2, 1, 2}, 1024),
				SplitK:  SplitK{Splits: 2, RequestedSplits: 5, Clamped: true, Reason: ReasonForcedRounded},
				Cluster: 2,
			},
			want: "paged_decode_bf16_hd64_cluster grid(2,1,2) block 128 smem 1024 B, 2 splits in clusters of 2 (requested 5): forced split count rounded to whole pages per split",
		},
		{
			name: "single-pass",
			plan: DecodePlan{
				Launch: l("paged_decode_f16_hd128_g8", Dim3{8, 128, 1}, 102400),
				SplitK: SplitK{Splits: 1, RequestedSplits: 1, Reason: ReasonGridFills},
			},
			want: "paged_decode_f16_hd128_g8 grid(8,128,1) block 128 smem 102400 B, single-pass: auto: grid fills the GPU",
		},
		{
			name: "single-pass clamped by the scratch limit",
			plan: DecodePlan{
				Launch: l("paged_decode_f16_hd128", Dim3{8, 1, 1}, 69632),
				SplitK: SplitK{Splits: 1, RequestedSplits: 4, Clamped: true, Reason: ReasonScratchLimit},
			},
			want: "paged_decode_f16_hd128 grid(8,1,1) block 128 smem 69632 B, single-pass (requested 4): auto: scratch limit reduced splits",
		},
		{
			name: "balanced",
			plan: DecodePlan{
				Launch:          l("paged_decode_f16_hd128_g8", Dim3{8, 524, 1}, 69632),
				SplitK:          SplitK{Splits: 64, ScratchFloats: 100, Counters: 1024, Reason: ReasonBalancedRagged},
				BalanceMinPages: 16,
			},
			want: "paged_decode_f16_hd128_g8 grid(8,524,1) block 128 smem 69632 B, balanced: 524 work items, up to 64 splits of ≥ 16 pages per sequence (100 scratch floats, 1024 counters): " + ReasonBalancedRagged,
		},
		{
			name: "token plan",
			plan: TokenPlan{Launch: l("cache_append_f16", Dim3{2, 1, 1}, 0)},
			want: "cache_append_f16 grid(2,1,1) block 128 smem 0 B",
		},
		{
			name: "token plan with a claim",
			plan: TokenPlan{Launch: l("cache_append_pages_f16", Dim3{40, 1, 1}, 0), Claim: "cache_claim_f16"},
			want: "cache_append_pages_f16 grid(40,1,1) block 128 smem 0 B; after cache_claim_f16 (one thread per token)",
		},
		{
			name: "two-dimensional block",
			plan: TokenPlan{Launch: Launch{Kernel: "qkv_norm_rope_f16", Grid: Dim3{7, 1, 1}, Block: Dim3{96, 4, 1}, SharedBytes: 39984}},
			want: "qkv_norm_rope_f16 grid(7,1,1) block(96,4,1) smem 39984 B",
		},
		{
			name: "zero plan",
			plan: TokenPlan{},
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
