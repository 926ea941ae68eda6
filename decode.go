package pagedkv

import (
	"math"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// DecodeArgs describes one batched paged decode attention: one query token
// per sequence attending over its paged KV cache.
//
//   - Q: [NumSeqs, NumQHeads, HeadDim] of DType (f16 or bf16); QTokenStride is
//     the element stride between sequences (0 = NumQHeads·HeadDim; else a
//     multiple of 8, and Q 16-byte aligned: q rows are read in 16-byte pieces).
//   - KCache, VCache: in Layout, [NumBlocks, BlockSize, NumKVHeads,
//     HeadDim] by default (LayoutFlash), of CacheDType: DType, or E4M3 with
//     real value = stored · KScale (VScale). LayoutXSplit and LayoutShuffle
//     (see CacheLayout) take BlockSize ≥ x (8 for 16-bit caches, 16 for
//     e4m3): their V holds x consecutive tokens of one element per 16
//     bytes, which the kernels load as they are and read transposed.
//     LayoutHND ([NumBlocks, NumKVHeads, BlockSize, HeadDim]) runs the
//     flash layout's kernels and takes what LayoutFlash takes, with
//     NumBlocks·NumKVHeads·BlockSize ≤ 2^32.
//   - BlockTables: int32 [NumSeqs, MaxBlocksPerSeq]; KVLens: int32 [NumSeqs],
//     each sequence's KV length counting this step's token, whose K and V
//     must already be in the cache (Append, RopeCache or QKVNormRope first;
//     0 allowed: that sequence's output is zeros and its LSE is -inf). Both
//     live on the device; see the package doc for what kernels do with bad
//     values.
//   - Out: [NumSeqs, NumQHeads, HeadDim] of DType. LSE (optional): f32
//     [NumSeqs, NumQHeads], the natural log of Σ exp(Scale·q·k).
//   - MaxKVLen: the batch's largest kv length, known to the host, used for
//     planning only (kernels read KVLens themselves).
//   - HostKVLens (optional): the host's copy of KVLens, NumSeqs values each
//     at most MaxKVLen, for planning only. With it an eager decode of a
//     ragged batch (one long request among short ones) is balanced: each
//     sequence is split from its own length, so the long one spreads over
//     the GPU, and a uniform one runs without the balanced plan's partition
//     and merge. Without it a batch of 16 or more sequences is planned
//     balanced, as a graph is (each sequence split from its device length
//     at the call); a smaller one as if every sequence were MaxKVLen long.
//     Balanced plans serve up to dispatch.BalanceMaxSeqs (512) sequences;
//     a larger batch, eager or in a graph, gets the uniform plan of
//     MaxKVLen (a graph: its capacity), whose blocks fill the GPU by
//     sequences alone.
//   - KVCapacity: the largest kv length any replay of a graph that captures
//     this decode will see; 0 means the runtime's KV_CAPACITY. A decode
//     captured into a graph is planned for it, and every replay splits each
//     sequence from its length at that replay (balanced from
//     dispatch.BalanceGraphMinSeqs sequences; a smaller batch cuts each
//     sequence into the splits the capacity's rule gives); MaxBlocksPerSeq
//     · BlockSize must hold it. Eager decodes ignore it.
//   - Workspace (optional): the engine's own split-K scratch for this
//     decode, instead of the stream's pool: at least DecodePlan.WorkspaceBytes of
//     the decode's plan (PlanDecode, or PlanDecodeGraph for a graph),
//     256-byte aligned,
//     zeroed once before its first use (Stream.Fill); decodes leave its
//     counter words zero again. Its first WorkspaceFloatsOffset bytes hold
//     the counters, whose number follows NumSeqs and NumKVHeads, and the
//     split-K floats follow them: a varlen, or a decode of another plan,
//     that uses the same buffer writes floats over counters this decode
//     needs zero. So one buffer serves decodes of one plan (one graph
//     per buffer, or one batch shape); after any other use, zero its first
//     WorkspaceFloatsOffset bytes again before this decode runs. Two
//     decodes that may run at once must not share one, and it must outlive
//     every graph that captured it.
//   - Scale: softmax scale; 0 means 1/√HeadDim.
//   - SlidingWindow, SoftCap, Sinks, AlibiSlopes: the score modifiers, all
//     off by default. The query of a sequence of n tokens sits at position
//     p = n−1, key j gets s = Scale·q·k_j, then s = SoftCap·tanh(s/SoftCap)
//     (SoftCap > 0: Gemma 2's logit soft-capping), then s +=
//     AlibiSlopes[h]·(j − p) (ALiBi; f32 [NumQHeads]). SlidingWindow > 0
//     attends only keys p−SlidingWindow+1 … p (Mistral's and Gemma's
//     sliding_window; FlashInfer's window_left is SlidingWindow−1), and
//     pages wholly before the window are not read: the plan splits the
//     window, not the sequence. Sinks (f32 [NumQHeads]) add exp(Sinks[h]) to
//     head h's softmax denominator, a logit that attends no value (gpt-oss);
//     LSE includes it. Every cache dtype and layout takes them; they run as
//     plain split-K, never as clusters.
//
// Aliasing: Out and LSE must not overlap each other or any input; the inputs
// may overlap one another (they are only read). Workspace must not overlap
// any other buffer. Validate refuses an overlap (ErrAliasing).
//
// Bounds: NumSeqs ≤ 65535 (the grid's y), NumKVHeads ≤ 2^16, NumQHeads ≤
// 16·NumKVHeads, NumBlocks·BlockSize ≤ 2^31−1 (as in every op: block ids
// and pool rows are int32), with LayoutHND also NumBlocks·NumKVHeads·
// BlockSize ≤ 2^32 (its kernels index one head's pages as blocks of their
// own, in 32 bits; 8 KV heads of 16-token pages: 2^25 blocks),
// MaxBlocksPerSeq·BlockSize ≤ 2^30 (token positions are int32 in the kernels, whose split
// arithmetic reaches up to 63 pages and a tile past the table's end);
// QTokenStride ≤ 2^31 elements.
type DecodeArgs struct {
	Q, KCache, VCache   Buffer
	BlockTables, KVLens Buffer
	Out, LSE            Buffer
	Workspace           Buffer

	NumSeqs, NumQHeads, NumKVHeads, HeadDim int
	BlockSize, NumBlocks, MaxBlocksPerSeq   int
	MaxKVLen                                int
	QTokenStride                            int
	KVCapacity                              int
	HostKVLens                              []int32

	DType, CacheDType     DType
	Scale, KScale, VScale float32
	Layout                CacheLayout

	SlidingWindow      int
	SoftCap            float32
	Sinks, AlibiSlopes Buffer
}

const decodeArg = "DecodeArgs"

// Validate checks every shape, dtype, alignment and buffer capacity the host
// can see.
func (a *DecodeArgs) Validate() error {
	if a == nil {
		return errf("the *DecodeArgs is nil")
	}
	p := a.paged()
	sp := spans{arg: decodeArg}
	if err := p.types(); err != nil {
		return err
	}
	if err := inRange(decodeArg, "NumSeqs", a.NumSeqs, 1, maxDecodeSeqs); err != nil {
		return err
	}
	if err := p.heads(); err != nil {
		return err
	}
	if err := p.pages(); err != nil {
		return err
	}
	if err := checkAttentionLayout(decodeArg, a.Layout, a.CacheDType, a.HeadDim, a.BlockSize, a.NumBlocks, a.NumKVHeads); err != nil {
		return err
	}
	if a.HeadDim == dispatch.PaddedHeadDim && a.Layout.Laid() {
		return errf("%s.HeadDim=%d is not supported with Layout=%v; allowed there: Layout=%v or %v (or another head dim)", decodeArg, a.HeadDim, a.Layout, LayoutFlash, LayoutHND)
	}
	if len(a.HostKVLens) != 0 && len(a.HostKVLens) != a.NumSeqs {
		return errf("%s.HostKVLens has %d values; allowed: none, or NumSeqs=%d", decodeArg, len(a.HostKVLens), a.NumSeqs)
	}
	for i, n := range a.HostKVLens {
		if n < 0 || int(n) > a.MaxKVLen {
			return errf("%s.HostKVLens[%d]=%d is not allowed; allowed: 0..MaxKVLen=%d", decodeArg, i, n, a.MaxKVLen)
		}
	}
	if err := p.scalars(&sp); err != nil {
		return err
	}
	mods := a.mods()
	if err := mods.check(decodeArg, &sp, a.NumQHeads); err != nil {
		return err
	}
	if _, err := p.qRows(&sp, a.Q, a.NumSeqs, a.QTokenStride, "NumSeqs", "QTokenStride"); err != nil {
		return err
	}
	if err := p.caches(&sp); err != nil {
		return err
	}
	if err := sp.buffer("KVLens", a.KVLens, int64(a.NumSeqs)*4, 4, read); err != nil {
		return err
	}
	esize := int64(a.DType.Size())
	outBytes, err := size(decodeArg, "NumSeqs·NumQHeads·HeadDim", esize, int64(a.NumSeqs), int64(a.NumQHeads), int64(a.HeadDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("Out", a.Out, outBytes, uintptr(esize), write); err != nil {
		return err
	}
	if !a.LSE.IsZero() {
		if err := sp.buffer("LSE", a.LSE, int64(a.NumSeqs)*int64(a.NumQHeads)*4, 4, write); err != nil {
			return err
		}
	}
	return sp.check()
}

// paged returns a's share of the attention ops' checks.
func (a *DecodeArgs) paged() pagedAttention {
	return pagedAttention{
		arg: decodeArg, dtype: a.DType, cacheDType: a.CacheDType,
		headDim: a.HeadDim, numQHeads: a.NumQHeads, numKVHeads: a.NumKVHeads, maxKVHeads: 1 << 16,
		numSeqs: a.NumSeqs, blockSize: a.BlockSize, numBlocks: a.NumBlocks, maxBlocksPerSeq: a.MaxBlocksPerSeq,
		maxKVLen: a.MaxKVLen, kvCapacity: a.KVCapacity, keyCache: a.KCache, valueCache: a.VCache,
		blockTables: a.BlockTables, workspace: a.Workspace, scale: a.Scale, kScale: a.KScale, vScale: a.VScale,
	}
}

// mods returns a's score modifiers.
func (a *DecodeArgs) mods() scoreMods {
	return scoreMods{window: a.SlidingWindow, softCap: a.SoftCap, sinks: a.Sinks, alibi: a.AlibiSlopes}
}

// shape is the planner's view of a: eager, planned for MaxKVLen and the host
// lengths; for a graph, planned for the capacity.
func (a *DecodeArgs) shape(graph bool, kvCapacity int) dispatch.DecodeShape {
	s := dispatch.DecodeShape{
		NumSeqs: a.NumSeqs, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: a.BlockSize, MaxKVLen: a.MaxKVLen, MaxBlocksPerSeq: a.MaxBlocksPerSeq,
		DType: a.DType, CacheDType: a.CacheDType, HostKVLens: a.HostKVLens, Layout: a.Layout,
	}
	if m := a.mods(); m.on() {
		s.Mods, s.SlidingWindow = true, a.SlidingWindow
	}
	if graph {
		s.MaxKVLen, s.HostKVLens, s.Graph = graphCapacity(a.KVCapacity, kvCapacity), nil, true
	}
	return s
}

// pagedDecodeParams is the parameter list of the paged_decode_* kernels, in
// PTX order (kernels_src/decode.cuh).
type pagedDecodeParams struct {
	Out, LSE, PartialOut, PartialMax, PartialSum driver.DevicePtr
	Counters                                     driver.DevicePtr
	Q, KCache, VCache, BlockTables, KVLens       driver.DevicePtr
	Fault                                        driver.DevicePtr
	QTokenStride                                 int64
	NumQHeads, MaxBlocksPerSeq, BlockSizeLog2    int32
	NumBlocks                                    int64
	Scale, KScale, VScale                        float32
	Work                                         driver.DevicePtr
	Layout                                       int32
	KVBias                                       int32
}

// params returns the kernel parameters of a valid a that do not depend on
// the plan, with fault as the fault record.
func (a *DecodeArgs) params(fault driver.DevicePtr, part batchView) pagedDecodeParams {
	pa := a.paged()
	scale, kScale, vScale := pa.kernelScales()
	qs := pa.qStride(a.QTokenStride)
	return pagedDecodeParams{
		Out: a.Out.Ptr, LSE: a.LSE.Ptr, Q: a.Q.Ptr, KCache: a.KCache.Ptr, VCache: a.VCache.Ptr,
		BlockTables: a.BlockTables.Ptr, KVLens: a.KVLens.Ptr, Fault: fault,
		QTokenStride: qs, NumQHeads: int32(a.NumQHeads), MaxBlocksPerSeq: int32(a.MaxBlocksPerSeq),
		BlockSizeLog2: log2(a.BlockSize), NumBlocks: int64(a.NumBlocks),
		Scale: scale, KScale: kScale, VScale: vScale, Layout: int32(a.Layout), KVBias: part.kvBias,
	}
}

// pagedDecodeModsParams is the parameter list of the paged_decode_*_mods
// kernels, in PTX order: pagedDecodeParams', then modParams'.
type pagedDecodeModsParams struct {
	Out, LSE, PartialOut, PartialMax, PartialSum driver.DevicePtr
	Counters                                     driver.DevicePtr
	Q, KCache, VCache, BlockTables, KVLens       driver.DevicePtr
	Fault                                        driver.DevicePtr
	QTokenStride                                 int64
	NumQHeads, MaxBlocksPerSeq, BlockSizeLog2    int32
	NumBlocks                                    int64
	Scale, KScale, VScale                        float32
	Work                                         driver.DevicePtr
	Layout                                       int32
	KVBias                                       int32
	Window                                       int32
	SoftCap                                      float32
	Sinks, AlibiSlopes                           driver.DevicePtr
}

// withMods returns p's parameters followed by m's, for a _mods kernel.
func (p *pagedDecodeParams) withMods(m modParams) pagedDecodeModsParams {
	return pagedDecodeModsParams{
		Out: p.Out, LSE: p.LSE, PartialOut: p.PartialOut, PartialMax: p.PartialMax, PartialSum: p.PartialSum,
		Counters: p.Counters, Q: p.Q, KCache: p.KCache, VCache: p.VCache, BlockTables: p.BlockTables, KVLens: p.KVLens,
		Fault: p.Fault, QTokenStride: p.QTokenStride, NumQHeads: p.NumQHeads, MaxBlocksPerSeq: p.MaxBlocksPerSeq,
		BlockSizeLog2: p.BlockSizeLog2, NumBlocks: p.NumBlocks, Scale: p.Scale, KScale: p.KScale, VScale: p.VScale,
		Work: p.Work, Layout: p.Layout, KVBias: p.KVBias,
		Window: m.Window, SoftCap: m.SoftCap, Sinks: m.Sinks, AlibiSlopes: m.AlibiSlopes,
	}
}

// decodePartitionParams is the parameter list of decode_partition, in PTX
// order (kernels_src/partition.cu).
type decodePartitionParams struct {
	Work, KVLens                                                           driver.DevicePtr
	NumSeqs, Items, Wave, MaxBlocksPerSeq, BlockSizeLog2, MinPages, KVBias int32
}

// PlanDecode returns the plan Decode would follow for a on stream s right now
// (while s is capturing, the graph's plan: for a.KVCapacity, else
// KV_CAPACITY). It loads the kernel's module if
// needed, so the occupancy it plans with is the device's own.
func (r *Runtime) PlanDecode(s *Stream, a *DecodeArgs) (dispatch.DecodePlan, error) {
	return planOn(r, "PlanDecode", s, a.Validate, func(capturing bool) (dispatch.DecodePlan, error) {
		plan, _, err := r.planFor(a, capturing)
		return plan, err
	})
}

// planFor plans a valid a eagerly, or for a graph when capturing.
func (r *Runtime) planFor(a *DecodeArgs, capturing bool) (dispatch.DecodePlan, driver.Function, error) {
	if capturing {
		if err := r.checkCapacity(a); err != nil {
			return dispatch.DecodePlan{}, 0, err
		}
	}
	return r.planAndLoad(a.shape(capturing, r.cfg.KVCapacity), r.knobs)
}

// checkCapacity checks that a's block tables hold the capacity a graph that
// captures it is planned for.
func (r *Runtime) checkCapacity(a *DecodeArgs) error {
	return checkGraphCapacity(decodeArg, "decode", a.MaxBlocksPerSeq, a.BlockSize, a.KVCapacity, r.cfg.KVCapacity)
}

// planAndLoad plans shape and returns the plan's kernel, loading its module
// if needed. A plan made before a module's first load did not know its
// occupancy, so it is made again; the new plan may name another kernel (a
// cluster kernel once the split count changes), which is then resolved in
// turn. Each round loads a module, so this ends.
//
// The final plan is remembered by the shape's key, the knobs and the facts
// it was made with, so a serving loop that sends the same few shapes step
// after step plans each once.
func (r *Runtime) planAndLoad(shape dispatch.DecodeShape, k dispatch.Knobs) (dispatch.DecodePlan, driver.Function, error) {
	key := shape.Key()
	for {
		facts := r.facts.Load()
		if plan, fn, ok := r.decodePlans.get(&key, &k, facts); ok {
			return plan, fn, nil
		}
		plan, err := dispatch.PlanDecode(shape, *facts, k)
		if err != nil {
			return plan, 0, planError(err, "DecodeShape", decodeArg)
		}
		fn, loaded, err := r.function(plan.Kernel)
		if err != nil {
			return plan, fn, err
		}
		if !loaded {
			r.decodePlans.put(&key, &k, facts, &plan, fn)
			return plan, fn, nil
		}
	}
}

// ReserveDecode sizes stream s's scratch for a as graph capture will plan
// it: for a.KVCapacity (else KV_CAPACITY) and a.NumSeqs. Call it before
// BeginCapture, once per batch size the engine captures (the largest is
// enough for the pool, which keeps the biggest reservation). A decode with its
// own Workspace needs no reservation.
func (r *Runtime) ReserveDecode(s *Stream, a *DecodeArgs) error {
	if err := r.on("ReserveDecode", s); err != nil {
		return err
	}
	plan, err := r.PlanDecodeGraph(a)
	if err != nil || !a.Workspace.IsZero() {
		return err
	}
	return r.reserveSplit(s, &plan.SplitK)
}

// PlanDecodeGraph returns the plan a decode of a captured into a graph
// follows (for a.KVCapacity, else KV_CAPACITY). Size a Workspace for it with
// DecodePlan.WorkspaceBytes.
func (r *Runtime) PlanDecodeGraph(a *DecodeArgs) (dispatch.DecodePlan, error) {
	if err := r.live(); err != nil {
		return dispatch.DecodePlan{}, err
	}
	if err := a.Validate(); err != nil {
		return dispatch.DecodePlan{}, err
	}
	if err := r.checkCapacity(a); err != nil {
		return dispatch.DecodePlan{}, err
	}
	plan, _, err := r.planAndLoad(a.shape(true, r.cfg.KVCapacity), r.knobs)
	return plan, err
}

// Decode runs batched paged decode attention on stream s, following the
// plan PlanDecode gives.
//
// The host side of a call is validation, one capture query, planning (a
// remembered plan for a shape seen before) and one or two launches, all in
// one pass through the Runtime's context.
func (r *Runtime) Decode(s *Stream, a *DecodeArgs) error {
	if err := r.on("Decode", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	return r.enqueue(s, func(capturing bool) error {
		plan, fn, err := r.planFor(a, capturing)
		if err != nil {
			return err
		}
		return r.launchDecode(s, a, batchView{}, &plan, fn, capturing)
	})
}

// PlanDecodeWith plans a eagerly (for a.MaxKVLen and a.HostKVLens, as
// Decode would) with explicit knobs instead of the configuration's
// (DecodeKnobs returns those): benchmarks use it to force split counts.
// Launch the plan with DecodeWithPlan.
func (r *Runtime) PlanDecodeWith(a *DecodeArgs, k dispatch.Knobs) (dispatch.DecodePlan, error) {
	if err := r.live(); err != nil {
		return dispatch.DecodePlan{}, err
	}
	if err := a.Validate(); err != nil {
		return dispatch.DecodePlan{}, err
	}
	plan, _, err := r.planAndLoad(a.shape(false, 0), k)
	return plan, err
}

// DecodeWithPlan runs a on s following plan, which must be a plan for a's
// shape (from PlanDecode or PlanDecodeWith); a plan for another shape is an
// error, never a launch. Its SharedBytes may give the kernel another ring
// depth (dispatch.DecodeStagesShared) within the device's limit.
func (r *Runtime) DecodeWithPlan(s *Stream, a *DecodeArgs, plan dispatch.DecodePlan) error {
	return r.decodeWithPlan(s, a, batchView{}, plan)
}

// launchPart runs a as the decode part of a mixed batch (batchPart).
func (a *DecodeArgs) launchPart(r *Runtime, s *Stream, part batchView, plan *dispatch.DecodePlan) error {
	return r.decodeWithPlan(s, a, part, *plan)
}

// decodeWithPlan is DecodeWithPlan for one part of a batch (see batchView).
func (r *Runtime) decodeWithPlan(s *Stream, a *DecodeArgs, part batchView, plan dispatch.DecodePlan) error {
	if err := r.on("DecodeWithPlan", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	if err := checkDecodePlan(a, &plan, r.facts.Load()); err != nil {
		return err
	}
	fn, _, err := r.function(plan.Kernel)
	if err != nil {
		return err
	}
	return r.enqueue(s, func(capturing bool) error { return r.launchDecode(s, a, part, &plan, fn, capturing) })
}

// launchDecode enqueues the kernels of plan. Call it inside r.do (enqueue).
func (r *Runtime) launchDecode(s *Stream, a *DecodeArgs, mixed batchView, plan *dispatch.DecodePlan, fn driver.Function, capturing bool) error {
	p := a.params(s.fault, mixed)
	var part decodePartitionParams
	var partFn driver.Function
	if plan.Balanced() {
		var err error
		if partFn, _, err = r.function(dispatch.DecodePartitionKernel); err != nil {
			return err
		}
	}
	// The scratch: the caller's workspace, or the stream's leases, held
	// until the launches are enqueued.
	sc, err := r.acquireScratch(s, a.Workspace, &plan.SplitK, capturing, decodeArg, "decode")
	if err != nil {
		return err
	}
	if plan.ScratchFloats > 0 {
		p.Counters = sc.counters
		p.PartialOut = sc.base + driver.DevicePtr(plan.PartialOutOffset*4)
		p.PartialMax = sc.base + driver.DevicePtr(plan.MaxOffset*4)
		p.PartialSum = sc.base + driver.DevicePtr(plan.SumOffset*4)
		if plan.Balanced() {
			p.Work = sc.base + driver.DevicePtr(plan.WorkOffset*4)
			part = decodePartitionParams{
				Work: p.Work, KVLens: a.KVLens.Ptr, KVBias: mixed.kvBias, NumSeqs: int32(a.NumSeqs), Items: int32(plan.Grid.Y), Wave: int32(plan.BalanceWave),
				MaxBlocksPerSeq: int32(a.MaxBlocksPerSeq), BlockSizeLog2: log2(a.BlockSize), MinPages: int32(plan.BalanceMinPages),
			}
		}
	}
	switch {
	case plan.Cluster > 0:
		err = driver.LaunchCluster(fn, dim(plan.Grid), dim(plan.Block), driver.Dim3{X: 1, Y: 1, Z: plan.Cluster}, plan.SharedBytes, s.s, &p)
	case plan.Balanced():
		one := driver.Dim3{X: 1, Y: 1, Z: 1}
		if err = driver.Launch(partFn, one, driver.Dim3{X: dispatch.DecodeThreads, Y: 1, Z: 1}, 0, s.s, &part); err == nil {
			err = launchDecodeKernel(fn, plan, s, &p, a)
		}
	default:
		err = launchDecodeKernel(fn, plan, s, &p, a)
	}
	sc.release()
	if err != nil {
		return err
	}
	return s.afterLaunch(capturing)
}

// launchDecodeKernel launches the decode kernel fn of plan with p, and
// with a's score modifiers for a _mods kernel (a has some).
func launchDecodeKernel(fn driver.Function, plan *dispatch.DecodePlan, s *Stream, p *pagedDecodeParams, a *DecodeArgs) error {
	if m := a.mods(); m.on() {
		pm := p.withMods(m.params())
		return driver.Launch(fn, dim(plan.Grid), dim(plan.Block), plan.SharedBytes, s.s, &pm)
	}
	return driver.Launch(fn, dim(plan.Grid), dim(plan.Block), plan.SharedBytes, s.s, p)
}

// checkDecodePlan checks that plan is a valid plan for a's shape: the right
// kernels, geometry and scratch layout for its split count.
func checkDecodePlan(a *DecodeArgs, plan *dispatch.DecodePlan, dev *dispatch.DeviceFacts) error {
	group := a.NumQHeads / a.NumKVHeads
	// The kernels for the caches' layout (fp8 ones have a build for the
	// x-split and shuffle layouts; the _mods kernels read every layout, and
	// are named from the flash-layout kernels).
	layout := a.Layout
	if m := a.mods(); m.on() {
		layout = LayoutFlash
	}
	named := func(name string, err error) (string, error) { return dispatch.DecodeLayoutKernel(name, layout), err }
	// A group the narrow kernels serve may also run on the wide ones, which
	// serve every group (PAGEDKV_DECODE_NARROW=0).
	wide, err := named(dispatch.DecodeKernelName(a.DType, a.CacheDType, a.HeadDim, dispatch.MaxGroupSize))
	if err != nil {
		return err
	}
	// (The cluster twin only for a cluster plan: the head dims without
	// one build an error, which allocates.)
	isWide := plan.Kernel == wide
	if !isWide && plan.Cluster > 0 {
		wideCluster, _ := named(dispatch.ClusterDecodeKernelName(a.DType, a.CacheDType, a.HeadDim, dispatch.MaxGroupSize))
		isWide = plan.Kernel == wideCluster
	}
	if isWide {
		group = dispatch.MaxGroupSize
	}
	kernel, err := named(dispatch.DecodeKernelName(a.DType, a.CacheDType, a.HeadDim, group))
	if err != nil {
		return err
	}
	// Either build of a kernel that has a compute_90 one, on a device that
	// runs it.
	if sm90, ok := dispatch.SM90DecodeKernelName(a.DType, a.CacheDType, a.HeadDim, group); ok && plan.Kernel == dispatch.DecodeLayoutKernel(sm90, layout) && dev.Clusters {
		kernel = plan.Kernel
	}
	// Score modifiers: the _mods twin (Validate checked there is one) of the
	// wide or the narrow kernel, never as clusters.
	if m := a.mods(); m.on() {
		if twin, _ := dispatch.DecodeModsKernel(wide); plan.Kernel == twin {
			kernel = wide
		}
		kernel, _ = dispatch.DecodeModsKernel(kernel)
		if plan.Cluster > 0 {
			return errf("DecodeWithPlan: the plan runs its splits as clusters (%s); a decode with score modifiers (DecodeArgs.SlidingWindow, SoftCap, Sinks, AlibiSlopes) runs %s, never as clusters: plan with DecodeShape.Mods",
				plan.Kernel, kernel)
		}
	}
	rows := int64(a.NumSeqs) * int64(a.NumQHeads) * int64(plan.Splits)
	want := dispatch.DecodePlan{Launch: dispatch.Launch{
		Kernel: kernel, Grid: dispatch.Dim3{X: uint32(a.NumKVHeads), Y: uint32(a.NumSeqs), Z: uint32(plan.Splits)},
		Block:       dispatch.Dim3{X: dispatch.DecodeThreads, Y: 1, Z: 1},
		SharedBytes: uint32(dispatch.KernelSharedBytes(kernel, dev.MaxSharedPerBlockOptin)),
	}}
	if plan.Cluster > 0 {
		if !dev.Clusters {
			return errf("DecodeWithPlan: the plan runs its splits as thread-block clusters, which %s lacks (compute capability 9.0 and newer have them)", dev.Name)
		}
		// The twin from the name tables: concatenating would allocate.
		if want.Kernel, err = named(dispatch.ClusterDecodeKernelName(a.DType, a.CacheDType, a.HeadDim, group)); err != nil {
			return err
		}
		want.Cluster = uint32(plan.Splits)
	} else if plan.Balanced() {
		// Any number of items will do that the partition can fill.
		items := int64(plan.Grid.Y)
		if a.NumSeqs > dispatch.BalanceMaxSeqs || !dispatch.BalancedItemsValid(a.NumSeqs, int(items), plan.BalanceWave) {
			return errf("DecodeWithPlan: the balanced plan has %d work items, %d per wave, for %d sequences; allowed: at least the wave (NumSeqs < BalanceWave) or NumSeqs + BalanceWave, at most %d sequences", items, plan.BalanceWave, a.NumSeqs, dispatch.BalanceMaxSeqs)
		}
		want.Grid.Z = 1
		shape := a.shape(false, 0)
		want.SetBalancedItems(&shape, int(items))
		want.BalanceMinPages = plan.BalanceMinPages
	} else if plan.Splits > 1 {
		want.Counters = int64(a.NumSeqs) * int64(a.NumKVHeads)
		want.ScratchFloats = rows * int64(a.HeadDim+2)
		want.MaxOffset = rows * int64(a.HeadDim)
		want.SumOffset = want.MaxOffset + rows
	}
	// Any ring depth the kernel accepts will do, within the device's limit.
	for stages := dispatch.DecodeMinStages; stages <= dispatch.DecodeMaxStages; stages++ {
		if n, _ := dispatch.DecodeStagesShared(want.Kernel, stages); uint32(n) == plan.SharedBytes && n <= dev.MaxSharedPerBlockOptin {
			want.SharedBytes = plan.SharedBytes
		}
	}
	if plan.Splits < 1 || plan.Splits > dispatch.MaxSplits {
		return errf("DecodeWithPlan: DecodePlan.Splits=%d is out of range; allowed: 1..%d", plan.Splits, dispatch.MaxSplits)
	}
	if plan.Balanced() {
		want.BalanceWave = plan.BalanceWave // checked with the items above
	}
	if plan.Kernel != want.Kernel || plan.Grid != want.Grid ||
		plan.Block != want.Block || plan.SharedBytes != want.SharedBytes || plan.Cluster != want.Cluster ||
		plan.Cluster > dispatch.MaxClusterSplits || plan.Counters != want.Counters || plan.ScratchFloats != want.ScratchFloats ||
		plan.PartialOutOffset != 0 || plan.MaxOffset != want.MaxOffset || plan.SumOffset != want.SumOffset ||
		plan.BalanceMinPages != want.BalanceMinPages || plan.BalanceMinPages > math.MaxInt32 || plan.WorkOffset != want.WorkOffset ||
		(!plan.Balanced() && plan.BalanceWave != 0) {
		// The fp8 kernels differ by cache layout (dispatch.DecodeLayoutKernel):
		// a plan whose kernel is the twin of the one wanted was made for
		// another layout.
		if plan.Kernel != want.Kernel && (dispatch.DecodeLayoutKernel(plan.Kernel, dispatch.LayoutXSplit) == want.Kernel ||
			dispatch.DecodeLayoutKernel(want.Kernel, dispatch.LayoutXSplit) == plan.Kernel) {
			return errf("DecodeWithPlan: the plan (%s) is for another cache layout than DecodeArgs.Layout=%v (%s); plan with the args' layout (DecodeShape.Layout)",
				plan.Kernel, a.Layout, want.Kernel)
		}
		return planMismatch("DecodeWithPlan", decodeArg, "PlanDecode or PlanDecodeWith", *plan, want,
			"Kernel", "Grid", "Block", "SharedBytes", "Cluster", "Counters", "ScratchFloats", "PartialOutOffset",
			"MaxOffset", "SumOffset", "BalanceMinPages", "WorkOffset", "BalanceWave")
	}
	return nil
}
