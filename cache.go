package pagedkv

import (
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// AppendArgs describes one KV-cache append ("reshape and cache"): token t's
// key and value rows go to slot SlotMapping[t] of the caches, in Layout.
//
//   - K, V: [NumTokens, NumKVHeads, HeadDim] of DType, element strides
//     KTokenStride/KHeadStride (0 = contiguous: NumKVHeads·HeadDim and
//     HeadDim), likewise for V. Strides and pointers must keep every
//     8-element row 16-byte aligned.
//   - KCache, VCache: NumBlocks·BlockSize·NumKVHeads·HeadDim elements
//     of CacheDType in Layout (LayoutFlash by default); CacheDType is DType
//     or E4M3 (value / KScale or VScale, rounded to nearest even, saturated
//     to ±448).
//   - SlotMapping: int64 [NumTokens] on the device; a negative slot skips the
//     token. SlotRemap (optional): int64 table, slot = SlotRemap[slot],
//     negative skips (sliding-window caches). Slots the host cannot see are
//     checked on the device: an out-of-range slot is not written and is
//     recorded in the stream's fault record (see Stream.Fault).
//   - Tokens sharing one slot are written in an unspecified order.
//   - HostSlotMapping (optional): the host's copy of SlotMapping, as int32
//     (NumTokens values; the kernels read the device's, and the two must agree for the
//     choice below to be right, though any slots stay correct). An append
//     into the x-split or shuffle layout that covers much of the cache runs
//     as two launches that group its tokens by page (see Append); given the
//     host's slots, one whose tokens come in runs of consecutive slots (a
//     prefill's, where almost every token takes the slot after its
//     predecessor's) keeps the one launch, which writes such runs in whole
//     sectors (H200, T = 65536: 89–90% of copy against 84%). The check
//     samples up to 256 tokens (under a microsecond); without SlotRemap only.
//
// Aliasing: KCache and VCache must not overlap each other or any input (K,
// V, SlotMapping, SlotRemap): some threads write the caches while others
// still read their inputs, and the kernel takes every pointer as restrict.
// The inputs may overlap one another (they are only read): K and V may be
// two strided views of one fused KV activation. Validate refuses an overlap
// (ErrAliasing).
//
// Bounds: NumTokens ≤ 2^30, NumKVHeads ≤ 2^16 and HeadDim (the kernel's int32
// counts); NumBlocks·BlockSize ≤ 2^31−1 (as in every op); strides ≤ 2^31
// elements (int64 in the kernel, bounded so that no address it forms can
// overflow).
type AppendArgs struct {
	K, V                   Buffer
	KCache, VCache         Buffer
	SlotMapping, SlotRemap Buffer

	NumTokens, NumKVHeads, HeadDim int
	BlockSize, NumBlocks           int

	KTokenStride, KHeadStride int
	VTokenStride, VHeadStride int

	DType, CacheDType DType
	KScale, VScale    float32
	Layout            CacheLayout
	HostSlotMapping   []int32
}

const appendArg = "AppendArgs"

// strides returns the strides in effect (see tokenRows).
func (a *AppendArgs) strides() (kt, kh, vt, vh int64) {
	kt, kh = a.keyRows().strides()
	vt, vh = a.valueRows().strides()
	return
}

func (a *AppendArgs) keyRows() tokenRows {
	return tokenRows{"K", "KTokenStride", "KHeadStride", "NumTokens", "NumKVHeads", "HeadDim",
		a.K, a.NumTokens, a.NumKVHeads, a.HeadDim, a.KTokenStride, a.KHeadStride}
}

func (a *AppendArgs) valueRows() tokenRows {
	return tokenRows{"V", "VTokenStride", "VHeadStride", "NumTokens", "NumKVHeads", "HeadDim",
		a.V, a.NumTokens, a.NumKVHeads, a.HeadDim, a.VTokenStride, a.VHeadStride}
}

func (a *AppendArgs) target() cacheTarget {
	return cacheTarget{a.KCache, a.VCache, a.SlotMapping, a.SlotRemap, "NumTokens", a.NumTokens, a.NumKVHeads, a.HeadDim,
		a.BlockSize, a.NumBlocks, a.DType, a.CacheDType, a.KScale, a.VScale, a.Layout}
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *AppendArgs) Validate() error {
	if a == nil {
		return errf("the *AppendArgs is nil")
	}
	sp := spans{arg: appendArg}
	if err := a.target().check(&sp); err != nil {
		return err
	}
	if n := len(a.HostSlotMapping); n != 0 && n != a.NumTokens {
		return errf("%s.HostSlotMapping has %d values; allowed: none, or NumTokens=%d", appendArg, n, a.NumTokens)
	}
	if err := a.keyRows().check(&sp, a.DType, read); err != nil {
		return err
	}
	if err := a.valueRows().check(&sp, a.DType, read); err != nil {
		return err
	}
	return sp.check()
}

// cacheAppendParams is the parameter list of the cache_append_* kernels, in
// PTX order (kernels_src/cache.cu).
type cacheAppendParams struct {
	K, V, KCache, VCache           driver.DevicePtr
	SlotMapping, SlotRemap, Fault  driver.DevicePtr
	NumSlots, NumRemap             int64
	NumTokens, NumKVHeads, HeadDim int32
	KTokenStride, KHeadStride      int64
	VTokenStride, VHeadStride      int64
	KScale, VScale                 float32
	Layout, BlockSizeLog2          int32
}

// cacheClaimParams is the parameter list of the cache_claim_* kernels (the
// page path's first launch), in PTX order (kernels_src/append.cuh).
type cacheClaimParams struct {
	KCache, SlotMapping, SlotRemap, Fault                 driver.DevicePtr
	NumSlots, NumRemap                                    int64
	NumTokens, NumKVHeads, HeadDim, Layout, BlockSizeLog2 int32
}

// Append writes the tokens of a into the paged caches on stream s. An
// append into the x-split or shuffle layout whose tokens cover much of the
// cache runs as two launches (dispatch.AppendPagesMinCover): the first
// writes each token's index into its slot's K row, the second overwrites
// it page by page with the tokens' K and V.
func (r *Runtime) Append(s *Stream, a *AppendArgs) error {
	if err := r.on("Append", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanAppend(r.appendShape(a, dispatch.AppendPathAuto))
	if err != nil {
		return planError(err, "AppendShape", appendArg)
	}
	return r.launchAppend(s, a, &plan)
}

// AppendWithPlan runs a on s following plan, which must be a plan of
// PlanAppendWith for a (either path); another plan is an error, never a
// launch.
func (r *Runtime) AppendWithPlan(s *Stream, a *AppendArgs, plan dispatch.TokenPlan) error {
	if err := r.on("AppendWithPlan", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	// The plan of either path will do; a mismatch is named against the
	// path's plan whose kernel the plan has, else the token path's.
	var closest dispatch.TokenPlan
	for i, path := range []dispatch.AppendPath{dispatch.AppendPathTokens, dispatch.AppendPathPages} {
		p, err := dispatch.PlanAppend(r.appendShape(a, path))
		if err != nil {
			return planError(err, "AppendShape", appendArg)
		}
		if p == plan {
			return r.launchAppend(s, a, &plan)
		}
		if i == 0 || p.Kernel == plan.Kernel && p.Claim == plan.Claim {
			closest = p
		}
	}
	return planMismatch("AppendWithPlan", appendArg, "PlanAppendWith", plan, closest)
}

// launchAppend enqueues plan's launches for a valid a.
func (r *Runtime) launchAppend(s *Stream, a *AppendArgs, plan *dispatch.TokenPlan) error {
	p := a.params(s.fault)
	if plan.Claim != "" {
		// The claims go first, without the CHECK_BOUNDS check: a fault there
		// must not stop the page launch, which overwrites every claim.
		fn, _, err := r.function(plan.Claim)
		if err != nil {
			return err
		}
		cp := cacheClaimParams{KCache: p.KCache, SlotMapping: p.SlotMapping, SlotRemap: p.SlotRemap, Fault: p.Fault,
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
	return launchPlan(r, s, &plan.Launch, &p)
}

// PlanAppend returns the plan Append follows for a: the token path, or the
// page path (TokenPlan.Claim set; see Append).
func (r *Runtime) PlanAppend(a *AppendArgs) (dispatch.TokenPlan, error) {
	return r.PlanAppendWith(a, dispatch.AppendPathAuto)
}

// PlanAppendWith returns the plan of a on path: the planner's choice
// (AppendPathAuto), or the token or page path forced (tests and benchmarks;
// the page path needs the x-split or shuffle layout, BlockSize ≥ x and a
// power-of-two HeadDim, else the token path is the plan). Launch it with
// AppendWithPlan.
func (r *Runtime) PlanAppendWith(a *AppendArgs, path dispatch.AppendPath) (dispatch.TokenPlan, error) {
	if err := r.live(); err != nil {
		return dispatch.TokenPlan{}, err
	}
	if err := a.Validate(); err != nil {
		return dispatch.TokenPlan{}, err
	}
	plan, err := dispatch.PlanAppend(r.appendShape(a, path))
	return plan, planError(err, "AppendShape", appendArg)
}

// appendShape is the planner's view of a valid a on path.
func (r *Runtime) appendShape(a *AppendArgs, path dispatch.AppendPath) dispatch.AppendShape {
	return dispatch.AppendShape{Path: path,
		NumTokens: a.NumTokens, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, DType: a.DType, CacheDType: a.CacheDType,
		SM90: r.info.computeCapability() >= 90, Flash: !a.Layout.Laid(),
		BlockSize: a.BlockSize, NumSlots: int64(a.NumBlocks) * int64(a.BlockSize),
		SlotRuns: a.Layout.Laid() && a.SlotRemap.IsZero() && slotRuns(a.HostSlotMapping),
	}
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *AppendArgs) params(fault driver.DevicePtr) cacheAppendParams {
	kt, kh, vt, vh := a.strides()
	p := cacheAppendParams{
		K: a.K.Ptr, V: a.V.Ptr, KCache: a.KCache.Ptr, VCache: a.VCache.Ptr,
		SlotMapping: a.SlotMapping.Ptr, SlotRemap: a.SlotRemap.Ptr, Fault: fault,
		NumSlots:  int64(a.NumBlocks) * int64(a.BlockSize),
		NumRemap:  a.SlotRemap.Bytes / 8,
		NumTokens: int32(a.NumTokens), NumKVHeads: int32(a.NumKVHeads), HeadDim: int32(a.HeadDim),
		KTokenStride: kt, KHeadStride: kh, VTokenStride: vt, VHeadStride: vh,
		Layout: int32(a.Layout), BlockSizeLog2: log2(a.BlockSize),
	}
	p.KScale, p.VScale = a.target().scales()
	return p
}

// GatherArgs describes a gather of cache slots back to token-major rows:
// row t of KOut and VOut ([NumTokens, NumKVHeads, HeadDim] of
// CacheDType, contiguous) receives the elements of slot SlotMapping[t] (int64 on
// the device), bit for bit: the exact inverse of an append into a cache of
// the input's dtype. A negative slot leaves its row as it was; a slot beyond
// the cache is recorded in the stream's fault record and not read.
//
// Aliasing: KOut and VOut must not overlap each other or any input
// (KCache, VCache, SlotMapping); a gather is not in place. The inputs may
// overlap one another.
type GatherArgs struct {
	KCache, VCache Buffer
	SlotMapping    Buffer
	KOut, VOut     Buffer

	NumTokens, NumKVHeads, HeadDim int
	BlockSize, NumBlocks           int
	CacheDType                     DType
	Layout                         CacheLayout
}

const gatherArg = "GatherArgs"

// Validate checks every shape, dtype, layout, alignment and buffer capacity.
func (a *GatherArgs) Validate() error {
	if a == nil {
		return errf("the *GatherArgs is nil")
	}
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
	if err := checkPool(gatherArg, a.NumBlocks, a.BlockSize); err != nil {
		return err
	}
	if err := checkLayout(gatherArg, a.Layout, a.CacheDType, a.HeadDim, a.BlockSize); err != nil {
		return err
	}
	sp := spans{arg: gatherArg}
	esize := int64(a.CacheDType.Size())
	cacheBytes, err := size(gatherArg, "NumBlocks·BlockSize·NumKVHeads·HeadDim", esize,
		int64(a.NumBlocks), int64(a.BlockSize), int64(a.NumKVHeads), int64(a.HeadDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("KCache", a.KCache, cacheBytes, 16, read); err != nil {
		return err
	}
	if err := sp.buffer("VCache", a.VCache, cacheBytes, 16, read); err != nil {
		return err
	}
	if a.NumTokens > 0 {
		rows, err := size(gatherArg, "NumTokens·NumKVHeads·HeadDim", esize, int64(a.NumTokens), int64(a.NumKVHeads), int64(a.HeadDim))
		if err != nil {
			return err
		}
		if err := sp.buffer("SlotMapping", a.SlotMapping, int64(a.NumTokens)*8, 8, read); err != nil {
			return err
		}
		if err := sp.buffer("KOut", a.KOut, rows, 16, write); err != nil {
			return err
		}
		if err := sp.buffer("VOut", a.VOut, rows, 16, write); err != nil {
			return err
		}
	}
	return sp.check()
}

// cacheGatherParams is the parameter list of the cache_gather_* kernels, in
// PTX order (kernels_src/cache.cu).
type cacheGatherParams struct {
	KOut, VOut, KCache, VCache     driver.DevicePtr
	SlotMapping, Fault             driver.DevicePtr
	NumSlots                       int64
	NumTokens, NumKVHeads, HeadDim int32
	Layout, BlockSizeLog2          int32
}

// Gather copies the cache slots of a back to token-major rows on stream s.
func (r *Runtime) Gather(s *Stream, a *GatherArgs) error {
	if err := r.on("Gather", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanGather(dispatch.AppendShape{
		NumTokens: a.NumTokens, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, DType: a.CacheDType, CacheDType: a.CacheDType,
	})
	if err != nil {
		return planError(err, "AppendShape", gatherArg)
	}
	p := a.params(s.fault)
	return launchPlan(r, s, &plan.Launch, &p)
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *GatherArgs) params(fault driver.DevicePtr) cacheGatherParams {
	return cacheGatherParams{
		KOut: a.KOut.Ptr, VOut: a.VOut.Ptr, KCache: a.KCache.Ptr, VCache: a.VCache.Ptr,
		SlotMapping: a.SlotMapping.Ptr, Fault: fault, NumSlots: int64(a.NumBlocks) * int64(a.BlockSize),
		NumTokens: int32(a.NumTokens), NumKVHeads: int32(a.NumKVHeads), HeadDim: int32(a.HeadDim),
		Layout: int32(a.Layout), BlockSizeLog2: log2(a.BlockSize),
	}
}
