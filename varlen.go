package pagedkv

import (
	"sync"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// VarlenArgs describes one paged varlen attention: several query tokens per
// sequence (a prompt, a chunk of one, a speculative-decoding verify step, or
// a single decode token in a mixed batch) attending over the sequence's
// paged KV cache, which already holds the new tokens (write them first with
// Append, RopeCache or QKVNormRope).
//
//   - Q: [NumTokens, NumQHeads, HeadDim] of DType (f16 or bf16),
//     token-major; QTokenStride is the element stride between tokens (0 =
//     NumQHeads·HeadDim; else a multiple of 8, and Q 16-byte aligned).
//   - CuSeqlensQ: int32 [NumSeqs+1] on the device; sequence s owns query
//     tokens CuSeqlensQ[s] … CuSeqlensQ[s+1]-1 (q_len 0 and 1 allowed).
//     PosOffsets: int32 [NumSeqs] on the device, the KV position of each
//     sequence's first query token: its KV length is PosOffsets[s] + q_len.
//   - KCache, VCache, BlockTables: as for DecodeArgs (in Layout,
//     flash by default; CacheDType DType or E4M3 with KScale / VScale; the
//     x-split and shuffle layouts take BlockSize ≥ 8 with 16-bit caches, ≥
//     16 with e4m3 ones; the HND layout takes what the flash one takes).
//   - Out: of DType, the row of (token t, head h) at t·OutTokenStride +
//     h·OutHeadStride elements; both 0 (the default) mean token-major
//     [NumTokens, NumQHeads, HeadDim], contiguous. Strides are even, and
//     rows never overlap: token-major (OutHeadStride ≥ HeadDim, OutTokenStride
//     ≥ NumQHeads·OutHeadStride) or head-major (OutTokenStride ≥ HeadDim,
//     OutHeadStride ≥ NumTokens·OutTokenStride, as SequenceAttention
//     writes). LSE (optional): f32 [NumTokens, NumQHeads], the natural
//     log of Σ exp(Scale·q·k) over the keys each query attends.
//   - Causal: query i of sequence s attends KV positions ≤ PosOffsets[s] + i
//     (bottom-right aligned, as in prefill and chunked prefill); otherwise
//     every position of the sequence (encoders, cross-attention over a
//     cached prefix).
//   - MaxKVLen: the batch's largest PosOffsets[s] + q_len, for planning
//     (kernels read CuSeqlensQ and PosOffsets themselves).
//   - HostCuSeqlensQ, HostPosOffsets (optional): the host's copies of the
//     two device arrays. Given, they are checked before the launch
//     (CuSeqlensQ starts at 0, never decreases and ends at NumTokens;
//     every offset is ≥ 0 and PosOffsets[s] + q_len ≤ MaxKVLen), and the
//     planner counts the batch's real row tiles. Bad device values are
//     clamped and reported through the stream's fault record instead.
//     Given both, an eager Varlen of a mixed batch whose leading one-token
//     sequences (decode rows, as chunked-prefill schedulers put first) are
//     what make it short on average runs them as a batched decode, then
//     the rest as a varlen (VarlenPlan.DecodePrefix; the decode part uses the
//     decode's knobs): two kernels each fit for its part instead of one
//     fit for neither; a batch of one-token sequences only runs as one
//     batched decode, which reads each KV head's pages once for the whole
//     group and splits long sequences. This applies only when Workspace is
//     not set and Out is token-major and contiguous (otherwise one varlen
//     launch runs the batch); the device arrays must then agree with the host copies
//     (disagreeing values stay memory-safe and faults are recorded, but
//     the outputs are undefined). A fault either part records names the
//     batch's sequence and arrays, as one launch would.
//   - KVCapacity: for a varlen captured into a graph, the largest KV length
//     any replay will see (0: the runtime's KV_CAPACITY); the plan is made
//     for it and for NumTokens, the most query tokens any replay may
//     have (CuSeqlensQ[NumSeqs] ≤ NumTokens at every replay; the
//     sequence count is fixed at capture). Its split count is a ceiling:
//     each row tile splits by the KV length it meets at the replay, as an
//     eager plan for those lengths would (VarlenPlan.SplitWave), so a
//     graph captured for a long capacity replays short lengths at the
//     eager call's speed. Eager calls ignore it.
//   - Workspace (optional): the engine's own split-K scratch instead of the
//     stream's pool, at least VarlenPlan.WorkspaceBytes of the plan PlanVarlen
//     (or, for a graph, PlanVarlenGraph) gives, 256-byte aligned. It must
//     outlive every graph that captured it.
//   - Scale: softmax scale; 0 means 1/√HeadDim.
//   - SlidingWindow, SoftCap, Sinks, AlibiSlopes: the score modifiers, as
//     DecodeArgs takes them, for a query at KV position p (PosOffsets[s] +
//     i): SlidingWindow > 0 attends keys p−SlidingWindow+1 … p only (it needs
//     Causal), and a block of queries reads no page before its first
//     query's window, so a long prompt costs what its windows cover. They
//     need the flash or HND layout (any cache dtype).
//
// Aliasing: Out and LSE must not overlap each other or any input; inputs may
// overlap one another. Workspace must not overlap any other buffer. Validate
// refuses an overlap (ErrAliasing).
//
// Bounds: NumSeqs ≤ 2^24, NumKVHeads ≤ 65535, NumQHeads ≤ 16·NumKVHeads,
// NumTokens·NumQHeads ≤ 2^30, NumBlocks·BlockSize ≤ 2^31−1 (as in every
// op), with LayoutHND also NumBlocks·NumKVHeads·BlockSize ≤ 2^32 (as in
// Decode), MaxBlocksPerSeq·BlockSize ≤ 2^30; QTokenStride, OutTokenStride
// and OutHeadStride ≤ 2^31 elements.
type VarlenArgs struct {
	Q, KCache, VCache                   Buffer
	BlockTables, CuSeqlensQ, PosOffsets Buffer
	Out, LSE                            Buffer
	Workspace                           Buffer

	NumSeqs, NumTokens, NumQHeads, NumKVHeads, HeadDim int
	BlockSize, NumBlocks, MaxBlocksPerSeq              int
	MaxKVLen                                           int
	QTokenStride                                       int
	OutTokenStride, OutHeadStride                      int
	KVCapacity                                         int
	Causal                                             bool
	HostCuSeqlensQ, HostPosOffsets                     []int32

	DType, CacheDType     DType
	Layout                CacheLayout
	Scale, KScale, VScale float32

	SlidingWindow      int
	SoftCap            float32
	Sinks, AlibiSlopes Buffer
}

const varlenArg = "VarlenArgs"

// maxVarlenRows bounds VarlenArgs.NumTokens·NumQHeads, the packed rows
// the kernels index in int32 (with a row tile of room to spare).
const maxVarlenRows = 1 << 30

// maxVarlenSeqs bounds VarlenArgs.NumSeqs: the kernels find a block's
// sequence by binary search over CuSeqlensQ, and the grid holds a row tile
// per sequence beyond the tokens' own.
const maxVarlenSeqs = 1 << 24

// Validate checks every shape, dtype, alignment and buffer capacity the host
// can see, and the host copies of the lengths when given.
func (a *VarlenArgs) Validate() error {
	if a == nil {
		return errf("the *VarlenArgs is nil")
	}
	p := a.paged()
	sp := spans{arg: varlenArg}
	if err := p.types(); err != nil {
		return err
	}
	if err := inRange(varlenArg, "NumSeqs", a.NumSeqs, 1, maxVarlenSeqs); err != nil {
		return err
	}
	if err := p.heads(); err != nil {
		return err
	}
	// The kernels count packed (token, head) rows in int32, up to a row
	// tile past the last one.
	if a.NumTokens < 0 || a.NumTokens > maxVarlenRows/a.NumQHeads {
		return errf("%s.NumTokens=%d is out of range; allowed: 0..%d (NumTokens·NumQHeads ≤ 2^30)", varlenArg, a.NumTokens, maxVarlenRows/a.NumQHeads)
	}
	if err := p.pages(); err != nil {
		return err
	}
	if err := a.checkHostLengths(); err != nil {
		return err
	}
	if err := p.scalars(&sp); err != nil {
		return err
	}
	if err := a.checkMods(&sp); err != nil {
		return err
	}
	if _, err := p.qRows(&sp, a.Q, a.NumTokens, a.QTokenStride, "NumTokens", "QTokenStride"); err != nil {
		return err
	}
	if err := checkAttentionLayout(varlenArg, a.Layout, a.CacheDType, a.HeadDim, a.BlockSize, a.NumBlocks, a.NumKVHeads); err != nil {
		return err
	}
	if a.HeadDim&(a.HeadDim-1) != 0 && a.Layout.Laid() {
		return errf("%s.HeadDim=%d is not supported with Layout=%v; allowed there: Layout=%v or %v (or HeadDim 64, 128, 256)", varlenArg, a.HeadDim, a.Layout, LayoutFlash, LayoutHND)
	}
	if err := p.caches(&sp); err != nil {
		return err
	}
	if err := sp.buffer("CuSeqlensQ", a.CuSeqlensQ, int64(a.NumSeqs+1)*4, 4, read); err != nil {
		return err
	}
	if err := sp.buffer("PosOffsets", a.PosOffsets, int64(a.NumSeqs)*4, 4, read); err != nil {
		return err
	}
	if a.NumTokens > 0 {
		ts, hs, err := a.outStrides()
		if err != nil {
			return err
		}
		outBytes, err := extent(varlenArg, "Out", int64(a.DType.Size()), int64(a.HeadDim),
			axis{int64(a.NumTokens), ts, "NumTokens", "OutTokenStride"}, axis{int64(a.NumQHeads), hs, "NumQHeads", "OutHeadStride"})
		if err != nil {
			return err
		}
		if err := sp.buffer("Out", a.Out, outBytes, 4, write); err != nil {
			return err
		}
		if !a.LSE.IsZero() {
			if err := sp.buffer("LSE", a.LSE, int64(a.NumTokens)*int64(a.NumQHeads)*4, 4, write); err != nil {
				return err
			}
		}
	}
	return sp.check()
}

// paged returns a's share of the attention ops' checks (its KV heads run
// on the grid's y, at most 65535).
func (a *VarlenArgs) paged() pagedAttention {
	return pagedAttention{
		arg: varlenArg, dtype: a.DType, cacheDType: a.CacheDType,
		headDim: a.HeadDim, numQHeads: a.NumQHeads, numKVHeads: a.NumKVHeads, maxKVHeads: 65535,
		numSeqs: a.NumSeqs, blockSize: a.BlockSize, numBlocks: a.NumBlocks, maxBlocksPerSeq: a.MaxBlocksPerSeq,
		maxKVLen: a.MaxKVLen, kvCapacity: a.KVCapacity, keyCache: a.KCache, valueCache: a.VCache,
		blockTables: a.BlockTables, workspace: a.Workspace, scale: a.Scale, kScale: a.KScale, vScale: a.VScale,
	}
}

// checkHostLengths checks HostCuSeqlensQ and HostPosOffsets, when given.
func (a *VarlenArgs) checkHostLengths() error {
	cu, pos := a.HostCuSeqlensQ, a.HostPosOffsets
	if len(cu) != 0 {
		if len(cu) != a.NumSeqs+1 {
			return errf("%s.HostCuSeqlensQ has %d values; allowed: none, or NumSeqs+1=%d", varlenArg, len(cu), a.NumSeqs+1)
		}
		if cu[0] != 0 {
			return errf("%s.HostCuSeqlensQ[0]=%d is not allowed; allowed: 0", varlenArg, cu[0])
		}
		for s := range a.NumSeqs {
			if cu[s+1] < cu[s] {
				return errf("%s.HostCuSeqlensQ[%d]=%d is below HostCuSeqlensQ[%d]=%d; allowed: a non-decreasing sequence", varlenArg, s+1, cu[s+1], s, cu[s])
			}
		}
		if int(cu[a.NumSeqs]) != a.NumTokens {
			return errf("%s.HostCuSeqlensQ[%d]=%d disagrees with NumTokens=%d", varlenArg, a.NumSeqs, cu[a.NumSeqs], a.NumTokens)
		}
	}
	if len(pos) != 0 {
		if len(cu) == 0 {
			return errf("%s.HostPosOffsets is given without HostCuSeqlensQ; allowed: both or neither (an offset is checked against its sequence's q_len)", varlenArg)
		}
		if len(pos) != a.NumSeqs {
			return errf("%s.HostPosOffsets has %d values; allowed: none, or NumSeqs=%d", varlenArg, len(pos), a.NumSeqs)
		}
		for s, p := range pos {
			qLen := int64(cu[s+1] - cu[s])
			if p < 0 || int64(p)+qLen > int64(a.MaxKVLen) {
				return errf("%s.HostPosOffsets[%d]=%d is not allowed with %d query tokens; allowed: 0..MaxKVLen−q_len=%d", varlenArg, s, p, qLen, int64(a.MaxKVLen)-qLen)
			}
		}
	}
	return nil
}

// outStrides returns Out's token and head strides in elements (the
// defaults for 0, 0), or an error when they are odd, negative, too large or
// let two rows overlap.
func (a *VarlenArgs) outStrides() (token, head int64, err error) {
	token, head = int64(a.OutTokenStride), int64(a.OutHeadStride)
	if token == 0 && head == 0 {
		return int64(a.NumQHeads) * int64(a.HeadDim), int64(a.HeadDim), nil
	}
	d := int64(a.HeadDim)
	tokenMajor := head >= d && token >= head*int64(a.NumQHeads)
	headMajor := token >= d && head >= token*int64(a.NumTokens)
	if token%2 != 0 || head%2 != 0 || token > maxStride || head > maxStride || !(tokenMajor || headMajor) {
		return 0, 0, errf("%s.OutTokenStride=%d, OutHeadStride=%d are not allowed; allowed: both 0 (token-major, contiguous), or even strides ≤ %d whose rows never overlap: OutHeadStride ≥ HeadDim=%d and OutTokenStride ≥ NumQHeads·OutHeadStride, or OutTokenStride ≥ HeadDim and OutHeadStride ≥ NumTokens·OutTokenStride",
			varlenArg, a.OutTokenStride, a.OutHeadStride, maxStride, a.HeadDim)
	}
	return token, head, nil
}

// mods returns a's score modifiers.
func (a *VarlenArgs) mods() scoreMods {
	return scoreMods{window: a.SlidingWindow, softCap: a.SoftCap, sinks: a.Sinks, alibi: a.AlibiSlopes}
}

// checkMods checks a's score modifiers: their values and buffers, and that
// the call has kernels for them (a window needs Causal; the flash layout).
func (a *VarlenArgs) checkMods(sp *spans) error {
	m := a.mods()
	if err := m.check(varlenArg, sp, a.NumQHeads); err != nil || !m.on() {
		return err
	}
	if a.SlidingWindow > 0 && !a.Causal {
		return errf("%s.SlidingWindow=%d needs Causal: a window ends at each query's own position; allowed: Causal=true, or SlidingWindow=0", varlenArg, a.SlidingWindow)
	}
	if a.Layout.Laid() {
		return errf("%s: SlidingWindow, SoftCap, Sinks and AlibiSlopes with Layout=%v are not supported; allowed: Layout=%v or %v", varlenArg, a.Layout, LayoutFlash, LayoutHND)
	}
	return nil
}

// group returns the GQA group size of a valid a.
func (a *VarlenArgs) group() int { return a.NumQHeads / a.NumKVHeads }

// shape is the planner's view of a; for a graph, planned for the capacity.
func (a *VarlenArgs) shape(graph bool, kvCapacity int) dispatch.VarlenShape {
	s := dispatch.VarlenShape{
		NumSeqs: a.NumSeqs, NumTokens: a.NumTokens, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads,
		HeadDim: a.HeadDim, MaxKVLen: a.MaxKVLen, DType: a.DType, CacheDType: a.CacheDType,
		Layout: a.Layout,
	}
	if m := a.mods(); m.on() {
		s.Mods, s.SlidingWindow = true, a.SlidingWindow
	}
	if graph {
		s.MaxKVLen = graphCapacity(a.KVCapacity, kvCapacity)
		return s
	}
	s.HostCuSeqlensQ = a.HostCuSeqlensQ
	return s
}

// pagedVarlenParams is the parameter list of the paged_varlen_* kernels,
// in PTX order (kernels_src/varlen.cuh).
type pagedVarlenParams struct {
	Out, LSE, PartialOut, PartialMax, PartialSum               driver.DevicePtr
	Q, KCache, VCache, BlockTables, CuSeqlensQ, PosOffsets     driver.DevicePtr
	Fault                                                      driver.DevicePtr
	QTokenStride, OutTokenStride, OutHeadStride                int64
	NumSeqs, TotalQ, NumQHeads, MaxBlocksPerSeq, BlockSizeLog2 int32
	NumBlocks                                                  int64
	Causal, Layout                                             int32
	Scale, KScale, VScale                                      float32
	CuBase, SeqBase, OnePos                                    int32
	SplitBlocks, SplitWave                                     int32
}

// pagedVarlenModsParams is the parameter list of the paged_varlen_*_mods
// kernels: the plain ones', then the score modifiers.
type pagedVarlenModsParams struct {
	Out, LSE, PartialOut, PartialMax, PartialSum               driver.DevicePtr
	Q, KCache, VCache, BlockTables, CuSeqlensQ, PosOffsets     driver.DevicePtr
	Fault                                                      driver.DevicePtr
	QTokenStride, OutTokenStride, OutHeadStride                int64
	NumSeqs, TotalQ, NumQHeads, MaxBlocksPerSeq, BlockSizeLog2 int32
	NumBlocks                                                  int64
	Causal, Layout                                             int32
	Scale, KScale, VScale                                      float32
	CuBase, SeqBase, OnePos                                    int32
	SplitBlocks, SplitWave                                     int32
	Window                                                     int32
	SoftCap                                                    float32
	Sinks, AlibiSlopes                                         driver.DevicePtr
}

// withMods returns p's parameters followed by m's, for a _mods kernel.
func (p *pagedVarlenParams) withMods(m modParams) pagedVarlenModsParams {
	return pagedVarlenModsParams{
		Out: p.Out, LSE: p.LSE, PartialOut: p.PartialOut, PartialMax: p.PartialMax, PartialSum: p.PartialSum,
		Q: p.Q, KCache: p.KCache, VCache: p.VCache, BlockTables: p.BlockTables, CuSeqlensQ: p.CuSeqlensQ,
		PosOffsets: p.PosOffsets, Fault: p.Fault, QTokenStride: p.QTokenStride, OutTokenStride: p.OutTokenStride,
		OutHeadStride: p.OutHeadStride, NumSeqs: p.NumSeqs, TotalQ: p.TotalQ, NumQHeads: p.NumQHeads,
		MaxBlocksPerSeq: p.MaxBlocksPerSeq, BlockSizeLog2: p.BlockSizeLog2, NumBlocks: p.NumBlocks, Causal: p.Causal, Layout: p.Layout,
		Scale: p.Scale, KScale: p.KScale, VScale: p.VScale, CuBase: p.CuBase, SeqBase: p.SeqBase, OnePos: p.OnePos,
		SplitBlocks: p.SplitBlocks, SplitWave: p.SplitWave, Window: m.Window, SoftCap: m.SoftCap, Sinks: m.Sinks, AlibiSlopes: m.AlibiSlopes,
	}
}

// varlenMergeParams is the parameter list of the paged_varlen_merge_*
// kernels, in PTX order (kernels_src/varlen.cuh).
type varlenMergeParams struct {
	Out, LSE, PartialOut, PartialMax, PartialSum, CuSeqlensQ driver.DevicePtr
	OutTokenStride, OutHeadStride                            int64
	NumSeqs, Rows, NumQHeads, Splits, CuBase                 int32
}

// params returns the kernel parameters of a valid a that do not depend on
// the plan, with fault as the fault record.
func (a *VarlenArgs) params(fault driver.DevicePtr, part batchView) pagedVarlenParams {
	pa := a.paged()
	scale, kScale, vScale := pa.kernelScales()
	qs := pa.qStride(a.QTokenStride)
	causal := int32(0)
	if a.Causal {
		causal = 1
	}
	ots, ohs, _ := a.outStrides() // a is valid
	cu, pos := a.CuSeqlensQ.Ptr, a.PosOffsets.Ptr
	if part.oneSeq {
		cu, pos = 0, 0
	}
	return pagedVarlenParams{
		Out: a.Out.Ptr, LSE: a.LSE.Ptr, Q: a.Q.Ptr, KCache: a.KCache.Ptr, VCache: a.VCache.Ptr,
		BlockTables: a.BlockTables.Ptr, CuSeqlensQ: cu, PosOffsets: pos, Fault: fault,
		QTokenStride: qs, OutTokenStride: ots, OutHeadStride: ohs, NumSeqs: int32(a.NumSeqs), TotalQ: int32(a.NumTokens), NumQHeads: int32(a.NumQHeads),
		MaxBlocksPerSeq: int32(a.MaxBlocksPerSeq), BlockSizeLog2: log2(a.BlockSize), NumBlocks: int64(a.NumBlocks),
		Causal: causal, Layout: int32(a.Layout), Scale: scale, KScale: kScale, VScale: vScale, CuBase: part.cuBase, SeqBase: part.seqBase, OnePos: part.onePos,
	}
}

// PlanVarlen returns the plan Varlen would follow for a on stream s right
// now (during graph capture: the graph's plan, as PlanVarlenGraph). For a
// mixed batch Varlen splits (see VarlenArgs.HostCuSeqlensQ) it is the plan
// of the varlen after the decode, with DecodePrefix set; VarlenWithPlan
// does not take it.
func (r *Runtime) PlanVarlen(s *Stream, a *VarlenArgs) (dispatch.VarlenPlan, error) {
	return planOn(r, "PlanVarlen", s, a.Validate, func(capturing bool) (dispatch.VarlenPlan, error) {
		if !capturing {
			if m, ok := r.planMixed(s, a); ok {
				m.release()
				return m.vplan, nil
			}
		}
		return r.planVarlenFor(a, capturing)
	})
}

// PlanVarlenGraph returns the plan a varlen of a captured into a graph
// follows: for a.KVCapacity (else KV_CAPACITY) and a.NumTokens. Size a
// Workspace for it with VarlenPlan.WorkspaceBytes.
func (r *Runtime) PlanVarlenGraph(a *VarlenArgs) (dispatch.VarlenPlan, error) {
	if err := r.live(); err != nil {
		return dispatch.VarlenPlan{}, err
	}
	if err := a.Validate(); err != nil {
		return dispatch.VarlenPlan{}, err
	}
	if err := r.checkVarlenCapacity(a); err != nil {
		return dispatch.VarlenPlan{}, err
	}
	return r.planVarlenShape(a.shape(true, r.cfg.KVCapacity), r.varlenKnobs)
}

// planVarlenFor plans a valid a eagerly, or for a graph when capturing.
func (r *Runtime) planVarlenFor(a *VarlenArgs, capturing bool) (dispatch.VarlenPlan, error) {
	if capturing {
		if err := r.checkVarlenCapacity(a); err != nil {
			return dispatch.VarlenPlan{}, err
		}
	}
	return r.planVarlenShape(a.shape(capturing, r.cfg.KVCapacity), r.varlenKnobs)
}

// checkVarlenCapacity checks that a's block tables hold the capacity a graph
// that captures it is planned for.
func (r *Runtime) checkVarlenCapacity(a *VarlenArgs) error {
	return checkGraphCapacity(varlenArg, "varlen", a.MaxBlocksPerSeq, a.BlockSize, a.KVCapacity, r.cfg.KVCapacity)
}

// planVarlenShape plans shape, loading the kernel's module first so that
// the plan knows its occupancy.
func (r *Runtime) planVarlenShape(shape dispatch.VarlenShape, k dispatch.Knobs) (dispatch.VarlenPlan, error) {
	// Plan once to learn the kernel, load its module (which measures its
	// occupancy), and plan again with it. A cluster plan's kernel is a
	// twin whose split count comes from its plain kernel's figures, and
	// which the device may not place: both load, and the second plan may
	// be the plain kernel's.
	plan, err := dispatch.PlanVarlen(shape, *r.facts.Load(), k)
	if err != nil {
		return plan, planError(err, "VarlenShape", varlenArg)
	}
	if loaded, err := r.loadVarlenKernels(&plan); err != nil {
		if dispatch.VarlenWGKernel(plan.Kernel) && r.dropWGMMA() {
			// The driver refused the wgmma module (PTX 8.0 needs a CUDA
			// 12.0 driver): plan again on the mma.sync kernels, as a
			// device without it would. LoadModule's error says why
			// (pagedkv info shows it).
			return r.planVarlenShape(shape, k)
		}
		return dispatch.VarlenPlan{}, err
	} else if loaded {
		if plan, err = dispatch.PlanVarlen(shape, *r.facts.Load(), k); err != nil {
			return plan, planError(err, "VarlenShape", varlenArg)
		}
		if _, err := r.loadVarlenKernels(&plan); err != nil {
			return dispatch.VarlenPlan{}, err
		}
	}
	if plan.Splits == 1 || plan.Cluster > 0 {
		return plan, nil
	}
	// The merge may live in another module (fp8 caches): load it now, so
	// that a graph capture never loads a module.
	merge, err := dispatch.VarlenMergeKernelName(shape.DType, shape.HeadDim)
	if err != nil {
		return dispatch.VarlenPlan{}, err
	}
	_, _, err = r.function(merge)
	return plan, err
}

// dropWGMMA turns DeviceFacts.WGMMA off for every later plan, and reports
// whether it was on.
func (r *Runtime) dropWGMMA() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.facts.Load()
	if !old.WGMMA {
		return false
	}
	facts := *old
	facts.WGMMA = false
	r.facts.Store(&facts)
	return true
}

// loadVarlenKernels loads the module of plan's kernel and, for a cluster
// plan, that of the plain kernel whose figures its split count comes from,
// and reports whether that loaded a module (new figures for the planner).
func (r *Runtime) loadVarlenKernels(plan *dispatch.VarlenPlan) (loaded bool, err error) {
	names := [2]string{plan.Kernel}
	if plan.Cluster > 0 {
		names[1], _ = dispatch.VarlenClusterPlain(plan.Kernel)
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		_, l, err := r.function(name)
		if err != nil {
			return false, err
		}
		loaded = loaded || l
	}
	return loaded, nil
}

// PlanVarlenWith plans a with explicit knobs instead of the configuration's
// (VarlenKnobs returns those; benchmarks force split counts with it).
// Launch it with VarlenWithPlan.
func (r *Runtime) PlanVarlenWith(a *VarlenArgs, k dispatch.Knobs) (dispatch.VarlenPlan, error) {
	if err := r.live(); err != nil {
		return dispatch.VarlenPlan{}, err
	}
	if err := a.Validate(); err != nil {
		return dispatch.VarlenPlan{}, err
	}
	return r.planVarlenShape(a.shape(false, 0), k)
}

// ReserveVarlen sizes stream s's scratch for a as graph capture will plan
// it (PlanVarlenGraph). Call it before BeginCapture; a varlen with its own
// Workspace needs no reservation.
func (r *Runtime) ReserveVarlen(s *Stream, a *VarlenArgs) error {
	if err := r.on("ReserveVarlen", s); err != nil {
		return err
	}
	plan, err := r.PlanVarlenGraph(a)
	if err != nil || !a.Workspace.IsZero() {
		return err
	}
	return r.reserveSplit(s, &plan.SplitK)
}

// Varlen runs paged varlen attention on stream s, following the plan
// PlanVarlen gives. A batch with no query tokens launches nothing.
func (r *Runtime) Varlen(s *Stream, a *VarlenArgs) error {
	if err := r.on("Varlen", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	return r.runVarlen(s, a, batchView{})
}

// runVarlen plans and launches a valid a, read through view: a mixed batch
// (eager, with host lengths) as its decode and varlen parts, else one plan.
func (r *Runtime) runVarlen(s *Stream, a *VarlenArgs, view batchView) error {
	return r.enqueue(s, func(capturing bool) error {
		if !capturing && !view.oneSeq {
			if m, ok := r.planMixed(s, a); ok {
				defer m.release()
				return r.launchMixed(s, &m)
			}
		}
		// One sequence's lengths are launch parameters (view): a graph
		// replays the lengths it captured, so it is planned for them.
		plan, err := r.planVarlenFor(a, capturing && !view.oneSeq)
		if err != nil {
			return err
		}
		return r.launchVarlen(s, a, view, &plan, capturing)
	})
}

// VarlenWithPlan runs a on s following plan, which must be a plan for a's
// shape from PlanVarlen, PlanVarlenWith or PlanVarlenGraph (any split count
// the planner could give) in one launch; another plan, or one with a
// DecodePrefix, is an error, never a launch.
func (r *Runtime) VarlenWithPlan(s *Stream, a *VarlenArgs, plan dispatch.VarlenPlan) error {
	if err := r.on("VarlenWithPlan", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	if err := checkVarlenPlan(a, &plan); err != nil {
		return err
	}
	return r.enqueue(s, func(capturing bool) error { return r.launchVarlen(s, a, batchView{}, &plan, capturing) })
}

// launchVarlen enqueues the kernels of plan: the varlen kernel, and for
// split-K the merge unless its splits merge on chip (plan.Cluster). Call it
// inside r.do (enqueue).
func (r *Runtime) launchVarlen(s *Stream, a *VarlenArgs, part batchView, plan *dispatch.VarlenPlan, capturing bool) error {
	if a.NumTokens == 0 {
		return nil
	}
	fn, _, err := r.function(plan.Kernel)
	if err != nil {
		return err
	}
	p := a.params(s.fault, part)
	p.SplitBlocks, p.SplitWave = int32(plan.SplitBlocks), int32(plan.SplitWave)
	if plan.Cluster > 0 {
		// The splits merge on chip: no scratch, no second launch.
		if err := driver.LaunchCluster(fn, dim(plan.Grid), dim(plan.Block), driver.Dim3{X: 1, Y: 1, Z: plan.Cluster},
			plan.SharedBytes, s.s, &p); err != nil {
			return err
		}
		return s.afterLaunch(capturing)
	}
	var merge varlenMergeParams
	var mergeFn driver.Function
	if plan.Splits > 1 {
		name, err := dispatch.VarlenMergeKernelName(a.DType, a.HeadDim)
		if err != nil {
			return err
		}
		if mergeFn, _, err = r.function(name); err != nil {
			return err
		}
	}
	// The scratch: the caller's workspace, or the stream's leases, held
	// until the launches are enqueued.
	sc, err := r.acquireScratch(s, a.Workspace, &plan.SplitK, capturing, varlenArg, "varlen")
	if err != nil {
		return err
	}
	if plan.Splits > 1 {
		p.PartialOut = sc.base + driver.DevicePtr(plan.PartialOutOffset*4)
		p.PartialMax = sc.base + driver.DevicePtr(plan.MaxOffset*4)
		p.PartialSum = sc.base + driver.DevicePtr(plan.SumOffset*4)
		rows := int32(a.NumTokens * a.NumQHeads)
		merge = varlenMergeParams{
			Out: a.Out.Ptr, LSE: a.LSE.Ptr, PartialOut: p.PartialOut, PartialMax: p.PartialMax, PartialSum: p.PartialSum,
			CuSeqlensQ: p.CuSeqlensQ, OutTokenStride: p.OutTokenStride, OutHeadStride: p.OutHeadStride,
			NumSeqs: int32(a.NumSeqs), Rows: rows, NumQHeads: int32(a.NumQHeads), Splits: int32(plan.Splits),
			CuBase: part.cuBase,
		}
	}
	if m := a.mods(); m.on() {
		pm := p.withMods(m.params())
		err = driver.Launch(fn, dim(plan.Grid), dim(plan.Block), plan.SharedBytes, s.s, &pm)
	} else {
		err = driver.Launch(fn, dim(plan.Grid), dim(plan.Block), plan.SharedBytes, s.s, &p)
	}
	if err == nil && plan.Splits > 1 {
		grid := driver.Dim3{X: uint32((int64(merge.Rows) + dispatch.VarlenThreads/32 - 1) / (dispatch.VarlenThreads / 32)), Y: 1, Z: 1}
		err = driver.Launch(mergeFn, grid, driver.Dim3{X: dispatch.VarlenThreads, Y: 1, Z: 1}, 0, s.s, &merge)
	}
	sc.release()
	if err != nil {
		return err
	}
	return s.afterLaunch(capturing)
}

// checkVarlenPlan checks that plan is a valid plan for a's shape: the right
// kernel, geometry and scratch layout for its split count (any count from 1
// to VarlenMaxSplits; an eager plan, a forced one or a graph's).
func checkVarlenPlan(a *VarlenArgs, plan *dispatch.VarlenPlan) error {
	if plan.DecodePrefix != 0 {
		return errf("VarlenWithPlan: the plan runs the batch's first %d sequences as a decode before its launch (VarlenPlan.DecodePrefix), which only Varlen does; plan one launch with PlanVarlenWith", plan.DecodePrefix)
	}
	// Any kernel of the head dim will do (PlanVarlen picks by the queries'
	// lengths and the device).
	layout := a.Layout
	long, err := dispatch.VarlenKernelName(a.DType, a.CacheDType, layout, a.HeadDim, false)
	if err != nil {
		return err
	}
	short, _ := dispatch.VarlenKernelName(a.DType, a.CacheDType, layout, a.HeadDim, true)
	k64, _ := dispatch.VarlenK64KernelName(long)
	mods := a.mods()
	kernel := ""
	for _, plain := range [...]string{long, short, k64} {
		k := plain
		if mods.on() {
			// Validate checked that there is a twin.
			k, _ = dispatch.VarlenModsKernel(k)
		}
		if k != "" && (kernel == "" || plan.Kernel == k) {
			kernel = k
		}
		if twin, ok := dispatch.VarlenClusterKernel(k); ok && !mods.on() && plan.Kernel == twin {
			kernel = twin
		}
		if wg, ok := dispatch.VarlenWGTwin(plain); ok {
			if mods.on() {
				wg, _ = dispatch.VarlenModsKernel(wg)
			}
			if plan.Kernel == wg {
				kernel = wg
			}
		}
	}
	_, isTwin := dispatch.VarlenClusterPlain(kernel)
	rows, _, _ := dispatch.VarlenGeometry(kernel)
	splits := max(plan.Splits, 1)
	want := dispatch.VarlenPlan{Launch: dispatch.Launch{
		Kernel: kernel, Block: dispatch.Dim3{X: dispatch.VarlenThreads, Y: 1, Z: 1},
		Grid: dispatch.Dim3{X: uint32(dispatch.VarlenGridX(a.NumSeqs, a.NumTokens, a.group(), rows)),
			Y: uint32(a.NumKVHeads), Z: uint32(splits)},
		SharedBytes: uint32(dispatch.VarlenSharedBytes(kernel)),
	}}
	if isTwin {
		// Its splits form the clusters.
		want.Cluster = uint32(splits)
	} else {
		want.ScratchFloats, want.MaxOffset, want.SumOffset = dispatch.VarlenPlanScratch(a.NumTokens, a.NumQHeads, a.HeadDim, splits)
	}
	if plan.Splits < 1 || plan.Splits > dispatch.VarlenMaxSplits {
		return errf("VarlenWithPlan: VarlenPlan.Splits=%d is out of range; allowed: 1..%d", plan.Splits, dispatch.VarlenMaxSplits)
	}
	if plan.SplitWave < 0 || plan.SplitWave > dispatch.VarlenMaxSplitWave {
		return errf("VarlenWithPlan: VarlenPlan.SplitWave=%d is out of range; allowed: 0 (every row tile takes all splits) or 1..%d", plan.SplitWave, dispatch.VarlenMaxSplitWave)
	}
	if plan.SplitWave > 0 && (plan.SplitBlocks < 1 || plan.SplitBlocks >= plan.SplitWave) {
		return errf("VarlenWithPlan: VarlenPlan.SplitBlocks=%d with SplitWave=%d is out of range; allowed: 1..%d (a split's blocks leave a wave unfilled)", plan.SplitBlocks, plan.SplitWave, plan.SplitWave-1)
	}
	if isTwin && (plan.Splits < 2 || plan.Splits > dispatch.MaxClusterSplits) {
		return errf("VarlenWithPlan: VarlenPlan.Splits=%d with the cluster kernel %s is out of range; allowed: 2..%d", plan.Splits, plan.Kernel, dispatch.MaxClusterSplits)
	}
	if plan.Kernel != want.Kernel || plan.Grid != want.Grid || plan.Cluster != want.Cluster ||
		plan.Block != want.Block || plan.SharedBytes != want.SharedBytes || plan.ScratchFloats != want.ScratchFloats ||
		plan.MaxOffset != want.MaxOffset || plan.SumOffset != want.SumOffset || plan.PartialOutOffset != 0 ||
		plan.Counters != 0 {
		return planMismatch("VarlenWithPlan", varlenArg, "PlanVarlen or PlanVarlenWith", *plan, want,
			"Kernel", "Grid", "Block", "SharedBytes", "ScratchFloats", "MaxOffset", "SumOffset", "PartialOutOffset",
			"Counters", "Cluster")
	}
	return nil
}

// A mixed batch (decode rows beside prompt chunks, as chunked-prefill
// schedulers send every step) runs badly as one varlen launch: one kernel
// serves both, and the 64-row kernel the decode rows call for computes the
// chunks a fifth slower than the 128-row one, while the 128-row kernel
// gives each decode row a block with one computing warp (H200, 2026-12-02:
// 526 µs, or 554 with the 128-row kernel, against 379 µs for a Decode plus
// a Varlen of the chunks). So when the host's lengths show a prefix of
// one-token sequences that alone makes the batch take the 64-row kernel
// (or a batch of one-token sequences only, which then runs as one decode),
// Varlen runs that prefix as a batched decode and the rest as a varlen
// (VarlenPlan.DecodePrefix), both launches sharing one lease of the stream's
// scratch. Both read the batch's own device arrays: the decode takes
// PosOffsets as its KV lengths with kvBias 1 (a decode row's KV length is
// its offset + 1), and the varlen takes views of CuSeqlensQ, PosOffsets
// and the block tables from sequence d on, with cuBase the host's
// CuSeqlensQ[d] (its kernels subtract it from every bound, and clamp and
// record bounds that then fall outside its tokens, as for any batch), so
// no kernel rewrites them first.

// mixedSplit is a valid VarlenArgs cut into a decode of its first d
// sequences and a varlen of the rest; their workspaces are set at launch.
type mixedSplit struct {
	d          int
	decode     DecodeArgs
	decodePart batchView // kvBias 1: its KVLens are the batch's PosOffsets
	rest       VarlenArgs
	restPart   batchView // cuBase and seqBase of its first sequence
	dplan      dispatch.DecodePlan
	vplan      dispatch.VarlenPlan
	host       *[]int32 // the decode's HostKVLens and the rest's HostCuSeqlensQ, from mixedHost
}

// mixedHost holds the host lengths planMixed derives ([n+1] int32 per
// batch of n sequences), so that a mixed Varlen, an every-step call,
// allocates nothing in steady state.
var mixedHost = sync.Pool{New: func() any { return new([]int32) }}

// release returns m's host lengths to mixedHost; m is not used after.
func (m *mixedSplit) release() { mixedHost.Put(m.host) }

// mixedLengths fills buf ([n+1]) with the decode's KV lengths (pos + 1 of
// the first d sequences) and the rest's query bounds (cu from d on, less
// cu[d]) and returns both views and the largest KV length of each part.
func mixedLengths(buf, cu, pos []int32, d int) (kv, restCu []int32, maxKV, restMaxKV int) {
	kv, restCu = buf[:d], buf[d:]
	for i := range kv {
		kv[i] = pos[i] + 1
		maxKV = max(maxKV, int(kv[i]))
	}
	for i := range restCu {
		restCu[i] = cu[d+i] - cu[d]
	}
	for i, p := range pos[d:] {
		restMaxKV = max(restMaxKV, int(p)+int(restCu[i+1]-restCu[i]))
	}
	return kv, restCu, maxKV, restMaxKV
}

// decodePrefix returns the number of leading one-token sequences of a
// valid a that Varlen runs as a decode, or 0 for one varlen launch: it
// needs the host's lengths, no Workspace of the engine's (sized for one
// launch), Out token-major and contiguous (a decode writes [seqs, heads,
// dim]), a prefix of at most maxDecodeSeqs sequences with the rest
// non-empty, and the prefix to be what makes the batch take the 64-row
// kernel (the rest alone takes the 128-row one).
func (a *VarlenArgs) decodePrefix() int {
	cu, pos, n := a.HostCuSeqlensQ, a.HostPosOffsets, a.NumSeqs
	if len(cu) != n+1 || len(pos) != n || !a.Workspace.IsZero() {
		return 0
	}
	contiguous := a.OutTokenStride == 0 && a.OutHeadStride == 0 ||
		a.OutTokenStride == a.NumQHeads*a.HeadDim && a.OutHeadStride == a.HeadDim
	if !contiguous {
		return 0
	}
	d := 0
	for d < n && cu[d+1]-cu[d] == 1 {
		d++
	}
	if d == 0 || d > maxDecodeSeqs {
		return 0
	}
	if d == n {
		// Every sequence is a decode: Decode's split-K and GQA read-once
		// path serve them better than any varlen tile.
		return d
	}
	layout := a.Layout
	short, err := dispatch.VarlenKernelName(a.DType, a.CacheDType, layout, a.HeadDim, true)
	if err != nil {
		return 0
	}
	if long, _ := dispatch.VarlenKernelName(a.DType, a.CacheDType, layout, a.HeadDim, false); long == short {
		return 0
	}
	g := a.group()
	if !dispatch.VarlenShortRows(a.NumTokens, n, g) || dispatch.VarlenShortRows(a.NumTokens-int(cu[d]), n-d, g) {
		return 0
	}
	return d
}

// planMixed returns the split of a valid a, eager on s, and the plans of
// both parts, or false when a runs as one launch (decodePrefix is 0, or a
// part does not validate or plan). Release a split it returns.
func (r *Runtime) planMixed(s *Stream, a *VarlenArgs) (mixedSplit, bool) {
	d := a.decodePrefix()
	if d == 0 {
		return mixedSplit{}, false
	}
	m := mixedSplit{d: d, host: mixedHost.Get().(*[]int32)}
	cu, pos, n := a.HostCuSeqlensQ, a.HostPosOffsets, a.NumSeqs
	if cap(*m.host) < n+1 {
		*m.host = make([]int32, n+1)
	}
	kv, restCu, maxKV, restMaxKV := mixedLengths((*m.host)[:n+1], cu, pos, d)
	m.decode = DecodeArgs{
		Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables, Out: a.Out, LSE: a.LSE,
		NumSeqs: d, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: a.BlockSize, NumBlocks: a.NumBlocks, MaxBlocksPerSeq: a.MaxBlocksPerSeq, MaxKVLen: maxKV,
		QTokenStride: a.QTokenStride, HostKVLens: kv,
		DType: a.DType, CacheDType: a.CacheDType, Layout: a.Layout, Scale: a.Scale, KScale: a.KScale, VScale: a.VScale,
		SlidingWindow: a.SlidingWindow, SoftCap: a.SoftCap, Sinks: a.Sinks, AlibiSlopes: a.AlibiSlopes,
	}
	m.decode.KVLens = a.PosOffsets
	m.decodePart.kvBias = 1
	if d == n {
		// No varlen part: the plan is the decode's alone.
		var err error
		if m.dplan, err = r.PlanDecode(s, &m.decode); err != nil {
			m.release()
			return mixedSplit{}, false
		}
		m.vplan = dispatch.VarlenPlan{DecodePrefix: d}
		return m, true
	}
	base := int64(cu[d])
	rest := *a
	rest.NumSeqs, rest.NumTokens, rest.MaxKVLen = n-d, a.NumTokens-int(base), restMaxKV
	rest.HostCuSeqlensQ, rest.HostPosOffsets = restCu, pos[d:]
	pa := a.paged()
	size := int64(a.DType.Size())
	rowBytes := int64(a.NumQHeads) * int64(a.HeadDim) * size
	var err error
	tail := func(b Buffer, off int64) Buffer {
		if err != nil || b.IsZero() {
			return b
		}
		var t Buffer
		t, err = b.Slice(off, b.Bytes-off)
		return t
	}
	rest.Q = tail(a.Q, base*pa.qStride(a.QTokenStride)*size)
	rest.Out = tail(a.Out, base*rowBytes)
	rest.LSE = tail(a.LSE, base*int64(a.NumQHeads)*4)
	rest.PosOffsets = tail(a.PosOffsets, int64(d)*4)
	rest.BlockTables = tail(a.BlockTables, int64(d)*int64(a.MaxBlocksPerSeq)*4)
	rest.CuSeqlensQ = tail(a.CuSeqlensQ, int64(d)*4)
	m.restPart.cuBase, m.restPart.seqBase = cu[d], int32(d)
	m.rest = rest
	if err != nil || m.rest.Validate() != nil {
		m.release()
		return mixedSplit{}, false
	}
	if m.dplan, err = r.PlanDecode(s, &m.decode); err != nil {
		m.release()
		return mixedSplit{}, false
	}
	if m.vplan, err = r.planVarlenFor(&m.rest, false); err != nil {
		m.release()
		return mixedSplit{}, false
	}
	m.vplan.DecodePrefix = d
	return m, true
}

// launchMixed enqueues m (from planMixed) on s, not capturing: the decode
// and the varlen, in one lease of s's scratch laid out as the decode's
// workspace, then the varlen's (256-byte aligned), or none when neither
// splits. Call it inside r.do (enqueue); the decode goes through
// DecodeWithPlan, whose enqueue nests.
func (r *Runtime) launchMixed(s *Stream, m *mixedSplit) error {
	decBytes := (m.dplan.WorkspaceBytes() + 255) / 256 * 256
	varBytes := m.vplan.WorkspaceBytes()
	if decBytes+varBytes > 0 {
		lease, err := r.scratch.Acquire(uintptr(s.s), (decBytes+varBytes+3)/4, false)
		if err != nil {
			return err
		}
		defer lease.Release()
		at := driver.DevicePtr(lease.Ptr)
		if decBytes > 0 {
			m.decode.Workspace = Buffer{Ptr: at, Bytes: decBytes}
		}
		if varBytes > 0 {
			m.rest.Workspace = Buffer{Ptr: at + driver.DevicePtr(decBytes), Bytes: varBytes}
		}
		if m.dplan.Counters > 0 {
			// A decode's workspace counters start zero; the pool's scratch is not.
			if err := driver.MemsetD32Async(m.decode.Workspace.Ptr, 0, uint64(m.dplan.Counters), s.s); err != nil {
				return err
			}
		}
	}
	if err := runPart(r, s, &m.decode, m.decodePart, &m.dplan); err != nil {
		return err
	}
	if m.vplan.Kernel == "" {
		return nil // every sequence was a decode
	}
	return r.launchVarlen(s, &m.rest, m.restPart, &m.vplan, false)
}
