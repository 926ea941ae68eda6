package pagedkv

import (
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// RopeCacheArgs describes rotary position embedding fused with the paged
// cache write.
//
//   - Q: [NumTokens, NumQHeads, HeadDim]; K, V: [NumKVTokens, NumKVHeads,
//     HeadDim] (NumKVTokens ≥ NumTokens; 0 means NumTokens), all of DType at
//     element strides (0 = contiguous). Tokens NumTokens.. are KV-only: no
//     RoPE, cached as given. HeadDim is a multiple of 8 from 16 to 256 (80,
//     96, 112, 120, 192 as well as the powers of two; the x-split and shuffle
//     layouts over an e4m3 cache need a multiple of 16).
//   - Positions: int64 [NumTokens]; PositionDeltas (optional): int64 [NumTokens]
//     added to them. CosSin: one combined f32 table [MaxPos, 2·RotDim], each
//     row RotDim cosines then RotDim sines (QKVNormRopeArgs takes the same
//     table); RotDim is HeadDim (one value per element) or
//     HeadDim/2 (one per rotated pair, reused for both halves). NeoX rotates
//     halves (x[j], x[j+HeadDim/2]); otherwise GPT-J rotates interleaved pairs
//     (x[2i], x[2i+1]). A position outside [0, MaxPos) is recorded in the
//     stream's fault record and nothing of that token is written.
//   - QOut: rotated q [NumTokens, NumQHeads, HeadDim]; KOut: rotated k
//     [NumTokens, NumKVHeads, HeadDim]; ZerosOut (optional) shaped like QOut
//     is filled with zeros. All contiguous, of DType.
//   - The caches, slots, layout and fp8 scales follow AppendArgs: rotated k
//     (exactly KOut's values) and v go to slot SlotMapping[t]; each KV head is
//     written once whatever the GQA group.
//   - In the x-split and shuffle layouts V is token-minor: a second launch
//     writes it as Append does, runs of 8 or 16 consecutive slots of a page
//     as whole pieces, where the one launch stores each token's V element
//     by element. It runs when HostSlotMapping (optional: the host's copy of
//     SlotMapping as int32, NumKVTokens values, without SlotRemap) shows the slots in
//     runs, as a prefill's are; without it, from
//     dispatch.RopeValuesMinTokens tokens.
//
// Aliasing: the outputs (QOut, KOut, ZerosOut, KCache, VCache) must not
// overlap each other or any input (Q, K, V, Positions, PositionDeltas,
// CosSin, SlotMapping, SlotRemap). RoPE is not in place: QOut = Q (or KOut =
// K) is not supported, as the kernel takes every pointer as restrict and may
// read the inputs through the read-only cache. The inputs may overlap one
// another (Q, K and V may be strided views of one fused QKV activation).
// Validate refuses an overlap (ErrAliasing).
//
// Bounds: NumTokens, NumKVTokens ≤ 2^30 and NumQHeads, NumKVHeads ≤ 2^16
// (the kernel holds them, and a token's (NumQHeads+NumKVHeads)·HeadDim/8
// pieces, in int32); MaxPos ≤ 2^30; strides ≤ 2^31 elements.
type RopeCacheArgs struct {
	Q, K, V                   Buffer
	QOut, KOut, ZerosOut      Buffer
	KCache, VCache            Buffer
	Positions, PositionDeltas Buffer
	CosSin                    Buffer
	SlotMapping, SlotRemap    Buffer

	NumTokens, NumKVTokens         int
	NumQHeads, NumKVHeads, HeadDim int
	BlockSize, NumBlocks           int
	MaxPos, RotDim                 int
	NeoX                           bool
	QTokenStride, QHeadStride      int
	KTokenStride, KHeadStride      int
	VTokenStride, VHeadStride      int
	DType, CacheDType              DType
	KScale, VScale                 float32
	Layout                         CacheLayout
	HostSlotMapping                []int32
}

const ropeArg = "RopeCacheArgs"

func (a *RopeCacheArgs) kvTokens() int {
	if a.NumKVTokens == 0 {
		return a.NumTokens
	}
	return a.NumKVTokens
}

// kvTokensF names the field that set kvTokens.
func (a *RopeCacheArgs) kvTokensF() string {
	if a.NumKVTokens == 0 {
		return "NumTokens"
	}
	return "NumKVTokens"
}

func (a *RopeCacheArgs) target() cacheTarget {
	return cacheTarget{a.KCache, a.VCache, a.SlotMapping, a.SlotRemap, a.kvTokensF(), a.kvTokens(), a.NumKVHeads, a.HeadDim,
		a.BlockSize, a.NumBlocks, a.DType, a.CacheDType, a.KScale, a.VScale, a.Layout}
}

func (a *RopeCacheArgs) rows() (q, k, v tokenRows) {
	q = tokenRows{"Q", "QTokenStride", "QHeadStride", "NumTokens", "NumQHeads", "HeadDim",
		a.Q, a.NumTokens, a.NumQHeads, a.HeadDim, a.QTokenStride, a.QHeadStride}
	k = tokenRows{"K", "KTokenStride", "KHeadStride", a.kvTokensF(), "NumKVHeads", "HeadDim",
		a.K, a.kvTokens(), a.NumKVHeads, a.HeadDim, a.KTokenStride, a.KHeadStride}
	v = tokenRows{"V", "VTokenStride", "VHeadStride", a.kvTokensF(), "NumKVHeads", "HeadDim",
		a.V, a.kvTokens(), a.NumKVHeads, a.HeadDim, a.VTokenStride, a.VHeadStride}
	return
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *RopeCacheArgs) Validate() error {
	if a == nil {
		return errf("the *RopeCacheArgs is nil")
	}
	if err := inRange(ropeArg, "NumTokens", a.NumTokens, 0, 1<<30); err != nil {
		return err
	}
	if a.NumKVTokens != 0 && a.NumKVTokens < a.NumTokens {
		return errf("%s.NumKVTokens=%d is below NumTokens=%d; allowed: 0 (= NumTokens) or ≥ NumTokens", ropeArg, a.NumKVTokens, a.NumTokens)
	}
	if a.HeadDim < 16 || a.HeadDim > 256 || a.HeadDim%8 != 0 {
		return errf("%s.HeadDim=%d is not allowed; allowed: a multiple of 8 from 16 to 256", ropeArg, a.HeadDim)
	}
	// The kernel counts a token's pieces, (NumQHeads+NumKVHeads)·HeadDim/8,
	// in an int32.
	if err := inRange(ropeArg, "NumQHeads", a.NumQHeads, 1, 1<<16); err != nil {
		return err
	}
	sp := spans{arg: ropeArg}
	if err := a.target().check(&sp); err != nil {
		return err
	}
	if n := len(a.HostSlotMapping); n != 0 && n != a.kvTokens() {
		return errf("%s.HostSlotMapping has %d values; allowed: none, or %s=%d", ropeArg, n, a.kvTokensF(), a.kvTokens())
	}
	if a.NumQHeads%a.NumKVHeads != 0 {
		return errf("%s.NumQHeads=%d is not a multiple of NumKVHeads=%d", ropeArg, a.NumQHeads, a.NumKVHeads)
	}
	if a.RotDim != a.HeadDim && a.RotDim != a.HeadDim/2 {
		return errf("%s.RotDim=%d is not allowed; allowed: HeadDim=%d or HeadDim/2=%d", ropeArg, a.RotDim, a.HeadDim, a.HeadDim/2)
	}
	if err := inRange(ropeArg, "MaxPos", a.MaxPos, 1, 1<<30); err != nil {
		return err
	}
	q, k, v := a.rows()
	for _, r := range []tokenRows{q, k, v} {
		if err := r.check(&sp, a.DType, read); err != nil {
			return err
		}
	}
	table, err := size(ropeArg, "MaxPos·2·RotDim", 4, int64(a.MaxPos), 2, int64(a.RotDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("CosSin", a.CosSin, table, 4, read); err != nil {
		return err
	}
	if a.NumTokens == 0 {
		return sp.check()
	}
	esize := int64(a.DType.Size())
	qBytes, err := size(ropeArg, "NumTokens·NumQHeads·HeadDim", esize, int64(a.NumTokens), int64(a.NumQHeads), int64(a.HeadDim))
	if err != nil {
		return err
	}
	kBytes, err := size(ropeArg, "NumTokens·NumKVHeads·HeadDim", esize, int64(a.NumTokens), int64(a.NumKVHeads), int64(a.HeadDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("QOut", a.QOut, qBytes, 16, write); err != nil {
		return err
	}
	if err := sp.buffer("KOut", a.KOut, kBytes, 16, write); err != nil {
		return err
	}
	if !a.ZerosOut.IsZero() {
		if err := sp.buffer("ZerosOut", a.ZerosOut, qBytes, 16, write); err != nil {
			return err
		}
	}
	if err := sp.buffer("Positions", a.Positions, int64(a.NumTokens)*8, 8, read); err != nil {
		return err
	}
	if !a.PositionDeltas.IsZero() {
		if err := sp.buffer("PositionDeltas", a.PositionDeltas, int64(a.NumTokens)*8, 8, read); err != nil {
			return err
		}
	}
	return sp.check()
}

// ropeCacheParams is the parameter list of the rope_cache_* kernels, in PTX
// order (kernels_src/rope.cu).
type ropeCacheParams struct {
	Q, K, V, QOut, KOut, ZerosOut                          driver.DevicePtr
	KCache, VCache, Positions, PositionDeltas, CosSin      driver.DevicePtr
	MaxPos                                                 int64
	RotDim                                                 int32
	SlotMapping, SlotRemap                                 driver.DevicePtr
	NumRemap                                               int64
	Fault                                                  driver.DevicePtr
	NumSlots                                               int64
	NumTokens, NumKVTokens, NumQHeads, NumKVHeads, HeadDim int32
	QTokenStride, QHeadStride                              int64
	KTokenStride, KHeadStride                              int64
	VTokenStride, VHeadStride                              int64
	KScale, VScale                                         float32
	NeoX, Layout, BlockSizeLog2                            int32
}

// ropeValuesParams is the parameter list of the rope_values_* kernels, in
// PTX order (kernels_src/rope.cu).
type ropeValuesParams struct {
	V, VCache, Positions, PositionDeltas        driver.DevicePtr
	MaxPos                                      int64
	SlotMapping, SlotRemap                      driver.DevicePtr
	NumRemap, NumSlots                          int64
	NumTokens, NumKVTokens, NumKVHeads, HeadDim int32
	VTokenStride, VHeadStride                   int64
	VScale                                      float32
	Layout, BlockSizeLog2                       int32
}

// RopeCache rotates q and k and writes k and v into the paged caches on
// stream s: one launch, two into the x-split and shuffle layouts where V
// moves in page runs (see RopeCacheArgs).
func (r *Runtime) RopeCache(s *Stream, a *RopeCacheArgs) error {
	if err := r.on("RopeCache", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanRope(a.shape())
	if err != nil {
		return planError(err, "AppendShape", ropeArg)
	}
	p := a.params(s.fault)
	if plan.Values.Kernel != "" {
		// V first: it records no faults, so a CHECK_BOUNDS error of the
		// second launch still leaves every valid row written.
		vp := ropeValuesParams{
			V: p.V, VCache: p.VCache, Positions: p.Positions, PositionDeltas: p.PositionDeltas, MaxPos: p.MaxPos,
			SlotMapping: p.SlotMapping, SlotRemap: p.SlotRemap, NumRemap: p.NumRemap, NumSlots: p.NumSlots,
			NumTokens: p.NumTokens, NumKVTokens: p.NumKVTokens, NumKVHeads: p.NumKVHeads, HeadDim: p.HeadDim,
			VTokenStride: p.VTokenStride, VHeadStride: p.VHeadStride, VScale: p.VScale,
			Layout: p.Layout, BlockSizeLog2: p.BlockSizeLog2,
		}
		if err := launchPlan(r, s, &plan.Values, &vp); err != nil {
			return err
		}
		p.VCache = 0 // rope_cache leaves V to rope_values
	}
	return launchPlan(r, s, &plan.Launch, &p)
}

// shape is the planner's view of a valid a.
func (a *RopeCacheArgs) shape() dispatch.AppendShape {
	return dispatch.AppendShape{
		NumTokens: a.kvTokens(), NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, DType: a.DType, CacheDType: a.CacheDType,
		Flash: !a.Layout.Laid(), HostSlots: len(a.HostSlotMapping) != 0,
		// The runs decide the x-split and shuffle layouts' V launch only.
		SlotRuns: a.Layout.Laid() && a.SlotRemap.IsZero() && slotRuns(a.HostSlotMapping),
	}
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *RopeCacheArgs) params(fault driver.DevicePtr) ropeCacheParams {
	q, k, v := a.rows()
	qt, qh := q.strides()
	kt, kh := k.strides()
	vt, vh := v.strides()
	p := ropeCacheParams{
		Q: a.Q.Ptr, K: a.K.Ptr, V: a.V.Ptr, QOut: a.QOut.Ptr, KOut: a.KOut.Ptr, ZerosOut: a.ZerosOut.Ptr,
		KCache: a.KCache.Ptr, VCache: a.VCache.Ptr, Positions: a.Positions.Ptr, PositionDeltas: a.PositionDeltas.Ptr,
		CosSin: a.CosSin.Ptr, MaxPos: int64(a.MaxPos), RotDim: int32(a.RotDim),
		SlotMapping: a.SlotMapping.Ptr, SlotRemap: a.SlotRemap.Ptr, NumRemap: a.SlotRemap.Bytes / 8, Fault: fault,
		NumSlots:  int64(a.NumBlocks) * int64(a.BlockSize),
		NumTokens: int32(a.NumTokens), NumKVTokens: int32(a.kvTokens()), NumQHeads: int32(a.NumQHeads),
		NumKVHeads: int32(a.NumKVHeads), HeadDim: int32(a.HeadDim),
		QTokenStride: qt, QHeadStride: qh, KTokenStride: kt, KHeadStride: kh, VTokenStride: vt, VHeadStride: vh,
		Layout: int32(a.Layout), BlockSizeLog2: log2(a.BlockSize),
	}
	if a.NeoX {
		p.NeoX = 1
	}
	p.KScale, p.VScale = a.target().scales()
	return p
}
