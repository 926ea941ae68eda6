package dispatch

import "math"

// appendVector is how many elements one append thread moves per token (16
// bytes of f16).
const appendVector = 8

// AppendGroupTokens is how many consecutive tokens one append or gather
// thread moves (kGroupTokens in kernels_src/append.cuh): enough to transpose
// an 8×8 tile of a token-minor V page in registers, and to keep 16 loads in
// flight per thread in every layout. Groups come in pairs (16 tokens) on
// adjacent lanes, so the grid covers whole pairs.
const AppendGroupTokens = 8

// AppendShape describes one cache append launch: NumTokens new tokens' K and V
// written into the paged cache.
type AppendShape struct {
	NumTokens  int
	NumKVHeads int
	HeadDim    int
	DType      DType // dtype of the new K and V: F16 or BF16
	CacheDType DType // DType, or E4M3 for an fp8 cache
	// SM90: the device runs compute_90 modules (compute capability 9.0 and
	// newer), so an fp8 append takes its compute_90 build (cache_sm90),
	// which rounds to e4m3 in hardware; the result is the same bytes.
	SM90 bool
	// Flash: the cache is in the flash or the HND layout (a token's row of
	// a head is contiguous: !Layout.Laid()). An fp8 append there on a
	// compute_90 device moves AppendFlashFP8Tokens tokens per thread (every
	// token moves on its own in those layouts; the x-split and shuffle page
	// runs need AppendGroupTokens).
	Flash bool
	// BlockSize and NumSlots (NumBlocks·BlockSize) are the cache's; with
	// them a dense append into the x-split or shuffle layout takes the page
	// path (see AppendPagesMinCover). Zero keeps the token path.
	BlockSize int
	NumSlots  int64
	// SlotRuns: the host's copy of the slots says the tokens come in runs
	// of consecutive slots (a prefill's: almost every token takes the slot
	// after its predecessor's), which the token path writes in whole
	// sectors; such an append keeps the token path. HostSlots: the caller
	// passed the host's copy, so SlotRuns is known (PlanRope).
	SlotRuns, HostSlots bool
	// Path chooses between the token and the page path: AppendPathAuto
	// (the rule of AppendPagesMinCover) or one forced, for tests and
	// benchmarks. A forced page path still needs an eligible shape.
	Path AppendPath
}

// AppendPath is the path an append takes: token by token, or page by page.
type AppendPath int

// The append paths.
const (
	AppendPathAuto   AppendPath = iota // the planner's rule (AppendPagesMinCover, SlotRuns)
	AppendPathTokens                   // one thread per token
	AppendPathPages                    // claims, then one block per page, where eligible
)

// AppendPagesMinCover: an append into the x-split or shuffle layout whose
// tokens could fill at least 1/AppendPagesMinCover of the cache's slots
// (NumTokens·AppendPagesMinCover ≥ NumSlots), with BlockSize ≥ x (16
// bytes of cache elements) and HeadDim a power of two, takes the page
// path: cache_claim_* writes each token's index into its slot, then
// cache_append_pages_* writes one page per block in whole 16-byte pieces
// (kernels_src/append.cuh). A sparser
// append keeps the token path, whose cost does not grow with the cache.
// H200, 2026-12-02, T = 65536 into a cache of 65536 slots: random slots 86–87%
// of copy on the page path against 4–5% on the token path, prefill slots
// 84% against 89–90% (without the host's slots the planner cannot tell
// them apart; with them, AppendShape.SlotRuns keeps a prefill's append on
// the token path; the cover of 4 itself is not tuned).
const AppendPagesMinCover = 4

// AppendFlashFP8Tokens is how many tokens one thread of an fp8 append into
// the flash layout moves on a compute_90 device (the _t2_sm90 kernels): its
// 16·AppendFlashFP8Tokens conversions follow its loads, and with
// AppendGroupTokens (128 conversions) a small append, whose few threads sit
// one warp per scheduler on a few SMs, waits for them in a row (H200,
// 2026-12-02: T = 64 takes 6.4 µs of device time against 2.95 for f16).
const AppendFlashFP8Tokens = 2

// PlanAppend plans a cache append launch: one thread per 8 elements of one
// head for a group of AppendGroupTokens consecutive tokens, AppendThreads
// threads per block, a 1-D grid. NumTokens == 0 gives a Plan with Grid.X == 0,
// meaning nothing to launch. Errors wrap ErrInvalidShape. On success it
// allocates nothing.
func PlanAppend(a AppendShape) (TokenPlan, error) {
	kernel, err := AppendKernelName(a.DType, a.CacheDType)
	if err != nil {
		return TokenPlan{}, err
	}
	if p, ok := planAppendPages(a); ok {
		return p, nil
	}
	tokens := AppendGroupTokens
	if a.SM90 && a.CacheDType == E4M3 {
		ii, _ := activationIndex(a.DType)
		kernel = tables.appendSM90[ii]
		if a.Flash {
			kernel, tokens = tables.appendSM90Flash[ii], AppendFlashFP8Tokens
		}
	}
	return planRows(a, kernel, tokens)
}

// planAppendPages returns the page path's plan for a, and whether a takes
// it (see AppendPagesMinCover): Kernel writes one page per block
// (Grid.X = NumSlots/BlockSize), after Claim, one thread per token.
// a's dtypes are valid (PlanAppend checked them).
func planAppendPages(a AppendShape) (TokenPlan, bool) {
	x := 16 / max(a.CacheDType.Size(), 1)
	if a.Path == AppendPathTokens || a.Flash || a.BlockSize < x || a.HeadDim&(a.HeadDim-1) != 0 ||
		a.NumTokens == 0 || a.NumSlots <= 0 {
		return TokenPlan{}, false
	}
	if a.Path == AppendPathAuto && (a.SlotRuns || int64(a.NumTokens)*AppendPagesMinCover < a.NumSlots) {
		return TokenPlan{}, false
	}
	ii, _ := activationIndex(a.DType)
	ci := 0
	if a.CacheDType == E4M3 {
		ci = 1
	}
	pages := a.NumSlots / int64(a.BlockSize)
	if pages > maxGridX {
		return TokenPlan{}, false
	}
	names := tables.appendPages[ii][ci]
	return TokenPlan{
		Launch: Launch{Kernel: names[1], Grid: Dim3{uint32(pages), 1, 1}, Block: Dim3{AppendThreads, 1, 1}},
		Claim:  names[0],
	}, true
}

// PlanGather plans a cache gather launch (the inverse of an append, reading
// the CacheDType; DType is ignored) with the same geometry as PlanAppend.
func PlanGather(a AppendShape) (TokenPlan, error) {
	kernel, err := GatherKernelName(a.CacheDType)
	if err != nil {
		return TokenPlan{}, err
	}
	return planRows(a, kernel, AppendGroupTokens)
}

// planRows is the geometry shared by append and gather: one thread per 8
// elements of one head for each group of tokens (consecutive tokens per
// thread), groups counted in pairs (the last pair may be partial or have an
// empty second group).
func planRows(a AppendShape, kernel string, tokens int) (TokenPlan, error) {
	switch {
	case a.NumTokens < 0:
		return TokenPlan{}, errf("dispatch: AppendShape.NumTokens=%d is negative", a.NumTokens)
	case a.NumKVHeads < 1:
		return TokenPlan{}, errf("dispatch: AppendShape.NumKVHeads=%d is out of range; allowed: ≥ 1", a.NumKVHeads)
	case a.HeadDim < appendVector || a.HeadDim > 256 || a.HeadDim%appendVector != 0:
		return TokenPlan{}, errf("dispatch: AppendShape.HeadDim=%d is not supported; supported: a multiple of 8 from 8 to 256", a.HeadDim)
	}
	groups := 2 * ((int64(a.NumTokens) + 2*int64(tokens) - 1) / (2 * int64(tokens)))
	perGroup := int64(a.NumKVHeads) * int64(a.HeadDim/appendVector)
	maxThreads := int64(math.MaxInt32) * AppendThreads
	if groups > 0 && perGroup > maxThreads/groups {
		return TokenPlan{}, errf("dispatch: AppendShape.NumTokens=%d × NumKVHeads=%d × HeadDim=%d needs a grid larger than %d blocks",
			a.NumTokens, a.NumKVHeads, a.HeadDim, math.MaxInt32)
	}
	threads := groups * perGroup
	return TokenPlan{Launch: Launch{
		Kernel: kernel,
		Grid:   Dim3{uint32((threads + AppendThreads - 1) / AppendThreads), 1, 1},
		Block:  Dim3{AppendThreads, 1, 1},
	}}, nil
}

// RopeValuesMinTokens is how many tokens make PlanRope write V into an
// x-split or shuffle cache with a launch of its own (TokenPlan.Values) when
// the caller passed no host slots: rope_cache then leaves V alone and
// rope_values writes it as an append does, runs of 8 or 16 consecutive
// slots of a page as whole 16-byte pieces, where rope_cache stores each
// token's V element by element (2 bytes per 32-byte sector). A prefill's
// slots come in such runs; a decode step's are scattered, so that the
// second launch only adds its own cost (about 2 µs), which at 128 tokens
// the element-by-element V of a prefill costs too. With host slots the
// rule is theirs: a values launch exactly when they come in runs.
const RopeValuesMinTokens = 128

// PlanRope plans a fused RoPE + cache write: one block of TokenThreads per
// token, NumTokens being every token written to the cache (rotated or
// KV-only); into the x-split and shuffle layouts (Flash false), V by a
// launch of its own where RopeValuesMinTokens or SlotRuns says so, in
// PlanAppend's token-path geometry. NumTokens == 0 gives Grid.X == 0.
func PlanRope(a AppendShape) (TokenPlan, error) {
	switch {
	case a.NumTokens < 0 || a.NumTokens > math.MaxInt32:
		return TokenPlan{}, errf("dispatch: AppendShape.NumTokens=%d is out of range; allowed: 0..%d", a.NumTokens, math.MaxInt32)
	case a.NumKVHeads < 1:
		return TokenPlan{}, errf("dispatch: AppendShape.NumKVHeads=%d is out of range; allowed: ≥ 1", a.NumKVHeads)
	}
	kernel, err := RopeKernelName(a.DType, a.CacheDType)
	if err != nil {
		return TokenPlan{}, err
	}
	plan, err := PlanTokens(kernel, a.NumTokens)
	if err != nil {
		return TokenPlan{}, err
	}
	values := a.SlotRuns
	if !a.HostSlots {
		values = a.NumTokens >= RopeValuesMinTokens
	}
	if !a.Flash && values {
		ii, _ := activationIndex(a.DType)
		ci, _ := cacheIndex(a.DType, a.CacheDType)
		rows, err := planRows(a, tables.ropeValues[ii][ci], AppendGroupTokens)
		if err != nil {
			return TokenPlan{}, err
		}
		plan.Values = rows.Launch
	}
	return plan, nil
}
