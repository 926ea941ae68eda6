package pagedkv

import (
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// AppendArgs describes one KV-cache append ("reshape and cache"): token t's
// key and value rows go to slot SlotMapping[t] of the caches, in Layout.
//
//   - Key, Value: [NumTokens, NumKVHeads, HeadDim] of DType, element strides
//     KeyTokenStride/KeyHeadStride (0 = contiguous: NumKVHeads·HeadDim and
//     HeadDim), likewise for Value. Strides and pointers must keep every
//     8-element row 16-byte aligned.
//   - KeyCache, ValueCache: NumBlocks·BlockSize·NumKVHeads·HeadDim elements
//     of CacheDType in Layout (LayoutFlash by default); CacheDType is DType
//     or E4M3 (value / KScale or VScale, rounded to nearest even, saturated
//     to ±448).
//   - SlotMapping: int64 [NumTokens] on the device; a negative slot skips the
//     token. SlotRemap (optional): int64 table, slot = SlotRemap[slot],
//     negative skips (sliding-window caches). Slots the host cannot see are
//     checked on the device: an out-of-range slot is not written and is
//     recorded in the stream's fault record (see Stream.Fault).
//   - Tokens sharing one slot are written in an unspecified order.
//   - HostSlotMapping (optional): the host's copy of SlotMapping (NumTokens
//     values; the kernels read the device's, and the two must agree for the
//     choice below to be right, though any slots stay correct). An append
//     into the x-split or shuffle layout that covers much of the cache runs
//     as two launches that group its tokens by page (see Append); given the
//     host's slots, one whose tokens come in runs of consecutive slots (a
//     prefill's, where almost every token takes the slot after its
//     predecessor's) keeps the one launch, which writes such runs in whole
//     sectors (H200, T = 65536: 89–90% of copy against 84%). The check
//     samples up to 256 tokens (under a microsecond); without SlotRemap only.
//
// Aliasing: KeyCache and ValueCache must not overlap each other or any input
// (Key, Value, SlotMapping, SlotRemap): some threads write the caches while
// others still read their inputs, and the kernel takes every pointer as
// restrict. The inputs may overlap one another (they are only read): Key and
// Value may be two strided views of one fused KV activation.
//
// Bounds: NumTokens ≤ 2^30, NumKVHeads ≤ 2^16 and HeadDim (the kernel's int32
// counts); NumBlocks ≤ 2^40 (the slot count is int64); strides ≤ 2^31
// elements (int64 in the kernel, bounded so that no address it forms can
// overflow).
type AppendArgs struct {
	Key, Value             Buffer
	KeyCache, ValueCache   Buffer
	SlotMapping, SlotRemap Buffer

	NumTokens, NumKVHeads, HeadDim int
	BlockSize, NumBlocks           int

	KeyTokenStride, KeyHeadStride     int
	ValueTokenStride, ValueHeadStride int

	DType, CacheDType DType
	KScale, VScale    float32
	Layout            CacheLayout
	HostSlotMapping   []int64
}

const appendArg = "AppendArgs"

// slotRunSamples is how many tokens slotRuns looks at: a full pass over
// 65536 slots costs about 25 µs of host time per Append (H200 host,
// 2026-12-02), more than the launch it decides.
const slotRunSamples = 256

// slotRuns reports whether slots come in runs of consecutive slots: of up
// to slotRunSamples tokens spread over the batch (after the first), at
// least 7 in 8 take the slot after their predecessor's. A prefill's
// slots in pages of 16 break a run at 1 token in 16 at most.
func slotRuns(slots []int64) bool {
	pairs := len(slots) - 1
	if pairs < 1 {
		return false
	}
	n := min(pairs, slotRunSamples)
	// An odd step, so that the samples fall on every offset within pages
	// (whose sizes are powers of two) rather than on one.
	step := max(pairs/n, 1) | 1
	hits := 0
	for i := range n {
		t := 1 + (i*step)%pairs
		if slots[t] == slots[t-1]+1 {
			hits++
		}
	}
	return 8*hits >= 7*n
}

// strides returns the strides in effect (see tokenRows).
func (a *AppendArgs) strides() (kt, kh, vt, vh int64) {
	kt, kh = a.keyRows().strides()
	vt, vh = a.valueRows().strides()
	return
}

func (a *AppendArgs) keyRows() tokenRows {
	return tokenRows{"Key", "KeyTokenStride", "KeyHeadStride", "NumTokens", "NumKVHeads", "HeadDim",
		a.Key, a.NumTokens, a.NumKVHeads, a.HeadDim, a.KeyTokenStride, a.KeyHeadStride}
}

func (a *AppendArgs) valueRows() tokenRows {
	return tokenRows{"Value", "ValueTokenStride", "ValueHeadStride", "NumTokens", "NumKVHeads", "HeadDim",
		a.Value, a.NumTokens, a.NumKVHeads, a.HeadDim, a.ValueTokenStride, a.ValueHeadStride}
}

func (a *AppendArgs) target() cacheTarget {
	return cacheTarget{a.KeyCache, a.ValueCache, a.SlotMapping, a.SlotRemap, "NumTokens", a.NumTokens, a.NumKVHeads, a.HeadDim,
		a.BlockSize, a.NumBlocks, a.DType, a.CacheDType, a.KScale, a.VScale, a.Layout}
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *AppendArgs) Validate() error {
	if err := a.target().check(appendArg); err != nil {
		return err
	}
	if n := len(a.HostSlotMapping); n != 0 && n != a.NumTokens {
		return errf("%s.HostSlotMapping has %d values; allowed: none, or NumTokens=%d", appendArg, n, a.NumTokens)
	}
	if err := a.keyRows().check(appendArg, a.DType); err != nil {
		return err
	}
	return a.valueRows().check(appendArg, a.DType)
}

// cacheAppendParams is the parameter list of the cache_append_* kernels, in
// PTX order (kernels_src/cache.cu).
type cacheAppendParams struct {
	Key, Value, KeyCache, ValueCache  driver.DevicePtr
	SlotMapping, SlotRemap, Fault     driver.DevicePtr
	NumSlots, NumRemap                int64
	NumTokens, NumKVHeads, HeadDim    int32
	KeyTokenStride, KeyHeadStride     int64
	ValueTokenStride, ValueHeadStride int64
	KScale, VScale                    float32
	Layout, BlockSizeLog2             int32
}

// cacheClaimParams is the parameter list of the cache_claim_* kernels (the
// page path's first launch), in PTX order (kernels_src/append.cuh).
type cacheClaimParams struct {
	KeyCache, SlotMapping, SlotRemap, Fault               driver.DevicePtr
	NumSlots, NumRemap                                    int64
	NumTokens, NumKVHeads, HeadDim, Layout, BlockSizeLog2 int32
}

// Append writes the tokens of a into the paged caches on stream s. An
// append into the x-split or shuffle layout whose tokens cover much of the
// cache runs as two launches (dispatch.AppendPagesMinCover): the first
// writes each token's index into its slot's K row, the second overwrites
// it page by page with the tokens' K and V.
func (r *Runtime) Append(s *Stream, a *AppendArgs) error {
	if err := r.live(); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanAppend(r.appendShape(a))
	if err != nil {
		return err
	}
	p := a.params(s.fault)
	if plan.AppendClaim != "" {
		// The claims go first, without the CHECK_BOUNDS check: a fault there
		// must not stop the page launch, which overwrites every claim.
		fn, _, err := r.function(plan.AppendClaim)
		if err != nil {
			return err
		}
		cp := cacheClaimParams{KeyCache: p.KeyCache, SlotMapping: p.SlotMapping, SlotRemap: p.SlotRemap, Fault: p.Fault,
			NumSlots: p.NumSlots, NumRemap: p.NumRemap, NumTokens: p.NumTokens, NumKVHeads: p.NumKVHeads, HeadDim: p.HeadDim,
			Layout: p.Layout, BlockSizeLog2: p.BlockSizeLog2}
		grid := driver.Dim3{X: uint32((a.NumTokens + dispatch.AppendThreads - 1) / dispatch.AppendThreads), Y: 1, Z: 1}
		err = r.do(func() error {
			return driver.Launch(fn, grid, driver.Dim3{X: dispatch.AppendThreads, Y: 1, Z: 1}, 0, s.s, &cp)
		})
		if err != nil {
			return err
		}
	}
	return launchPlan(r, s, &plan, &p)
}

// PlanAppend returns the plan Append follows for a: the token path, or the
// page path (Plan.AppendClaim set; see Append).
func (r *Runtime) PlanAppend(a *AppendArgs) (dispatch.Plan, error) {
	if err := r.live(); err != nil {
		return dispatch.Plan{}, err
	}
	if err := a.Validate(); err != nil {
		return dispatch.Plan{}, err
	}
	return dispatch.PlanAppend(r.appendShape(a))
}

// appendShape is the planner's view of a valid a.
func (r *Runtime) appendShape(a *AppendArgs) dispatch.AppendShape {
	return dispatch.AppendShape{
		NumTokens: a.NumTokens, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, DType: a.DType, CacheDType: a.CacheDType,
		SM90: r.info.computeCapability() >= 90, Flash: a.Layout == LayoutFlash,
		BlockSize: a.BlockSize, NumSlots: int64(a.NumBlocks) * int64(a.BlockSize),
		SlotRuns: a.Layout != LayoutFlash && a.SlotRemap.IsZero() && slotRuns(a.HostSlotMapping),
	}
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *AppendArgs) params(fault driver.DevicePtr) cacheAppendParams {
	kt, kh, vt, vh := a.strides()
	p := cacheAppendParams{
		Key: a.Key.Ptr, Value: a.Value.Ptr, KeyCache: a.KeyCache.Ptr, ValueCache: a.ValueCache.Ptr,
		SlotMapping: a.SlotMapping.Ptr, SlotRemap: a.SlotRemap.Ptr, Fault: fault,
		NumSlots:  int64(a.NumBlocks) * int64(a.BlockSize),
		NumRemap:  a.SlotRemap.Bytes / 8,
		NumTokens: int32(a.NumTokens), NumKVHeads: int32(a.NumKVHeads), HeadDim: int32(a.HeadDim),
		KeyTokenStride: kt, KeyHeadStride: kh, ValueTokenStride: vt, ValueHeadStride: vh,
		Layout: int32(a.Layout), BlockSizeLog2: log2(a.BlockSize),
	}
	p.KScale, p.VScale = a.target().scales()
	return p
}

// GatherArgs describes a gather of cache slots back to token-major rows:
// row t of KeyOut and ValueOut ([NumTokens, NumKVHeads, HeadDim] of
// CacheDType, contiguous) receives the elements of slot SlotMapping[t] (int64 on
// the device), bit for bit: the exact inverse of an append into a cache of
// the input's dtype. A negative slot leaves its row as it was; a slot beyond
// the cache is recorded in the stream's fault record and not read.
//
// Aliasing: KeyOut and ValueOut must not overlap each other or any input
// (KeyCache, ValueCache, SlotMapping); a gather is not in place. The inputs may
// overlap one another.
type GatherArgs struct {
	KeyCache, ValueCache Buffer
	SlotMapping          Buffer
	KeyOut, ValueOut     Buffer

	NumTokens, NumKVHeads, HeadDim int
	BlockSize, NumBlocks           int
	CacheDType                     DType
	Layout                         CacheLayout
}

const gatherArg = "GatherArgs"

// Validate checks every shape, dtype, layout, alignment and buffer capacity.
func (a *GatherArgs) Validate() error {
	if !a.CacheDType.Valid() {
		return errf("%s.CacheDType=%s is not supported; allowed: f16, bf16, e4m3", gatherArg, a.CacheDType)
	}
	if a.HeadDim%8 != 0 || a.HeadDim < 8 || a.HeadDim > 256 {
		return errf("%s.HeadDim=%d is not supported; allowed: a multiple of 8 from 8 to 256", gatherArg, a.HeadDim)
	}
	if err := inRange(gatherArg, "NumKVHeads", a.NumKVHeads, 1, 1<<16); err != nil {
		return err
	}
	if err := inRange(gatherArg, "NumTokens", a.NumTokens, 0, 1<<30); err != nil {
		return err
	}
	if err := powerOfTwo(gatherArg, "BlockSize", a.BlockSize, 1, 256); err != nil {
		return err
	}
	if err := inRange(gatherArg, "NumBlocks", a.NumBlocks, 1, 1<<40); err != nil {
		return err
	}
	if err := checkLayout(gatherArg, a.Layout, a.CacheDType, a.HeadDim, a.BlockSize); err != nil {
		return err
	}
	esize := int64(a.CacheDType.Size())
	cacheBytes, err := size(gatherArg, "NumBlocks·BlockSize·NumKVHeads·HeadDim", esize,
		int64(a.NumBlocks), int64(a.BlockSize), int64(a.NumKVHeads), int64(a.HeadDim))
	if err != nil {
		return err
	}
	if err := buffer(gatherArg, "KeyCache", a.KeyCache, cacheBytes, 16); err != nil {
		return err
	}
	if err := buffer(gatherArg, "ValueCache", a.ValueCache, cacheBytes, 16); err != nil {
		return err
	}
	if a.NumTokens > 0 {
		rows, err := size(gatherArg, "NumTokens·NumKVHeads·HeadDim", esize, int64(a.NumTokens), int64(a.NumKVHeads), int64(a.HeadDim))
		if err != nil {
			return err
		}
		if err := buffer(gatherArg, "SlotMapping", a.SlotMapping, int64(a.NumTokens)*8, 8); err != nil {
			return err
		}
		if err := buffer(gatherArg, "KeyOut", a.KeyOut, rows, 16); err != nil {
			return err
		}
		if err := buffer(gatherArg, "ValueOut", a.ValueOut, rows, 16); err != nil {
			return err
		}
	}
	return nil
}

// cacheGatherParams is the parameter list of the cache_gather_* kernels, in
// PTX order (kernels_src/cache.cu).
type cacheGatherParams struct {
	KeyOut, ValueOut, KeyCache, ValueCache driver.DevicePtr
	SlotMapping, Fault                     driver.DevicePtr
	NumSlots                               int64
	NumTokens, NumKVHeads, HeadDim         int32
	Layout, BlockSizeLog2                  int32
}

// Gather copies the cache slots of a back to token-major rows on stream s.
func (r *Runtime) Gather(s *Stream, a *GatherArgs) error {
	if err := r.live(); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanGather(dispatch.AppendShape{
		NumTokens: a.NumTokens, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, DType: a.CacheDType, CacheDType: a.CacheDType,
	})
	if err != nil {
		return err
	}
	p := a.params(s.fault)
	return launchPlan(r, s, &plan, &p)
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *GatherArgs) params(fault driver.DevicePtr) cacheGatherParams {
	return cacheGatherParams{
		KeyOut: a.KeyOut.Ptr, ValueOut: a.ValueOut.Ptr, KeyCache: a.KeyCache.Ptr, ValueCache: a.ValueCache.Ptr,
		SlotMapping: a.SlotMapping.Ptr, Fault: fault, NumSlots: int64(a.NumBlocks) * int64(a.BlockSize),
		NumTokens: int32(a.NumTokens), NumKVHeads: int32(a.NumKVHeads), HeadDim: int32(a.HeadDim),
		Layout: int32(a.Layout), BlockSizeLog2: log2(a.BlockSize),
	}
}
