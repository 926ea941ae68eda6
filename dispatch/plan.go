package dispatch

import "fmt"

// The plans. Each op family has one plan type: DecodePlan (PlanDecode),
// VarlenPlan (PlanVarlen) and TokenPlan (the token-parallel ops: cache
// writes, gathers, RoPE, QKV, conversions). Each embeds the Launch it
// makes; the attention plans embed their SplitK decision too. The launcher
// follows a plan to the letter.

// Launch is one kernel launch: entry name, grid, block and dynamic shared
// memory.
type Launch struct {
	Kernel      string // kernel entry name
	Grid, Block Dim3
	SharedBytes uint32 // dynamic shared memory of the launch
}

// SplitK is an attention plan's split of the KV and the split-K scratch it
// needs.
type SplitK struct {
	Splits int // 1 = single-pass, no merge and no scratch

	// Counters is the number of uint32 split counters the fused merge needs
	// ([NumSeqs, NumKVHeads], zero before the launch; the kernel leaves them
	// zero); 0 when the merge needs none.
	Counters int64

	// ScratchFloats is the f32 scratch the split-K path needs (0 when
	// Splits == 1): partial outputs at PartialOutOffset, running maxima at
	// MaxOffset, running sums at SumOffset, one row per query row, head and
	// split (see the plan types for their shapes). Offsets count floats from
	// the start of the scratch.
	ScratchFloats                          int64
	PartialOutOffset, MaxOffset, SumOffset int64

	// RequestedSplits is the split count asked for (the forced count, or the
	// heuristic's choice) before it was clamped to the pages and the scratch
	// limit; Clamped reports Splits != RequestedSplits.
	RequestedSplits int
	Clamped         bool
	Reason          string // one of the Reason constants
}

// WorkspaceFloatsOffset is where a caller's workspace holds the plan's f32
// scratch: after its counters (uint32), rounded up to 256 bytes.
func (p *SplitK) WorkspaceFloatsOffset() int64 { return (p.Counters*4 + 255) / 256 * 256 }

// WorkspaceBytes is the size of a caller's workspace for the plan: its
// counters, then its f32 scratch (0 for a plan that needs none).
func (p *SplitK) WorkspaceBytes() int64 {
	if p.ScratchFloats == 0 {
		return 0
	}
	return p.WorkspaceFloatsOffset() + p.ScratchFloats*4
}

// single returns the SplitK of a single-pass plan that made no split
// decision.
func single() SplitK { return SplitK{Splits: 1, RequestedSplits: 1} }

// describe returns the launch as String's plans begin: kernel, grid, block
// (block(x,y,z) when it has more than one dimension), dynamic shared memory.
func (l *Launch) describe() string {
	block := fmt.Sprintf(" %d", l.Block.X)
	if l.Block.Y != 1 || l.Block.Z != 1 {
		block = fmt.Sprintf("(%d,%d,%d)", l.Block.X, l.Block.Y, l.Block.Z)
	}
	return fmt.Sprintf("%s grid(%d,%d,%d) block%s smem %d B", l.Kernel, l.Grid.X, l.Grid.Y, l.Grid.Z, block, l.SharedBytes)
}

// requested returns "requested N" for a clamped split count, else "".
func (p *SplitK) requested() string {
	if !p.Clamped {
		return ""
	}
	return fmt.Sprintf("requested %d", p.RequestedSplits)
}

// describe returns the split of a plan that is neither balanced nor a
// cluster, then its reason: ", single-pass", or ", N splits (global merge,
// …)".
func (p *SplitK) describe() string {
	var s string
	if p.Splits <= 1 {
		s = ", single-pass" + parenthesized(p.requested())
	} else {
		r := p.requested()
		if r != "" {
			r = "; " + r
		}
		s = fmt.Sprintf(", %d splits (global merge, %d scratch floats, %d counters%s)", p.Splits, p.ScratchFloats, p.Counters, r)
	}
	return s + p.reason()
}

// reason returns ": Reason", or "" when there is none.
func (p *SplitK) reason() string {
	if p.Reason == "" {
		return ""
	}
	return ": " + p.Reason
}

// parenthesized returns " (s)", or "" for an empty s.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// TokenPlan is what the launcher does for a token-parallel op (cache
// writes, gathers, RoPE, QKV, conversions): one launch, after a claim
// launch where Claim names one, or after a values launch where Values has
// a kernel.
type TokenPlan struct {
	Launch
	// Claim names the append page path's first launch (see
	// AppendPagesMinCover): one thread per token, blocks of AppendThreads,
	// before Kernel; "" for one launch.
	Claim string
	// Values is the V launch of QKVNormRope and RopeCache into the x-split
	// and shuffle layouts (see QKVValuesMinTokens, RopeValuesMinTokens): V
	// written as an append writes it, before Kernel writes q and K; Kernel
	// "" for none.
	Values Launch
	// TileTokens is the chunk of a QKVNormRope page-tile kernel (the
	// kernel's tile_tokens: 2 to 16 slots of a page staged in shared memory
	// and written whole; see QKVTileTokens), 0 for the others.
	TileTokens int
}
