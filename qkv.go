package pagedkv

import (
	"math"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// NormMode selects the per-head normalization of QKVNormRopeArgs.
type NormMode int

const (
	NormNone NormMode = iota // no normalization
	NormQK                   // RMSNorm of every q head and every k head
)

// QKVNormRopeArgs splits a fused QKV activation, RMSNorms q and k per head,
// applies RoPE, writes q token-major and K/V into the paged cache (any
// CacheLayout), for one sequence or a batch of them (varlen).
//
//   - QKV: [NumTokens, (NumQHeads+2·NumKVHeads)·HeadDim] of DType, token
//     stride QKVTokenStride elements (0 = contiguous): q heads, then k heads,
//     then v heads. A view inside a larger buffer is a Buffer.Slice of it.
//     HeadDim is a multiple of 8 from 16 to 256 (80, 96, 112, 120, 192 as
//     well as the powers of two; the x-split and shuffle layouts over an
//     e4m3 cache need a multiple of 16).
//   - CuSeqlensQ (optional): int32 [NumSeqs+1], token t belongs to sequence s
//     when CuSeqlensQ[s] ≤ t < CuSeqlensQ[s+1]; left out, all tokens are one
//     sequence (NumSeqs must be 1). PosOffsets: int32 [NumSeqs]; token t of
//     sequence s sits at position PosOffsets[s] + t − CuSeqlensQ[s], its RoPE
//     position and its place in the cache.
//   - Norm: NormNone or NormQK with QNormWeight and KNormWeight ([HeadDim] of
//     DType) and Eps: x·w/√(mean(x²)+Eps) in f32.
//   - CosSin, RotDim, NeoX: as in RopeCacheArgs (one f32 table [MaxPos,
//     2·RotDim], each row RotDim cosines then RotDim sines).
//   - QOut: [NumTokens, NumQHeads, HeadDim] of DType.
//   - KCache, VCache: in Layout (LayoutFlash, the default: [NumBlocks,
//     BlockSize, NumKVHeads, HeadDim]; LayoutXSplit, LayoutShuffle and
//     LayoutHND as CacheLayout describes, the first two with their limits on
//     HeadDim and BlockSize) of
//     CacheDType (DType or E4M3 with KScale, VScale); position p of
//     sequence s goes to block BlockTables[s][p/BlockSize] (int32 [NumSeqs,
//     MaxBlocksPerSeq]), row p%BlockSize. Device-side values out of range
//     are recorded in the stream's fault record and not written. In the
//     x-split and shuffle layouts V is token-minor: when the tokens average
//     dispatch.QKVValuesMinTokens or more per sequence (prefill, chunks), a
//     second launch writes V as Append does, whole pieces for runs of 8 or
//     16 consecutive positions of a page (position offsets and sequence
//     starts that are multiples of 16 keep every full page a run); fewer
//     (decode steps) write each token's V element by element.
//
// Aliasing: QOut, KCache and VCache must not overlap each other or any input
// (QKV, CuSeqlensQ, PosOffsets, BlockTables, CosSin, QNormWeight,
// KNormWeight). Not even QOut over QKV's own q heads is in place: each block
// copies the QKV rows of its next tokens ahead (cp.async) while it writes
// the rows of earlier ones. The inputs may overlap one another. Validate
// refuses an overlap (ErrAliasing).
//
// Bounds: NumTokens ≤ 2^30, NumSeqs ≤ 2^20, NumQHeads ≤ 2^12,
// MaxBlocksPerSeq·BlockSize < 2^31 (int32 in the kernel); QKVTokenStride ≤
// 2^31 elements (int64, bounded so that no address can overflow).
type QKVNormRopeArgs struct {
	QKV                      Buffer
	QKVTokenStride           int
	QOut                     Buffer
	KCache, VCache           Buffer
	BlockTables              Buffer
	CuSeqlensQ, PosOffsets   Buffer
	CosSin                   Buffer
	QNormWeight, KNormWeight Buffer
	Norm                     NormMode
	Eps                      float32

	NumTokens, NumSeqs                    int
	NumQHeads, NumKVHeads, HeadDim        int
	BlockSize, NumBlocks, MaxBlocksPerSeq int
	MaxPos, RotDim                        int
	NeoX                                  bool
	DType, CacheDType                     DType
	KScale, VScale                        float32
	Layout                                CacheLayout
}

const qkvArg = "QKVNormRopeArgs"

// rows returns the token rows of QKV.
func (a *QKVNormRopeArgs) rows() tokenRows {
	return tokenRows{"QKV", "QKVTokenStride", "", "NumTokens", "", "(NumQHeads+2·NumKVHeads)·HeadDim",
		a.QKV, a.NumTokens, 1, (a.NumQHeads + 2*a.NumKVHeads) * a.HeadDim, a.QKVTokenStride, 0}
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *QKVNormRopeArgs) Validate() error {
	if a == nil {
		return errf("the *QKVNormRopeArgs is nil")
	}
	if err := inRange(qkvArg, "NumTokens", a.NumTokens, 0, 1<<30); err != nil {
		return err
	}
	if a.HeadDim < 16 || a.HeadDim > 256 || a.HeadDim%8 != 0 {
		return errf("%s.HeadDim=%d is not allowed; allowed: a multiple of 8 from 16 to 256", qkvArg, a.HeadDim)
	}
	if err := inRange(qkvArg, "NumQHeads", a.NumQHeads, 1, 1<<12); err != nil {
		return err
	}
	// The cache target: one slot per token.
	t := cacheTarget{a.KCache, a.VCache, Buffer{}, Buffer{}, "NumTokens", 0, a.NumKVHeads, a.HeadDim, a.BlockSize, a.NumBlocks,
		a.DType, a.CacheDType, a.KScale, a.VScale, a.Layout}
	sp := spans{arg: qkvArg}
	if err := t.check(&sp); err != nil {
		return err
	}
	if err := inRange(qkvArg, "NumSeqs", a.NumSeqs, 1, 1<<20); err != nil {
		return err
	}
	if a.CuSeqlensQ.IsZero() && a.NumSeqs != 1 {
		return errf("%s.NumSeqs=%d needs CuSeqlensQ; without it the tokens are one sequence", qkvArg, a.NumSeqs)
	}
	if a.NumQHeads%a.NumKVHeads != 0 {
		return errf("%s.NumQHeads=%d is not a multiple of NumKVHeads=%d", qkvArg, a.NumQHeads, a.NumKVHeads)
	}
	if a.RotDim != a.HeadDim && a.RotDim != a.HeadDim/2 {
		return errf("%s.RotDim=%d is not allowed; allowed: HeadDim=%d or HeadDim/2=%d", qkvArg, a.RotDim, a.HeadDim, a.HeadDim/2)
	}
	if err := inRange(qkvArg, "MaxPos", a.MaxPos, 1, 1<<30); err != nil {
		return err
	}
	if err := inRange(qkvArg, "MaxBlocksPerSeq", a.MaxBlocksPerSeq, 1, math.MaxInt32/a.BlockSize); err != nil {
		return err
	}
	switch a.Norm {
	case NormNone:
		if !a.QNormWeight.IsZero() || !a.KNormWeight.IsZero() || a.Eps != 0 {
			return errf("%s: QNormWeight, KNormWeight and Eps are only used with Norm=NormQK; with NormNone leave them unset", qkvArg)
		}
	case NormQK:
		if !(a.Eps > 0) || math.IsInf(float64(a.Eps), 0) {
			return errf("%s.Eps=%g is not allowed with NormQK; allowed: a finite value > 0", qkvArg, a.Eps)
		}
		w := int64(a.HeadDim) * int64(a.DType.Size())
		if err := sp.buffer("QNormWeight", a.QNormWeight, w, 16, read); err != nil {
			return err
		}
		if err := sp.buffer("KNormWeight", a.KNormWeight, w, 16, read); err != nil {
			return err
		}
	default:
		return errf("%s.Norm=%d is not supported; allowed: NormNone, NormQK", qkvArg, int(a.Norm))
	}
	if err := a.rows().check(&sp, a.DType, read); err != nil {
		return err
	}
	table, err := size(qkvArg, "MaxPos·2·RotDim", 4, int64(a.MaxPos), 2*int64(a.RotDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("CosSin", a.CosSin, table, 4, read); err != nil {
		return err
	}
	if err := sp.buffer("PosOffsets", a.PosOffsets, int64(a.NumSeqs)*4, 4, read); err != nil {
		return err
	}
	if !a.CuSeqlensQ.IsZero() {
		if err := sp.buffer("CuSeqlensQ", a.CuSeqlensQ, int64(a.NumSeqs+1)*4, 4, read); err != nil {
			return err
		}
	}
	tables, err := size(qkvArg, "NumSeqs·MaxBlocksPerSeq", 4, int64(a.NumSeqs), int64(a.MaxBlocksPerSeq))
	if err != nil {
		return err
	}
	if err := sp.buffer("BlockTables", a.BlockTables, tables, 4, read); err != nil {
		return err
	}
	if a.NumTokens == 0 {
		return sp.check()
	}
	qBytes, err := size(qkvArg, "NumTokens·NumQHeads·HeadDim", int64(a.DType.Size()), int64(a.NumTokens), int64(a.NumQHeads), int64(a.HeadDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("QOut", a.QOut, qBytes, 16, write); err != nil {
		return err
	}
	return sp.check()
}

// qkvNormRopeParams is the parameter list of the qkv_norm_rope_* kernels, in
// PTX order (kernels_src/qkv.cu).
type qkvNormRopeParams struct {
	QKV, QOut, KCache, VCache, CuSeqlens, PosOffsets, BlockTables driver.DevicePtr
	QWeight, KWeight, CosSin                                      driver.DevicePtr
	MaxPos                                                        int64
	RotDim                                                        int32
	Fault                                                         driver.DevicePtr
	NumTokens, NumSeqs, NumQHeads, NumKVHeads, HeadDim            int32
	QKVTokenStride                                                int64
	MaxBlocksPerSeq, BlockSizeLog2                                int32
	NumBlocks                                                     int64
	Norm                                                          int32
	Eps, KScale, VScale                                           float32
	NeoX, Layout                                                  int32
	TileTokens                                                    int32
}

// QKVNormRope runs the split + norm + RoPE + cache write on stream s.
func (r *Runtime) QKVNormRope(s *Stream, a *QKVNormRopeArgs) error {
	if err := r.on("QKVNormRope", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanQKV(dispatch.QKVShape{NumTokens: a.NumTokens, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads,
		HeadDim: a.HeadDim, RotDim: a.RotDim, DType: a.DType, CacheDType: a.CacheDType,
		Layout: a.Layout, BlockSize: a.BlockSize, NumSeqs: a.NumSeqs}, *r.facts.Load())
	if err != nil {
		return planError(err, "QKVShape", qkvArg)
	}
	p := a.params(s.fault)
	p.TileTokens = int32(plan.TileTokens)
	if plan.Values.Kernel != "" {
		// V first: it records no faults, so a CHECK_BOUNDS error of the
		// second launch still leaves every valid row written.
		vp := a.valuesParams(&p)
		if err := launchPlan(r, s, &plan.Values, &vp); err != nil {
			return err
		}
		p.VCache = 0 // qkv_norm_rope leaves V to qkv_values
	}
	return launchPlan(r, s, &plan.Launch, &p)
}

// qkvValuesParams is the parameter list of the qkv_values_* kernels, in
// PTX order (kernels_src/qkv.cu).
type qkvValuesParams struct {
	Value, VCache, CuSeqlens, PosOffsets, BlockTables driver.DevicePtr
	MaxPos                                            int64
	NumTokens, NumSeqs, NumKVHeads, HeadDim           int32
	ValueTokenStride                                  int64
	MaxBlocksPerSeq, BlockSizeLog2                    int32
	NumBlocks                                         int64
	VScale                                            float32
	Layout                                            int32
}

// valuesParams returns qkv_values' parameters for a valid a whose
// qkv_norm_rope parameters are p: Value is the first V head of token 0.
func (a *QKVNormRopeArgs) valuesParams(p *qkvNormRopeParams) qkvValuesParams {
	off := driver.DevicePtr((a.NumQHeads + a.NumKVHeads) * a.HeadDim * a.DType.Size())
	return qkvValuesParams{
		Value: p.QKV + off, VCache: p.VCache, CuSeqlens: p.CuSeqlens, PosOffsets: p.PosOffsets, BlockTables: p.BlockTables,
		MaxPos: p.MaxPos, NumTokens: p.NumTokens, NumSeqs: p.NumSeqs, NumKVHeads: p.NumKVHeads, HeadDim: p.HeadDim,
		ValueTokenStride: p.QKVTokenStride, MaxBlocksPerSeq: p.MaxBlocksPerSeq, BlockSizeLog2: p.BlockSizeLog2,
		NumBlocks: p.NumBlocks, VScale: p.VScale, Layout: p.Layout,
	}
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *QKVNormRopeArgs) params(fault driver.DevicePtr) qkvNormRopeParams {
	ts, _ := a.rows().strides()
	p := qkvNormRopeParams{
		QKV: a.QKV.Ptr, QOut: a.QOut.Ptr, KCache: a.KCache.Ptr, VCache: a.VCache.Ptr, CuSeqlens: a.CuSeqlensQ.Ptr,
		PosOffsets: a.PosOffsets.Ptr, BlockTables: a.BlockTables.Ptr, QWeight: a.QNormWeight.Ptr, KWeight: a.KNormWeight.Ptr,
		CosSin: a.CosSin.Ptr, MaxPos: int64(a.MaxPos), RotDim: int32(a.RotDim), Fault: fault,
		NumTokens: int32(a.NumTokens), NumSeqs: int32(a.NumSeqs), NumQHeads: int32(a.NumQHeads), NumKVHeads: int32(a.NumKVHeads),
		HeadDim: int32(a.HeadDim), QKVTokenStride: ts, MaxBlocksPerSeq: int32(a.MaxBlocksPerSeq),
		BlockSizeLog2: log2(a.BlockSize), NumBlocks: int64(a.NumBlocks), Norm: int32(a.Norm), Eps: a.Eps,
		Layout: int32(a.Layout),
	}
	p.KScale, p.VScale = cacheTarget{cache: a.CacheDType, kScale: a.KScale, vScale: a.VScale}.scales()
	if a.NeoX {
		p.NeoX = 1
	}
	return p
}
