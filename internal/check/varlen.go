package check

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// VarlenShape is the shape of one varlen problem: Seqs sequences of q_len
// 1..MaxQLen query tokens (some exactly 1, as decodes in a mixed batch) at
// KV positions drawn so that every KV length is at most MaxKV.
type VarlenShape struct {
	Seqs, QHeads, KVHeads, HeadDim, BlockSize int
	DType, CacheDType                         pagedkv.DType
	MaxQLen, MaxKV                            int
	Causal                                    bool
	Layout                                    pagedkv.CacheLayout
}

func (c VarlenShape) String() string {
	mask := "full"
	if c.Causal {
		mask = "causal"
	}
	s := fmt.Sprintf("S%d_QH%d_KH%d_D%d_bs%d_%s_%s_q%d_kv%d_%s", c.Seqs, c.QHeads, c.KVHeads, c.HeadDim, c.BlockSize,
		c.DType, c.CacheDType, c.MaxQLen, c.MaxKV, mask)
	if c.Layout != pagedkv.LayoutFlash {
		s += "_" + c.Layout.String()
	}
	return s
}

// RandomVarlenShape draws a small random varlen shape covering every head
// dim, groups 1..16, block sizes 1..256, both dtypes, both masks, fp8
// caches where they serve the head dim (FP8HeadDim), and at head dims 64,
// 128 and 256 (blocks of 8 or more for 16-bit caches, 16 for fp8) the
// x-split and shuffle layouts.
func RandomVarlenShape(g *rand.Rand) VarlenShape {
	c := VarlenShape{
		Seqs:      1 + g.IntN(6),
		KVHeads:   1 + g.IntN(3),
		HeadDim:   HeadDims[g.IntN(len(HeadDims))],
		BlockSize: 1 << g.IntN(9),
		DType:     []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
		Causal:    g.IntN(4) != 0,
	}
	c.QHeads = c.KVHeads * []int{1, 2, 4, 8, 16, 3, 5}[g.IntN(7)]
	c.CacheDType = c.DType
	if g.IntN(3) == 0 && FP8HeadDim(c.HeadDim) {
		c.CacheDType = pagedkv.E4M3
	}
	c.MaxQLen = 1 + g.IntN(300)
	c.MaxKV = c.MaxQLen + g.IntN(2000)
	switch r := g.IntN(4); {
	case r == 0 && c.BlockSize >= 16/c.CacheDType.Size() && PowerOfTwo(c.HeadDim):
		c.Layout = []pagedkv.CacheLayout{pagedkv.LayoutXSplit, pagedkv.LayoutShuffle}[g.IntN(2)]
	case r == 1:
		c.Layout = pagedkv.LayoutHND
	}
	return c
}

// VarlenProblem is a varlen problem on the device with what its reference
// needs.
type VarlenProblem struct {
	Shape VarlenShape
	Args  pagedkv.VarlenArgs
	Arena *Arena

	Q, K, V    []float64 // what the kernel sees, decoded, scales applied
	Tables     []int32
	CuSeqlensQ []int32
	PosOffsets []int32
	Mods       ref.Mods // the score modifiers (SetMods)
}

// VarlenLens draws the query lengths and offsets of c: lengths 1..MaxQLen
// with 1 and MaxQLen mixed in, offsets 0..MaxKV−q_len with 0 and the
// largest mixed in (so KV lengths hit page edges and MaxKV).
func VarlenLens(g *rand.Rand, c VarlenShape) (cu, pos []int32) {
	cu = make([]int32, c.Seqs+1)
	pos = make([]int32, c.Seqs)
	for s := range c.Seqs {
		q := 1 + g.IntN(c.MaxQLen)
		switch g.IntN(4) {
		case 0:
			q = 1
		case 1:
			q = c.MaxQLen
		}
		room := c.MaxKV - q
		p := g.IntN(room + 1)
		switch g.IntN(4) {
		case 0:
			p = 0
		case 1:
			p = room
		}
		cu[s+1] = cu[s] + int32(q)
		pos[s] = int32(p)
	}
	return cu, pos
}

// NewVarlenProblem draws random data, a random page table (a shuffled
// permutation of physical blocks) and random lengths (VarlenLens), and
// uploads them on s. Out and LSE are allocated; LSE is passed to the op.
func NewVarlenProblem(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c VarlenShape) (*VarlenProblem, error) {
	cu, pos := VarlenLens(g, c)
	return NewVarlenProblemWith(r, s, g, c, cu, pos)
}

// NewVarlenProblemWith is NewVarlenProblem with the given lengths.
func NewVarlenProblemWith(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c VarlenShape, cu, pos []int32) (*VarlenProblem, error) {
	maxKV := 0
	for i := range c.Seqs {
		maxKV = max(maxKV, int(pos[i]+cu[i+1]-cu[i]))
	}
	mbps := max((c.MaxKV+c.BlockSize-1)/c.BlockSize, 1) + g.IntN(2)
	entries := c.Seqs * mbps
	numBlocks := entries + 3
	p := &VarlenProblem{Shape: c, Arena: NewArena(r), CuSeqlensQ: cu, PosOffsets: pos}
	perm := g.Perm(numBlocks)
	p.Tables = make([]int32, entries)
	for i := range p.Tables {
		p.Tables[i] = int32(perm[i])
	}
	total := int(cu[c.Seqs])
	rowElems := c.QHeads * c.HeadDim
	qStride := rowElems + 8*g.IntN(2)
	qRaw, qAll := RandomTensor(g, c.DType, max(total, 1)*qStride, 1)
	p.Q = make([]float64, total*rowElems)
	for t := range total {
		copy(p.Q[t*rowElems:(t+1)*rowElems], qAll[t*qStride:])
	}
	caches := randomCaches(g, c.CacheDType, numBlocks*c.BlockSize*c.KVHeads*c.HeadDim)
	p.K, p.V = caches.k, caches.v

	a := &p.Args
	*a = pagedkv.VarlenArgs{
		NumSeqs: c.Seqs, NumTokens: total, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim,
		BlockSize: c.BlockSize, NumBlocks: numBlocks, MaxBlocksPerSeq: mbps, MaxKVLen: maxKV,
		QTokenStride: qStride, Causal: c.Causal, HostCuSeqlensQ: cu, HostPosOffsets: pos,
		DType: c.DType, CacheDType: c.CacheDType, KScale: caches.kScale, VScale: caches.vScale, Layout: c.Layout,
	}
	var set Setter
	set.To(&a.Q)(Upload(p.Arena, s, qRaw, 1))
	set.To(&a.KCache)(Upload(p.Arena, s, caches.kRaw, 1))
	set.To(&a.VCache)(Upload(p.Arena, s, caches.vRaw, 1))
	set.To(&a.BlockTables)(Upload(p.Arena, s, p.Tables, 4))
	set.To(&a.CuSeqlensQ)(Upload(p.Arena, s, cu, 4))
	set.To(&a.PosOffsets)(Upload(p.Arena, s, pos, 4))
	set.To(&a.Out)(p.Arena.Alloc(int64(total * rowElems * c.DType.Size())))
	set.To(&a.LSE)(p.Arena.Alloc(int64(total * c.QHeads * 4)))
	if err := set.FreeOnError(p.Arena); err != nil {
		return nil, err
	}
	return p, nil
}

// SetLens uploads new lengths into the problem's device arrays (for graph
// replay: at most the capture's NumTokens tokens over its NumSeqs
// sequences); the host copies in Args stay those of the capture.
func (p *VarlenProblem) SetLens(s *pagedkv.Stream, cu, pos []int32) error {
	p.CuSeqlensQ, p.PosOffsets = cu, pos
	if err := pagedkv.Upload(s, p.Args.CuSeqlensQ, cu); err != nil {
		return err
	}
	return pagedkv.Upload(s, p.Args.PosOffsets, pos)
}

// SetMods gives the problem score modifiers: a sliding window, a soft-cap,
// and random sinks and ALiBi slopes (uploaded on s) where asked for.
func (p *VarlenProblem) SetMods(s *pagedkv.Stream, g *rand.Rand, window int, softCap float32, sinks, alibi bool) error {
	m, err := newMods(p.Arena, s, g, p.Shape.QHeads, window, softCap, sinks, alibi)
	if err != nil {
		return err
	}
	p.Mods = m.ref
	p.Args.SlidingWindow, p.Args.SoftCap, p.Args.Sinks, p.Args.AlibiSlopes = window, softCap, m.sinks, m.alibi
	return nil
}

// Reference computes the float64 output and LSE of the current lengths.
func (p *VarlenProblem) Reference() ([]float64, []float64) {
	c := p.Shape
	scale := float64(p.Args.Scale)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(c.HeadDim))
	}
	total := int(p.CuSeqlensQ[c.Seqs])
	return ref.PagedVarlen(ref.Varlen{
		Q: p.Q[:total*c.QHeads*c.HeadDim], KCache: p.K, VCache: p.V, BlockTables: p.Tables,
		CuSeqlensQ: p.CuSeqlensQ, PosOffsets: p.PosOffsets,
		NumSeqs: c.Seqs, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim,
		BlockSize: c.BlockSize, MaxBlocksPerSeq: p.Args.MaxBlocksPerSeq, Causal: c.Causal, Scale: scale,
		Layout: ref.Layout(c.Layout), X: 16 / c.CacheDType.Size(), Mods: p.Mods,
	})
}

// Poison fills the outputs with NaN on s.
func (p *VarlenProblem) Poison(s *pagedkv.Stream) error { return p.outputs().poison(s) }

// Run poisons the outputs, runs the varlen on s and fetches the results.
func (p *VarlenProblem) Run(r *pagedkv.Runtime, s *pagedkv.Stream) ([]float64, []float32, error) {
	return p.run(s, func() error { return r.Varlen(s, &p.Args) })
}

// RunWithPlan is Run following plan (Runtime.VarlenWithPlan).
func (p *VarlenProblem) RunWithPlan(r *pagedkv.Runtime, s *pagedkv.Stream, plan dispatch.VarlenPlan) ([]float64, []float32, error) {
	return p.run(s, func() error { return r.VarlenWithPlan(s, &p.Args, plan) })
}

// PlanWith plans the problem's current arguments with knobs k
// (Runtime.PlanVarlenWith).
func (p *VarlenProblem) PlanWith(r *pagedkv.Runtime, k dispatch.Knobs) (dispatch.VarlenPlan, error) {
	return r.PlanVarlenWith(&p.Args, k)
}

// RunPlannedWith plans the problem with knobs k (PlanWith), runs that plan
// (RunWithPlan) and returns the output with the plan's split count.
func (p *VarlenProblem) RunPlannedWith(r *pagedkv.Runtime, s *pagedkv.Stream, k dispatch.Knobs) ([]float64, int, error) {
	plan, err := p.PlanWith(r, k)
	return runPlanned(err, plan.Splits, func() ([]float64, []float32, error) { return p.RunWithPlan(r, s, plan) })
}

// UseCaches points the problem at the caches k and v, in layout l.
func (p *VarlenProblem) UseCaches(k, v pagedkv.Buffer, l pagedkv.CacheLayout) {
	p.Args.KCache, p.Args.VCache, p.Args.Layout = k, v, l
}

func (p *VarlenProblem) run(s *pagedkv.Stream, op func() error) ([]float64, []float32, error) {
	return p.outputs().run(s, op, p.rows(), p.Shape.HeadDim)
}

// Fetch downloads the current lengths' out and LSE (nil when the problem
// asks for none) after the work on s, and fails on a recorded fault.
func (p *VarlenProblem) Fetch(s *pagedkv.Stream) ([]float64, []float32, error) {
	return p.outputs().fetch(s, p.rows(), p.Shape.HeadDim)
}

func (p *VarlenProblem) outputs() attnOutputs {
	return attnOutputs{out: p.Args.Out, lse: p.Args.LSE, dtype: p.Shape.DType}
}

// rows is the output rows of the current lengths: one per query token and
// head.
func (p *VarlenProblem) rows() int { return int(p.CuSeqlensQ[p.Shape.Seqs]) * p.Shape.QHeads }

// Check compares a GPU result with the float64 reference: the output within
// Tolerance by relative L2 (and finite everywhere: a NaN left from the
// poison fails), every LSE within 1e-3 (relative above 1); a nil lse (a run
// without LSE) is not compared.
func (p *VarlenProblem) Check(out []float64, lse []float32) error {
	wantOut, wantLSE := p.Reference()
	return p.CheckReference(out, lse, wantOut, wantLSE)
}

// CheckReference is Check against wantOut and wantLSE from Reference, for
// checking several runs of the same lengths against one reference (it is
// the costly part: float64 attention on one CPU core).
func (p *VarlenProblem) CheckReference(out []float64, lse []float32, wantOut, wantLSE []float64) error {
	c := p.Shape
	for i, o := range out {
		if math.IsNaN(o) || math.IsInf(o, 0) {
			row := i / c.HeadDim
			return errorf("%v: out[%d] (token %d, head %d) = %g", c, i, row/c.QHeads, row%c.QHeads, o)
		}
	}
	if e := ref.RelL2(out, wantOut); !(e <= Tolerance(c.DType)) {
		return errorf("%v: output relative L2 error %.3g > %.3g", c, e, Tolerance(c.DType))
	}
	if lse == nil {
		return nil // the run asked for no LSE
	}
	for i, w := range wantLSE {
		got := float64(lse[i])
		if !(math.Abs(got-w) <= 1e-3*max(1, math.Abs(w))) {
			return errorf("%v: LSE[%d] (token %d, head %d) = %g, want %g", c, i, i/c.QHeads, i%c.QHeads, got, w)
		}
	}
	return nil
}

// SequenceArgs returns the SequenceAttention arguments of a one-sequence
// problem (its KV length PosOffsets[0] + q_len, Out and LSE the problem's),
// with KVLens at kvLens for the decode path.
func (p *VarlenProblem) SequenceArgs(kvLens pagedkv.Buffer) pagedkv.SequenceArgs {
	a, c := &p.Args, p.Shape
	qLen := int(p.CuSeqlensQ[1] - p.CuSeqlensQ[0])
	return pagedkv.SequenceArgs{
		Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables, KVLens: kvLens,
		Out: a.Out, LSE: a.LSE, NumSeqs: 1, QLen: qLen, HostKVLens: []int32{p.PosOffsets[0] + int32(qLen)},
		NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize,
		NumBlocks: a.NumBlocks, MaxBlocksPerSeq: a.MaxBlocksPerSeq, QTokenStride: a.QTokenStride,
		DType: c.DType, CacheDType: c.CacheDType, Layout: c.Layout, KScale: a.KScale, VScale: a.VScale,
		SlidingWindow: a.SlidingWindow, SoftCap: a.SoftCap, Sinks: a.Sinks, AlibiSlopes: a.AlibiSlopes,
	}
}

// RunSequence runs a one-sequence causal problem through SequenceAttention
// on s (the decode path for one query token, with its KV length uploaded)
// and returns the output token-major, as Run does, with the LSE.
func (p *VarlenProblem) RunSequence(r *pagedkv.Runtime, s *pagedkv.Stream) ([]float64, []float32, error) {
	return p.RunSequenceVia(s, func(a *pagedkv.SequenceArgs) error { return r.SequenceAttention(s, a) })
}

// RunSequenceVia is RunSequence with the call made by call, which must run
// a on s (eagerly, or by capturing and replaying a graph).
func (p *VarlenProblem) RunSequenceVia(s *pagedkv.Stream, call func(a *pagedkv.SequenceArgs) error) ([]float64, []float32, error) {
	c := p.Shape
	if c.Seqs != 1 || !c.Causal {
		return nil, nil, errorf("%v: SequenceAttention runs one causal sequence", c)
	}
	kvLens, err := Upload(p.Arena, s, []int32{p.PosOffsets[0] + p.CuSeqlensQ[1]}, 4)
	if err != nil {
		return nil, nil, err
	}
	a := p.SequenceArgs(kvLens)
	headMajor, lse, err := p.run(s, func() error { return call(&a) })
	if err != nil {
		return nil, nil, err
	}
	out := make([]float64, len(headMajor))
	for h := range c.QHeads {
		for t := range a.QLen {
			copy(out[(t*c.QHeads+h)*c.HeadDim:][:c.HeadDim], headMajor[(h*a.QLen+t)*c.HeadDim:])
		}
	}
	return out, lse, nil
}
