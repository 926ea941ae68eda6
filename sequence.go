package pagedkv

import (
	"errors"
	"strings"

	"github.com/pagedkv/pagedkv/driver"
)

// SequenceArgs describes the attention of one sequence's new query tokens
// over its paged cache, or of one token of each of several sequences: a
// single-sequence entry point over the batched kernels.
// The varlen path's lengths come from the host's copy of KVLens;
// SequenceAttention hands them to the kernel itself.
//
//   - Q: [NumSeqs·QLen, NumQHeads, HeadDim] of DType, token-major
//     (QTokenStride as VarlenArgs'; 0 = contiguous).
//   - KCache, VCache, BlockTables ([NumSeqs, MaxBlocksPerSeq]):
//     as for DecodeArgs (in Layout). The cache already holds the new tokens.
//   - KVLens: int32 [NumSeqs] on the device, each sequence's KV length, the
//     new tokens included (read by the QLen 1 path only; the varlen path
//     takes its lengths from HostKVLens); HostKVLens: the host's copy
//     (required: it picks the path and gives the varlen its position
//     offset).
//   - Out: head-major [NumQHeads, QLen, HeadDim] of DType for one sequence
//     (for QLen 1 that is also [NumSeqs, NumQHeads, HeadDim], as Decode
//     writes it). LSE (optional): f32 [NumSeqs·QLen, NumQHeads].
//   - KVCapacity, Workspace: as for DecodeArgs and VarlenArgs (the graph's
//     KV capacity, 0 = KV_CAPACITY; the engine's own split-K scratch, sized
//     from the plan of the op the call runs: for QLen 1, PlanDecode or
//     PlanDecodeGraph of the DecodeArgs with the same fields and MaxKVLen
//     the largest HostKVLens; else PlanVarlen of the VarlenArgs described
//     below, with MaxKVLen KVLens[0]).
//   - SlidingWindow, SoftCap, Sinks, AlibiSlopes: the score modifiers, as
//     DecodeArgs and VarlenArgs take them (off by default).
//
// Aliasing: Out and LSE must not overlap each other or any input; the inputs
// may overlap one another. Workspace must not overlap any other buffer.
// Validate refuses an overlap (ErrAliasing).
//
// QLen == 1 runs the batched decode (Decode) over the NumSeqs sequences.
// QLen > 1 needs NumSeqs == 1 (several sequences with several query tokens
// each are a varlen batch: use Varlen) and KVLens[0] ≥ QLen, and runs
// Varlen over the one sequence, causal, with CuSeqlensQ {0, QLen} and
// PosOffsets {KVLen − QLen}, writing Out head-major through Varlen's output
// strides (no transpose pass and no buffer).
//
// Graphs: the decode path reads KVLens on the device, as Decode does. The
// varlen path hands its kernels the two lengths as launch parameters (no
// device memory, nothing to copy), so a captured SequenceAttention with
// QLen > 1 replays the lengths it was captured with, planned for them
// (KVCapacity plays no part there); engines whose prompt lengths change
// between replays call Varlen with device-resident lengths. Before capture,
// ReserveSequence sizes the stream's split-K scratch for the call (or pass
// a Workspace).
type SequenceArgs struct {
	Q, KCache, VCache, BlockTables, KVLens Buffer
	Out, LSE                               Buffer
	Workspace                              Buffer

	NumSeqs, QLen                         int
	HostKVLens                            []int32
	NumQHeads, NumKVHeads, HeadDim        int
	BlockSize, NumBlocks, MaxBlocksPerSeq int
	QTokenStride                          int
	KVCapacity                            int
	DType, CacheDType                     DType
	Layout                                CacheLayout
	Scale, KScale, VScale                 float32

	SlidingWindow      int
	SoftCap            float32
	Sinks, AlibiSlopes Buffer
}

const sequenceArg = "SequenceArgs"

// Validate checks what SequenceAttention decides on and what the op it runs
// will check again: the lengths, and the arguments of that op.
func (a *SequenceArgs) Validate() error {
	if a == nil {
		return errf("the *SequenceArgs is nil")
	}
	if err := a.checkLengths(); err != nil {
		return err
	}
	// The op a runs checks the rest; its errors name a's fields.
	if a.QLen == 1 {
		d := a.decode()
		return sequenceError(d.Validate(), "DecodeArgs")
	}
	v := a.varlen()
	return sequenceError(v.Validate(), "VarlenArgs")
}

// checkLengths checks what only SequenceArgs decides: the path its lengths
// pick and that they fit the cache.
func (a *SequenceArgs) checkLengths() error {
	if a == nil {
		return errf("the *%s is nil", sequenceArg)
	}
	if a.QLen < 1 {
		return errf("%s.QLen=%d is out of range; allowed: ≥ 1", sequenceArg, a.QLen)
	}
	if a.NumSeqs < 1 {
		return errf("%s.NumSeqs=%d is out of range; allowed: ≥ 1", sequenceArg, a.NumSeqs)
	}
	if a.QLen > 1 && a.NumSeqs != 1 {
		return errf("%s.NumSeqs=%d with QLen=%d: several sequences with several query tokens each are a varlen batch; run them with Runtime.Varlen (VarlenArgs)", sequenceArg, a.NumSeqs, a.QLen)
	}
	if len(a.HostKVLens) != a.NumSeqs {
		return errf("%s.HostKVLens has %d values; allowed: NumSeqs=%d", sequenceArg, len(a.HostKVLens), a.NumSeqs)
	}
	capTokens := int64(a.MaxBlocksPerSeq) * int64(a.BlockSize)
	for i, n := range a.HostKVLens {
		if int(n) < a.QLen {
			return errf("%s.HostKVLens[%d]=%d is below QLen=%d: the cache must already hold the sequence's new tokens", sequenceArg, i, n, a.QLen)
		}
		if a.MaxBlocksPerSeq > 0 && a.BlockSize > 0 && int64(n) > capTokens {
			return errf("%s.HostKVLens[%d]=%d exceeds MaxBlocksPerSeq·BlockSize=%d", sequenceArg, i, n, capTokens)
		}
	}
	return nil
}

// sequenceFields maps the fields of the op a SequenceArgs runs that
// SequenceArgs spells otherwise to SequenceArgs' own, for errors: the
// varlen's query tokens are QLen, and its output strides are Out's
// head-major layout.
var sequenceFields = strings.NewReplacer(
	"VarlenArgs.NumTokens", sequenceArg+".QLen",
	"VarlenArgs.OutTokenStride", sequenceArg+".Out (head-major)",
	"VarlenArgs.OutHeadStride", sequenceArg+".Out (head-major)",
	"VarlenArgs.", sequenceArg+".",
	"DecodeArgs.", sequenceArg+".",
)

// sequenceError renames the fields named by err, when it is a validation
// error of the op whose argument struct is arg, to the SequenceArgs fields
// the caller set; other errors (faults, driver errors) pass through.
func sequenceError(err error, arg string) error {
	if err == nil {
		return nil
	}
	var ae *argError
	if !errors.As(err, &ae) {
		return err
	}
	msg := strings.TrimPrefix(ae.Error(), "pagedkv: ")
	if !strings.Contains(msg, arg+".") {
		return err
	}
	if errors.Is(err, ErrAliasing) {
		return &argError{&aliasError{"pagedkv: " + sequenceFields.Replace(msg)}}
	}
	return errf("%s", sequenceFields.Replace(msg))
}

// oneSeqPtr stands in for CuSeqlensQ and PosOffsets in the varlen a
// SequenceArgs runs, so that VarlenArgs' checks, which read a buffer's
// address only to see that it is set and aligned, pass: the launch hands the
// kernels the lengths as parameters instead (batchView.oneSeq) and the
// stand-in is never read.
const oneSeqPtr driver.DevicePtr = 256

// decode returns the Decode a (QLen 1) runs.
func (a *SequenceArgs) decode() DecodeArgs {
	maxKV := 0
	for _, n := range a.HostKVLens {
		maxKV = max(maxKV, int(n))
	}
	return DecodeArgs{
		Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables,
		KVLens: a.KVLens, Out: a.Out, LSE: a.LSE, Workspace: a.Workspace, KVCapacity: a.KVCapacity,
		NumSeqs: a.NumSeqs, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: a.BlockSize, NumBlocks: a.NumBlocks, MaxBlocksPerSeq: a.MaxBlocksPerSeq,
		MaxKVLen: maxKV, QTokenStride: a.QTokenStride, HostKVLens: a.HostKVLens,
		DType: a.DType, CacheDType: a.CacheDType, Layout: a.Layout, Scale: a.Scale, KScale: a.KScale, VScale: a.VScale,
		SlidingWindow: a.SlidingWindow, SoftCap: a.SoftCap, Sinks: a.Sinks, AlibiSlopes: a.AlibiSlopes,
	}
}

// varlen returns the Varlen a (one sequence, QLen > 1) runs; its lengths
// travel as kernel parameters (view).
func (a *SequenceArgs) varlen() VarlenArgs {
	kv := int(a.HostKVLens[0])
	return VarlenArgs{
		Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables,
		CuSeqlensQ: Buffer{Ptr: oneSeqPtr, Bytes: 8}, PosOffsets: Buffer{Ptr: oneSeqPtr + 8, Bytes: 4},
		Out: a.Out, LSE: a.LSE, Workspace: a.Workspace, KVCapacity: a.KVCapacity,
		NumSeqs: 1, NumTokens: a.QLen, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: a.BlockSize, NumBlocks: a.NumBlocks, MaxBlocksPerSeq: a.MaxBlocksPerSeq, MaxKVLen: kv,
		QTokenStride: a.QTokenStride, OutTokenStride: a.HeadDim, OutHeadStride: a.QLen * a.HeadDim, Causal: true,
		// No host copies of the lengths: Validate checked them, and for one
		// sequence the planner's tile count is exact without them (slices
		// here would cost two allocations a call).
		DType: a.DType, CacheDType: a.CacheDType, Layout: a.Layout, Scale: a.Scale, KScale: a.KScale, VScale: a.VScale,
		SlidingWindow: a.SlidingWindow, SoftCap: a.SoftCap, Sinks: a.Sinks, AlibiSlopes: a.AlibiSlopes,
	}
}

// SequenceAttention runs a on stream s: the batched decode for one query
// token per sequence, else a causal varlen over the one sequence with a
// head-major output (see SequenceArgs).
func (r *Runtime) SequenceAttention(s *Stream, a *SequenceArgs) error {
	if err := r.on("SequenceAttention", s); err != nil {
		return err
	}
	if err := a.checkLengths(); err != nil {
		return err
	}
	if a.QLen == 1 {
		// Decode validates; its errors name a's fields.
		d := a.decode()
		return sequenceError(r.Decode(s, &d), "DecodeArgs")
	}
	v := a.varlen()
	if err := v.Validate(); err != nil {
		return sequenceError(err, "VarlenArgs")
	}
	return r.runVarlen(s, &v, a.view())
}

// ReserveSequence sizes stream s's scratch for a as graph capture will plan
// it: for QLen 1 as ReserveDecode does for the decode it runs, else for the
// varlen over the one sequence at its lengths. Call it before BeginCapture;
// a call with its own Workspace needs no reservation.
func (r *Runtime) ReserveSequence(s *Stream, a *SequenceArgs) error {
	if err := r.on("ReserveSequence", s); err != nil {
		return err
	}
	if err := a.checkLengths(); err != nil {
		return err
	}
	if a.QLen == 1 {
		d := a.decode()
		return sequenceError(r.ReserveDecode(s, &d), "DecodeArgs")
	}
	v := a.varlen()
	if err := v.Validate(); err != nil {
		return sequenceError(err, "VarlenArgs")
	}
	plan, err := r.planVarlenFor(&v, false)
	if err != nil || !a.Workspace.IsZero() {
		return sequenceError(err, "VarlenArgs")
	}
	return r.reserveSplit(s, &plan.SplitK)
}

// view returns the lengths of the varlen a (QLen > 1) runs, for its kernels'
// parameters.
func (a *SequenceArgs) view() batchView {
	return batchView{oneSeq: true, onePos: a.HostKVLens[0] - int32(a.QLen)}
}
