package check

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// DecodeShape is the shape of one decode problem. Lengths are drawn in
// 0..MaxLen with the edge cases (0, 1, page boundaries, MaxLen) mixed in.
type DecodeShape struct {
	Seqs, QHeads, KVHeads, HeadDim, BlockSize, MaxBlocksPerSeq int
	NumBlocks                                                  int // 0 = just enough for every table entry, plus 3
	DType, CacheDType                                          pagedkv.DType
	MaxLen                                                     int
	Layout                                                     pagedkv.CacheLayout
}

func (c DecodeShape) String() string {
	s := fmt.Sprintf("S%d_QH%d_KH%d_D%d_bs%d_%s_%s_len%d", c.Seqs, c.QHeads, c.KVHeads, c.HeadDim, c.BlockSize, c.DType, c.CacheDType, c.MaxLen)
	if c.Layout != pagedkv.LayoutFlash {
		s += "_" + c.Layout.String()
	}
	return s
}

// RandomDecodeShape draws a small random decode shape covering every head
// dim (HeadDims), group size 1..16, block sizes 1..256, both dtypes
// and fp8 caches (at the head dims they serve, FP8HeadDim).
func RandomDecodeShape(g *rand.Rand) DecodeShape {
	c := DecodeShape{
		Seqs:      1 + g.IntN(12),
		KVHeads:   1 + g.IntN(4),
		HeadDim:   HeadDims[g.IntN(len(HeadDims))],
		BlockSize: 1 << g.IntN(9),
		DType:     []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
	}
	c.QHeads = c.KVHeads * (1 + g.IntN(16))
	c.CacheDType = c.DType
	if g.IntN(3) == 0 && FP8HeadDim(c.HeadDim) {
		c.CacheDType = pagedkv.E4M3
	}
	c.MaxLen = 1 + g.IntN(3000)
	c.MaxBlocksPerSeq = (c.MaxLen+c.BlockSize-1)/c.BlockSize + g.IntN(3)
	// The x-split and shuffle layouts: blocks of x (8 for 16-bit caches, 16
	// for e4m3) or more; not at head dim 120 (the flash rows only). The
	// HND layout: any shape.
	switch r := g.IntN(4); {
	case r == 0 && c.BlockSize >= 16/c.CacheDType.Size() && c.HeadDim != 120:
		c.Layout = []pagedkv.CacheLayout{pagedkv.LayoutXSplit, pagedkv.LayoutShuffle}[g.IntN(2)]
	case r == 1:
		c.Layout = pagedkv.LayoutHND
	}
	return c
}

// HeadDims lists the attention head dims of every attention op; the ones
// between the powers of two take caches of the queries' type only, and in
// Varlen the flash layout only (120, in tiles of 128: in Decode too).
var HeadDims = []int{64, 80, 96, 112, 120, 128, 192, 256}

// PowerOfTwo reports whether head dim d is 64, 128 or 256 (a power of
// two), whose kernels serve every cache type and layout.
func PowerOfTwo(d int) bool { return d&(d-1) == 0 }

// FP8HeadDim reports whether attention over fp8 e4m3 caches takes head dim
// d: 64, 96, 128, 192 and 256 (in Varlen, 96 and 192 in the flash layout
// only).
func FP8HeadDim(d int) bool { return PowerOfTwo(d) || d == 96 || d == 192 }

// RandomLens draws n lengths in [0, maxLen], mixing in 0, 1, page boundaries
// and maxLen; at least one is maxLen.
func RandomLens(g *rand.Rand, n, maxLen, bs int) []int32 {
	lens := make([]int32, n)
	edges := []int{maxLen, 1, bs, 2 * bs, bs + 1, 0, maxLen - 1}
	for i := range lens {
		l := g.IntN(maxLen + 1)
		if i < len(edges) && g.IntN(2) == 0 {
			l = edges[i]
		}
		lens[i] = int32(min(max(l, 0), maxLen))
	}
	lens[g.IntN(n)] = int32(maxLen)
	return lens
}

// DecodeProblem is a decode problem on the device with what its reference needs.
type DecodeProblem struct {
	Shape DecodeShape
	Args  pagedkv.DecodeArgs
	Arena *Arena

	Q, K, V []float64 // what the kernel sees, decoded, scales applied
	Tables  []int32
	Lens    []int32
	// Mods are the score modifiers Args carries (SetMods), as the
	// reference takes them.
	Mods ref.Mods
}

// NewDecodeProblem draws random data, a random page table (a shuffled
// permutation of physical blocks, distinct across sequences) and random
// lengths, and uploads them on s.
func NewDecodeProblem(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c DecodeShape) (*DecodeProblem, error) {
	if c.MaxLen > c.MaxBlocksPerSeq*c.BlockSize {
		return nil, errorf("MaxLen=%d exceeds MaxBlocksPerSeq·BlockSize=%d", c.MaxLen, c.MaxBlocksPerSeq*c.BlockSize)
	}
	entries := c.Seqs * c.MaxBlocksPerSeq
	if c.NumBlocks == 0 {
		c.NumBlocks = entries + 3
	}
	if c.NumBlocks < entries {
		return nil, errorf("NumBlocks=%d is below the %d table entries", c.NumBlocks, entries)
	}
	p := &DecodeProblem{Shape: c, Arena: NewArena(r)}
	perm := g.Perm(c.NumBlocks)
	p.Tables = make([]int32, entries)
	for i := range p.Tables {
		p.Tables[i] = int32(perm[i])
	}
	p.Lens = RandomLens(g, c.Seqs, c.MaxLen, c.BlockSize)

	rowElems := c.QHeads * c.HeadDim
	qStride := rowElems + 8*g.IntN(2)
	qRaw, qAll := RandomTensor(g, c.DType, c.Seqs*qStride, 1)
	p.Q = make([]float64, c.Seqs*rowElems)
	for sq := range c.Seqs {
		copy(p.Q[sq*rowElems:(sq+1)*rowElems], qAll[sq*qStride:])
	}
	caches := randomCaches(g, c.CacheDType, c.NumBlocks*c.BlockSize*c.KVHeads*c.HeadDim)
	p.K, p.V = caches.k, caches.v

	a := &p.Args
	*a = pagedkv.DecodeArgs{
		NumSeqs: c.Seqs, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim,
		BlockSize: c.BlockSize, NumBlocks: c.NumBlocks, MaxBlocksPerSeq: c.MaxBlocksPerSeq,
		MaxKVLen: maxLen(p.Lens), QTokenStride: qStride,
		DType: c.DType, CacheDType: c.CacheDType, KScale: caches.kScale, VScale: caches.vScale, Layout: c.Layout,
	}
	var set Setter
	set.To(&a.Q)(Upload(p.Arena, s, qRaw, 1))
	set.To(&a.KCache)(Upload(p.Arena, s, caches.kRaw, 1))
	set.To(&a.VCache)(Upload(p.Arena, s, caches.vRaw, 1))
	set.To(&a.BlockTables)(Upload(p.Arena, s, p.Tables, 4))
	set.To(&a.KVLens)(Upload(p.Arena, s, p.Lens, 4))
	set.To(&a.Out)(p.Arena.Alloc(int64(c.Seqs * rowElems * c.DType.Size())))
	set.To(&a.LSE)(p.Arena.Alloc(int64(c.Seqs * c.QHeads * 4)))
	if err := set.FreeOnError(p.Arena); err != nil {
		return nil, err
	}
	return p, nil
}

func maxLen(lens []int32) int {
	m := 0
	for _, l := range lens {
		m = max(m, int(l))
	}
	return m
}

// SetLens uploads new lengths (for graph replay); MaxKVLen follows them, and
// so does HostKVLens when it is set.
func (p *DecodeProblem) SetLens(s *pagedkv.Stream, lens []int32) error {
	p.Lens = lens
	p.Args.MaxKVLen = maxLen(lens)
	if p.Args.HostKVLens != nil {
		p.Args.HostKVLens = lens
	}
	return pagedkv.Upload(s, p.Args.KVLens, lens)
}

// RaggedLens draws n lengths in [0, maxLen] the way a serving batch looks:
// a few long requests (one at maxLen) among many short ones, with 0, 1 and
// page boundaries mixed in, in random order.
func RaggedLens(g *rand.Rand, n, maxLen, bs int) []int32 {
	lens := RandomLens(g, n, max(maxLen/16, 1), bs)
	for range 1 + n/32 {
		lens[g.IntN(n)] = int32(maxLen/2 + g.IntN(maxLen/2+1))
	}
	lens[g.IntN(n)] = int32(maxLen)
	return lens
}

// Reference computes the float64 output and LSE.
func (p *DecodeProblem) Reference() ([]float64, []float64) {
	c := p.Shape
	scale := float64(p.Args.Scale)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(c.HeadDim))
	}
	return ref.PagedDecode(ref.Decode{
		Q: p.Q, KCache: p.K, VCache: p.V, BlockTables: p.Tables, KVLens: p.Lens,
		NumSeqs: c.Seqs, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim,
		BlockSize: c.BlockSize, MaxBlocksPerSeq: c.MaxBlocksPerSeq, Scale: scale,
		Layout: ref.Layout(c.Layout), X: 16 / c.CacheDType.Size(), Mods: p.Mods,
	})
}

// SetMods gives the problem score modifiers: window (0: none), softCap (0:
// off), and random sinks and ALiBi slopes (uploaded on s) when asked.
func (p *DecodeProblem) SetMods(s *pagedkv.Stream, g *rand.Rand, window int, softCap float32, sinks, alibi bool) error {
	m, err := newMods(p.Arena, s, g, p.Shape.QHeads, window, softCap, sinks, alibi)
	if err != nil {
		return err
	}
	p.Mods = m.ref
	p.Args.SlidingWindow, p.Args.SoftCap, p.Args.Sinks, p.Args.AlibiSlopes = window, softCap, m.sinks, m.alibi
	return nil
}

// Poison fills the outputs with NaN on s.
func (p *DecodeProblem) Poison(s *pagedkv.Stream) error { return p.outputs().poison(s) }

// Run poisons the outputs, decodes on s and fetches the results.
func (p *DecodeProblem) Run(r *pagedkv.Runtime, s *pagedkv.Stream) ([]float64, []float32, error) {
	return p.outputs().run(s, func() error { return r.Decode(s, &p.Args) }, p.rows(), p.Shape.HeadDim)
}

// RunWithPlan is Run following plan (Runtime.DecodeWithPlan).
func (p *DecodeProblem) RunWithPlan(r *pagedkv.Runtime, s *pagedkv.Stream, plan dispatch.DecodePlan) ([]float64, []float32, error) {
	return p.outputs().run(s, func() error { return r.DecodeWithPlan(s, &p.Args, plan) }, p.rows(), p.Shape.HeadDim)
}

// PlanWith plans the problem's current arguments with knobs k
// (Runtime.PlanDecodeWith at its MaxKVLen).
func (p *DecodeProblem) PlanWith(r *pagedkv.Runtime, k dispatch.Knobs) (dispatch.DecodePlan, error) {
	return r.PlanDecodeWith(&p.Args, k)
}

// RunPlannedWith plans the problem with knobs k (PlanWith), runs that plan
// (RunWithPlan) and returns the output with the plan's split count.
func (p *DecodeProblem) RunPlannedWith(r *pagedkv.Runtime, s *pagedkv.Stream, k dispatch.Knobs) ([]float64, int, error) {
	plan, err := p.PlanWith(r, k)
	return runPlanned(err, plan.Splits, func() ([]float64, []float32, error) { return p.RunWithPlan(r, s, plan) })
}

// runPlanned runs a plan of split count splits that planning returned with
// err, and returns the output with the split count.
func runPlanned(err error, splits int, run func() ([]float64, []float32, error)) ([]float64, int, error) {
	if err != nil {
		return nil, 0, err
	}
	out, _, err := run()
	return out, splits, err
}

// UseCaches points the problem at the caches k and v, in layout l.
func (p *DecodeProblem) UseCaches(k, v pagedkv.Buffer, l pagedkv.CacheLayout) {
	p.Args.KCache, p.Args.VCache, p.Args.Layout = k, v, l
}

// Fetch downloads out and LSE after the work on s, and fails on a recorded fault.
func (p *DecodeProblem) Fetch(s *pagedkv.Stream) ([]float64, []float32, error) {
	return p.outputs().fetch(s, p.rows(), p.Shape.HeadDim)
}

func (p *DecodeProblem) outputs() attnOutputs {
	return attnOutputs{out: p.Args.Out, lse: p.Args.LSE, dtype: p.Shape.DType}
}

// rows is the problem's output rows: one per sequence and query head.
func (p *DecodeProblem) rows() int { return p.Shape.Seqs * p.Shape.QHeads }

// Check compares a GPU result with the float64 reference: rows of kv_len 0
// must be exactly zero with LSE -inf, the output within Tolerance by
// relative L2, and every LSE within 1e-3 (relative above 1).
func (p *DecodeProblem) Check(out []float64, lse []float32) error {
	wantOut, wantLSE := p.Reference()
	c := p.Shape
	row := c.QHeads * c.HeadDim
	for sq, l := range p.Lens {
		if l != 0 {
			continue
		}
		for i := sq * row; i < (sq+1)*row; i++ {
			if out[i] != 0 {
				return errorf("%v: seq %d has kv_len 0 but out[%d]=%g", c, sq, i, out[i])
			}
		}
	}
	if e := ref.RelL2(out, wantOut); !(e <= Tolerance(c.DType)) {
		return errorf("%v: output relative L2 error %.3g > %.3g", c, e, Tolerance(c.DType))
	}
	for i, w := range wantLSE {
		got := float64(lse[i])
		if math.IsInf(w, -1) {
			if !math.IsInf(got, -1) {
				return errorf("%v: LSE[%d]=%g, want -Inf (kv_len 0)", c, i, got)
			}
			continue
		}
		if !(math.Abs(got-w) <= 1e-3*max(1, math.Abs(w))) {
			return errorf("%v: LSE[%d]=%g, want %g", c, i, got, w)
		}
	}
	return nil
}
