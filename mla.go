package pagedkv

import (
	"math"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// MLARopeQuantArgs describes the multi-head latent attention input step:
// RoPE on the rope parts of q and k, and fp8 e4m3 quantization of all four
// parts in one pass.
//
//   - QNope [NumTokens, NumQHeads, LoraRank], QRope [NumTokens, NumQHeads,
//     RopeDim], KNope [NumTokens, NumKVHeads, LoraRank], KRope [NumTokens,
//     NumKVHeads, RopeDim], all of DType at element strides (0 = contiguous).
//   - Positions int64 [NumTokens]; CosSin, RotDim (RopeDim or RopeDim/2) and
//     NeoX as in RopeCacheArgs.
//   - Outputs, fp8 e4m3, x / QOutScale or x / KOutScale rounded to nearest even and
//     saturated: QOut [NumTokens, NumQHeads, LoraRank+RopeDim] (nope first,
//     then the rotated rope part), KNopeOut [NumTokens, NumKVHeads, LoraRank],
//     KRopeOut [NumTokens, NumKVHeads, RopeDim] (rotated).
//
// Aliasing: QOut, KNopeOut and KRopeOut must not overlap each other or any
// input (QNope, QRope, KNope, KRope, Positions, CosSin); the op is not in
// place. The inputs may overlap one another (QNope and QRope may be strided
// views of one q buffer, KNope and KRope of one k buffer). Validate refuses
// an overlap (ErrAliasing).
//
// Bounds: NumTokens ≤ 2^30, NumQHeads and NumKVHeads ≤ 2^12, LoraRank ≤ 4096,
// RopeDim ≤ 512 (int32 in the kernel, which also counts a token's pieces in
// int32); strides ≤ 2^31 elements.
type MLARopeQuantArgs struct {
	QNope, QRope, KNope, KRope        Buffer
	QOut, KNopeOut, KRopeOut          Buffer
	Positions, CosSin                 Buffer
	NumTokens, NumQHeads              int
	NumKVHeads                        int
	LoraRank, RopeDim                 int
	MaxPos, RotDim                    int
	NeoX                              bool
	QNopeTokenStride, QNopeHeadStride int
	QRopeTokenStride, QRopeHeadStride int
	KNopeTokenStride, KNopeHeadStride int
	KRopeTokenStride, KRopeHeadStride int
	DType                             DType
	QOutScale, KOutScale              float32
}

const mlaArg = "MLARopeQuantArgs"

func (a *MLARopeQuantArgs) rows() (qn, qr, kn, kr tokenRows) {
	qn = tokenRows{"QNope", "QNopeTokenStride", "QNopeHeadStride", "NumTokens", "NumQHeads", "LoraRank",
		a.QNope, a.NumTokens, a.NumQHeads, a.LoraRank, a.QNopeTokenStride, a.QNopeHeadStride}
	qr = tokenRows{"QRope", "QRopeTokenStride", "QRopeHeadStride", "NumTokens", "NumQHeads", "RopeDim",
		a.QRope, a.NumTokens, a.NumQHeads, a.RopeDim, a.QRopeTokenStride, a.QRopeHeadStride}
	kn = tokenRows{"KNope", "KNopeTokenStride", "KNopeHeadStride", "NumTokens", "NumKVHeads", "LoraRank",
		a.KNope, a.NumTokens, a.NumKVHeads, a.LoraRank, a.KNopeTokenStride, a.KNopeHeadStride}
	kr = tokenRows{"KRope", "KRopeTokenStride", "KRopeHeadStride", "NumTokens", "NumKVHeads", "RopeDim",
		a.KRope, a.NumTokens, a.NumKVHeads, a.RopeDim, a.KRopeTokenStride, a.KRopeHeadStride}
	return
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *MLARopeQuantArgs) Validate() error {
	if a == nil {
		return errf("the *MLARopeQuantArgs is nil")
	}
	if a.DType != F16 && a.DType != BF16 {
		return errf("%s.DType=%s is not supported; allowed: f16, bf16", mlaArg, a.DType)
	}
	if err := inRange(mlaArg, "NumTokens", a.NumTokens, 0, 1<<30); err != nil {
		return err
	}
	if err := inRange(mlaArg, "NumQHeads", a.NumQHeads, 1, 1<<12); err != nil {
		return err
	}
	if err := inRange(mlaArg, "NumKVHeads", a.NumKVHeads, 1, 1<<12); err != nil {
		return err
	}
	if a.LoraRank < 8 || a.LoraRank%8 != 0 || a.LoraRank > 4096 {
		return errf("%s.LoraRank=%d is not supported; allowed: a multiple of 8 from 8 to 4096", mlaArg, a.LoraRank)
	}
	if a.RopeDim < 16 || a.RopeDim%16 != 0 || a.RopeDim > 512 {
		return errf("%s.RopeDim=%d is not supported; allowed: a multiple of 16 from 16 to 512", mlaArg, a.RopeDim)
	}
	if a.RotDim != a.RopeDim && a.RotDim != a.RopeDim/2 {
		return errf("%s.RotDim=%d is not allowed; allowed: RopeDim=%d or RopeDim/2=%d", mlaArg, a.RotDim, a.RopeDim, a.RopeDim/2)
	}
	if err := inRange(mlaArg, "MaxPos", a.MaxPos, 1, 1<<30); err != nil {
		return err
	}
	for _, sc := range []struct {
		field, what string
		v           float32
	}{{"QOutScale", "QOut = q / QOutScale", a.QOutScale}, {"KOutScale", "KNopeOut, KRopeOut = k / KOutScale", a.KOutScale}} {
		if !(sc.v > 0) || math.IsInf(float64(sc.v), 0) {
			return errf("%s.%s=%g is not allowed; allowed: a finite value > 0 (the e4m3 outputs are %s)", mlaArg, sc.field, sc.v, sc.what)
		}
	}
	sp := spans{arg: mlaArg}
	qn, qr, kn, kr := a.rows()
	for _, r := range []tokenRows{qn, qr, kn, kr} {
		if err := r.check(&sp, a.DType, read); err != nil {
			return err
		}
	}
	table, err := size(mlaArg, "MaxPos·2·RotDim", 4, int64(a.MaxPos), 2, int64(a.RotDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("CosSin", a.CosSin, table, 4, read); err != nil {
		return err
	}
	if a.NumTokens == 0 {
		return sp.check()
	}
	t := int64(a.NumTokens)
	for _, o := range []struct {
		field, what string
		buf         Buffer
		esize       int64
		counts      []int64
		out         bool
	}{
		{"QOut", "NumTokens·NumQHeads·(LoraRank+RopeDim)", a.QOut, 1, []int64{t, int64(a.NumQHeads), int64(a.LoraRank + a.RopeDim)}, write},
		{"KNopeOut", "NumTokens·NumKVHeads·LoraRank", a.KNopeOut, 1, []int64{t, int64(a.NumKVHeads), int64(a.LoraRank)}, write},
		{"KRopeOut", "NumTokens·NumKVHeads·RopeDim", a.KRopeOut, 1, []int64{t, int64(a.NumKVHeads), int64(a.RopeDim)}, write},
		{"Positions", "NumTokens", a.Positions, 8, []int64{t}, read},
	} {
		need, err := size(mlaArg, o.what, o.esize, o.counts...)
		if err != nil {
			return err
		}
		if err := sp.buffer(o.field, o.buf, need, 8, o.out); err != nil {
			return err
		}
	}
	return sp.check()
}

// mlaRopeQuantParams is the parameter list of the mla_rope_quant_* kernels,
// in PTX order (kernels_src/mla.cu).
type mlaRopeQuantParams struct {
	QNope, QRope, KNope, KRope, QOut, KNopeOut, KRopeOut, Positions, CosSin driver.DevicePtr
	MaxPos                                                                  int64
	RotDim                                                                  int32
	Fault                                                                   driver.DevicePtr
	NumTokens, NumQHeads, NumKVHeads, LoraRank, RopeDim                     int32
	QNopeTokenStride, QNopeHeadStride, QRopeTokenStride, QRopeHeadStride    int64
	KNopeTokenStride, KNopeHeadStride, KRopeTokenStride, KRopeHeadStride    int64
	QScale, KScale                                                          float32
	NeoX                                                                    int32
}

// MLARopeQuant runs the MLA rope + fp8 quantization step on stream s.
func (r *Runtime) MLARopeQuant(s *Stream, a *MLARopeQuantArgs) error {
	if err := r.on("MLARopeQuant", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	kernel, _, err := dispatch.MLAKernelNames(a.DType)
	if err != nil {
		return err
	}
	plan, err := dispatch.PlanTokens(kernel, a.NumTokens)
	if err != nil {
		return err
	}
	p := a.params(s.fault)
	return launchPlan(r, s, &plan.Launch, &p)
}

// params returns the kernel parameters of a valid a, with fault as the fault
// record.
func (a *MLARopeQuantArgs) params(fault driver.DevicePtr) mlaRopeQuantParams {
	qn, qr, kn, kr := a.rows()
	p := mlaRopeQuantParams{
		QNope: a.QNope.Ptr, QRope: a.QRope.Ptr, KNope: a.KNope.Ptr, KRope: a.KRope.Ptr,
		QOut: a.QOut.Ptr, KNopeOut: a.KNopeOut.Ptr, KRopeOut: a.KRopeOut.Ptr,
		Positions: a.Positions.Ptr, CosSin: a.CosSin.Ptr, MaxPos: int64(a.MaxPos), RotDim: int32(a.RotDim), Fault: fault,
		NumTokens: int32(a.NumTokens), NumQHeads: int32(a.NumQHeads), NumKVHeads: int32(a.NumKVHeads),
		LoraRank: int32(a.LoraRank), RopeDim: int32(a.RopeDim), QScale: a.QOutScale, KScale: a.KOutScale,
	}
	p.QNopeTokenStride, p.QNopeHeadStride = qn.strides()
	p.QRopeTokenStride, p.QRopeHeadStride = qr.strides()
	p.KNopeTokenStride, p.KNopeHeadStride = kn.strides()
	p.KRopeTokenStride, p.KRopeHeadStride = kr.strides()
	if a.NeoX {
		p.NeoX = 1
	}
	return p
}

// MLAConcatQArgs concatenates QNope [NumTokens, NumQHeads, LoraRank] and QRope
// [NumTokens, NumQHeads, RopeDim] (DType, element strides, 0 = contiguous)
// into Out [NumTokens, NumQHeads, LoraRank+RopeDim], bit for bit.
//
// Aliasing: Out must not overlap QNope or QRope (the kernel takes every
// pointer as restrict: a concat into one of its inputs is not in place);
// QNope and QRope may overlap each other. Validate refuses an overlap
// (ErrAliasing).
//
// Bounds: NumTokens ≤ 2^30, NumQHeads ≤ 2^12, LoraRank and RopeDim ≤ 4096
// (int32 in the kernel); strides ≤ 2^31 elements.
type MLAConcatQArgs struct {
	QNope, QRope, Out                 Buffer
	NumTokens, NumQHeads              int
	LoraRank, RopeDim                 int
	QNopeTokenStride, QNopeHeadStride int
	QRopeTokenStride, QRopeHeadStride int
	DType                             DType
}

const concatArg = "MLAConcatQArgs"

func (a *MLAConcatQArgs) rows() (qn, qr tokenRows) {
	qn = tokenRows{"QNope", "QNopeTokenStride", "QNopeHeadStride", "NumTokens", "NumQHeads", "LoraRank",
		a.QNope, a.NumTokens, a.NumQHeads, a.LoraRank, a.QNopeTokenStride, a.QNopeHeadStride}
	qr = tokenRows{"QRope", "QRopeTokenStride", "QRopeHeadStride", "NumTokens", "NumQHeads", "RopeDim",
		a.QRope, a.NumTokens, a.NumQHeads, a.RopeDim, a.QRopeTokenStride, a.QRopeHeadStride}
	return
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *MLAConcatQArgs) Validate() error {
	if a == nil {
		return errf("the *MLAConcatQArgs is nil")
	}
	if a.DType != F16 && a.DType != BF16 {
		return errf("%s.DType=%s is not supported; allowed: f16, bf16", concatArg, a.DType)
	}
	if err := inRange(concatArg, "NumTokens", a.NumTokens, 0, 1<<30); err != nil {
		return err
	}
	if err := inRange(concatArg, "NumQHeads", a.NumQHeads, 1, 1<<12); err != nil {
		return err
	}
	for _, d := range []struct {
		field string
		v     int
	}{{"LoraRank", a.LoraRank}, {"RopeDim", a.RopeDim}} {
		if d.v < 8 || d.v%8 != 0 || d.v > 4096 {
			return errf("%s.%s=%d is not supported; allowed: a multiple of 8 from 8 to 4096", concatArg, d.field, d.v)
		}
	}
	sp := spans{arg: concatArg}
	qn, qr := a.rows()
	if err := qn.check(&sp, a.DType, read); err != nil {
		return err
	}
	if err := qr.check(&sp, a.DType, read); err != nil {
		return err
	}
	if a.NumTokens == 0 {
		return sp.check()
	}
	out, err := size(concatArg, "NumTokens·NumQHeads·(LoraRank+RopeDim)", int64(a.DType.Size()),
		int64(a.NumTokens), int64(a.NumQHeads), int64(a.LoraRank+a.RopeDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("Out", a.Out, out, 16, write); err != nil {
		return err
	}
	return sp.check()
}

// mlaConcatQParams is the parameter list of the mla_concat_q_* kernels, in
// PTX order (kernels_src/mla.cu).
type mlaConcatQParams struct {
	QNope, QRope, Out                                                    driver.DevicePtr
	NumTokens, NumQHeads, LoraRank, RopeDim                              int32
	QNopeTokenStride, QNopeHeadStride, QRopeTokenStride, QRopeHeadStride int64
}

// MLAConcatQ concatenates the nope and rope parts of q on stream s.
func (r *Runtime) MLAConcatQ(s *Stream, a *MLAConcatQArgs) error {
	if err := r.on("MLAConcatQ", s); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	_, kernel, err := dispatch.MLAKernelNames(a.DType)
	if err != nil {
		return err
	}
	plan, err := dispatch.PlanTokens(kernel, a.NumTokens)
	if err != nil {
		return err
	}
	p := a.params()
	return launchPlan(r, s, &plan.Launch, &p)
}

// params returns the kernel parameters of a valid a.
func (a *MLAConcatQArgs) params() mlaConcatQParams {
	qn, qr := a.rows()
	p := mlaConcatQParams{QNope: a.QNope.Ptr, QRope: a.QRope.Ptr, Out: a.Out.Ptr,
		NumTokens: int32(a.NumTokens), NumQHeads: int32(a.NumQHeads), LoraRank: int32(a.LoraRank), RopeDim: int32(a.RopeDim)}
	p.QNopeTokenStride, p.QNopeHeadStride = qn.strides()
	p.QRopeTokenStride, p.QRopeHeadStride = qr.strides()
	return p
}
