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
// A split count that was clamped adds "requested N". String is for logs and
// tests, not for parsing.
func (p DecodePlan) String() string {
	s := p.Launch.describe()
	switch {
	case p.Balanced():
		return s + fmt.Sprintf(", balanced: %d work items, up to %d splits of ≥ %d pages per sequence (%d scratch floats, %d counters)",
			p.Grid.Y, p.Splits, p.BalanceMinPages, p.ScratchFloats, p.Counters) + p.reason()
	case p.Cluster > 0:
		return s + fmt.Sprintf(", %d splits in clusters of %d", p.Splits, p.Cluster) + parenthesized(p.SplitK.requested()) + p.reason()
	}
	return s + p.SplitK.describe()
}

// String describes the plan on one line as DecodePlan's String does (a
// split count the model chose adds how each row tile splits); a plan for
// the rest of a mixed batch (DecodePrefix) ends "; after a decode of the
// first N sequences", and one without a rest says that a decode runs it all.
func (p VarlenPlan) String() string {
	if p.Kernel == "" && p.DecodePrefix > 0 {
		return fmt.Sprintf("a decode of all %d sequences (one query token each), no varlen launch", p.DecodePrefix)
	}
	s := p.Launch.describe()
	if p.Cluster > 0 {
		s += fmt.Sprintf(", %d splits in clusters of %d", p.Splits, p.Cluster) + parenthesized(p.SplitK.requested()) + p.reason()
	} else {
		s += p.SplitK.describe()
	}
	if p.SplitWave > 0 && p.Splits > 1 {
		s += fmt.Sprintf("; each row tile takes up to %d splits by its KV range (%d blocks a split, waves of %d)", p.Splits, p.SplitBlocks, p.SplitWave)
	}
	if p.DecodePrefix > 0 {
		s += fmt.Sprintf("; after a decode of the first %d sequences", p.DecodePrefix)
	}
	if p.TensorCores != "" {
		s += "; " + p.TensorCores
	}
	return s
}

// String describes the plan on one line: kernel, grid, block, dynamic shared
// memory, and for a plan with a claim launch (Claim) "; after <claim> (one
// thread per token)", with a values launch "; after <values launch> (V)",
// with page tiles "; tiles of N slots".
func (p TokenPlan) String() string {
	s := p.Launch.describe()
	if p.TileTokens > 0 {
		s += fmt.Sprintf("; tiles of %d slots", p.TileTokens)
	}
	if p.Claim != "" {
		s += "; after " + p.Claim + " (one thread per token)"
	}
	if p.Values.Kernel != "" {
		s += "; after " + p.Values.describe() + " (V)"
	}
	return s
}
