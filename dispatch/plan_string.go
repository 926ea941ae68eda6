package dispatch

import "fmt"

// String describes the plan on one line: kernel, grid, block, dynamic shared
// memory, then how the KV is split and why. For example
//
//	paged_decode_f16_hd128_g8 grid(8,1,4) block 128 smem 69632 B, 4 splits (global merge, 16640 scratch floats, 8 counters): auto: split to fill SMs
//	paged_decode_f16_hd128_g8_cluster grid(8,1,8) block 128 smem 69632 B, 8 splits in clusters of 8: auto: clusters of splits, one wave
//	paged_decode_f16_hd128_g8 grid(8,128,1) block 128 smem 102400 B, single-pass: auto: grid fills the GPU
//	paged_decode_f16_hd128_g8 grid(8,524,1) block 128 smem 69632 B, balanced: 524 work items, up to 64 splits of ≥ 16 pages per sequence (…): auto: ragged batch, …
//
// A split count that was clamped adds "requested N"; a varlen plan after a
// decode (DecodePrefix) ends "; after a decode of the first N sequences". A plan without a split
// decision (Splits ≤ 1 and no Reason: cache writes, RoPE, QKV) ends after the
// shared memory, and a block of more than one dimension prints as
// block(x,y,z). String is for logs and tests, not for parsing.
func (p Plan) String() string {
	block := fmt.Sprintf(" %d", p.Block.X)
	if p.Block.Y != 1 || p.Block.Z != 1 {
		block = fmt.Sprintf("(%d,%d,%d)", p.Block.X, p.Block.Y, p.Block.Z)
	}
	s := fmt.Sprintf("%s grid(%d,%d,%d) block%s smem %d B", p.Kernel, p.Grid.X, p.Grid.Y, p.Grid.Z, block, p.SharedBytes)
	prefix := ""
	if p.DecodePrefix > 0 {
		prefix = fmt.Sprintf("; after a decode of the first %d sequences", p.DecodePrefix)
	}
	if p.AppendClaim != "" {
		prefix = "; after " + p.AppendClaim + " (one thread per token)"
	}
	if p.Splits <= 1 && p.Reason == "" {
		return s + prefix
	}

	requested := ""
	if p.Clamped {
		requested = fmt.Sprintf("requested %d", p.RequestedSplits)
	}
	switch {
	case p.Balanced():
		s += fmt.Sprintf(", balanced: %d work items, up to %d splits of ≥ %d pages per sequence (%d scratch floats, %d counters)",
			p.Grid.Y, p.Splits, p.BalanceMinPages, p.ScratchFloats, p.Counters)
	case p.Splits <= 1:
		s += ", single-pass" + parenthesized(requested)
	case p.Cluster > 0:
		s += fmt.Sprintf(", %d splits in clusters of %d", p.Splits, p.Cluster) + parenthesized(requested)
	default:
		if requested != "" {
			requested = "; " + requested
		}
		s += fmt.Sprintf(", %d splits (global merge, %d scratch floats, %d counters%s)",
			p.Splits, p.ScratchFloats, p.Counters, requested)
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s + prefix
}

// parenthesized returns " (s)", or "" for an empty s.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
