package check

import (
	"fmt"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// AppendShape is the shape of one cache-append problem.
type AppendShape struct {
	Tokens, KVHeads, HeadDim, BlockSize, NumBlocks int
	DType, CacheDType                              pagedkv.DType
	PadToken, PadHead                              int  // extra input stride, multiples of 8 elements
	Remap                                          bool // use a sliding-window remap table
	// PageRuns maps the tokens like a batch of prefills (PageRunSlots), and
	// a remap moves whole pages (PageRemap), so that most 8-token groups are
	// aligned runs of one page and some are not; otherwise each token gets a
	// random slot, as decode steps do.
	PageRuns bool
	Layout   pagedkv.CacheLayout
	Path     dispatch.AppendPath // the path the check forces (auto: the planner's)
}

func (c AppendShape) String() string {
	slots := "random"
	if c.PageRuns {
		slots = "runs"
	}
	return fmt.Sprintf("T%d_KH%d_D%d_bs%d_nb%d_%s_%s_%s_pad%d.%d_remap%v_%s", c.Tokens, c.KVHeads, c.HeadDim, c.BlockSize,
		c.NumBlocks, c.DType, c.CacheDType, c.Layout, c.PadToken, c.PadHead, c.Remap, slots)
}

// RandomAppendShape draws a random append shape: head dims that are any
// multiple of 8 up to 256, block sizes 1..256, strided inputs, fp8 caches,
// remap tables, and random or page-run slots.
func RandomAppendShape(g *rand.Rand) AppendShape {
	c := AppendShape{
		Tokens:    1 + g.IntN(700),
		KVHeads:   1 + g.IntN(8),
		HeadDim:   8 * (1 + g.IntN(32)),
		BlockSize: 1 << g.IntN(9),
		DType:     []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
		PadToken:  8 * g.IntN(3),
		PadHead:   8 * g.IntN(2),
		Remap:     g.IntN(3) == 0,
		PageRuns:  g.IntN(2) == 0,
	}
	c.CacheDType = c.DType
	if g.IntN(2) == 0 {
		c.CacheDType = pagedkv.E4M3
	}
	// A layout the shape allows: x-split needs HeadDim, shuffle also
	// BlockSize, to be multiples of x (8 for 16-bit caches, 16 for fp8);
	// flash and HND take any.
	x := 16 / c.CacheDType.Size()
	switch l := pagedkv.CacheLayout(g.IntN(4)); {
	case l == pagedkv.LayoutShuffle && c.HeadDim%x == 0 && c.BlockSize%x == 0,
		l == pagedkv.LayoutXSplit && c.HeadDim%x == 0, l == pagedkv.LayoutHND:
		c.Layout = l
	}
	c.NumBlocks = (c.Tokens+c.BlockSize-1)/c.BlockSize + 1 + g.IntN(3)
	if c.PageRuns { // room for sequences that start inside a page
		c.NumBlocks += 4
	}
	return c
}

// drawSlots draws the slot mapping and, with Remap, the remap table.
func (c AppendShape) drawSlots(g *rand.Rand) (slots, remap []int64) {
	numSlots := c.NumBlocks * c.BlockSize
	switch {
	case c.PageRuns:
		slots = PageRunSlots(g, c.Tokens, c.NumBlocks, c.BlockSize)
		if c.Remap {
			remap = PageRemap(g, c.NumBlocks, c.BlockSize)
		}
	default:
		slots = RandomSlots(g, c.Tokens, g.Perm(numSlots))
		if c.Remap {
			remap = RandomRemap(g, numSlots)
		}
	}
	return slots, remap
}

// AppendProblem is an append problem on the device with its reference.
type AppendProblem struct {
	Shape AppendShape
	Args  pagedkv.AppendArgs
	Arena *Arena

	KeyRaw, ValueRaw   []byte
	KCache, VCache     []byte // initial cache contents (random bytes)
	SlotMapping, Remap []int64
}

// NewAppendProblem draws random inputs, caches pre-filled with random bytes
// (so untouched slots are checked too), distinct slots with some -1 (random,
// or page runs: see AppendShape.PageRuns), and optionally a remap table, and
// uploads them on s.
func NewAppendProblem(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c AppendShape) (*AppendProblem, error) {
	p := &AppendProblem{Shape: c, Arena: NewArena(r)}
	headStride := c.HeadDim + c.PadHead
	tokenStride := c.KVHeads*headStride + c.PadToken
	p.KeyRaw, _ = RandomTensor(g, c.DType, max(c.Tokens*tokenStride, 8), 2)
	p.ValueRaw, _ = RandomTensor(g, c.DType, max(c.Tokens*tokenStride, 8), 2)
	numSlots := c.NumBlocks * c.BlockSize
	p.KCache, p.VCache = RandomCaches(g, numSlots*c.KVHeads*c.HeadDim*c.CacheDType.Size())
	p.SlotMapping, p.Remap = c.drawSlots(g)
	a := &p.Args
	*a = pagedkv.AppendArgs{
		NumTokens: c.Tokens, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize, NumBlocks: c.NumBlocks,
		KTokenStride: tokenStride, KHeadStride: headStride, VTokenStride: tokenStride, VHeadStride: headStride,
		DType: c.DType, CacheDType: c.CacheDType, Layout: c.Layout,
	}
	if c.CacheDType == pagedkv.E4M3 {
		a.KScale, a.VScale = 0.05+g.Float32(), 0.05+g.Float32()
	}
	var set Setter
	set.To(&a.K)(Upload(p.Arena, s, p.KeyRaw, 1))
	set.To(&a.V)(Upload(p.Arena, s, p.ValueRaw, 1))
	set.To(&a.KCache)(Upload(p.Arena, s, p.KCache, 1))
	set.To(&a.VCache)(Upload(p.Arena, s, p.VCache, 1))
	set.To(&a.SlotMapping)(Upload(p.Arena, s, p.SlotMapping, 8))
	if p.Remap != nil {
		set.To(&a.SlotRemap)(Upload(p.Arena, s, p.Remap, 8))
	}
	if err := set.FreeOnError(p.Arena); err != nil {
		return nil, err
	}
	return p, nil
}

// RunAndCheck appends on s and compares both caches with the reference bit
// for bit.
func (p *AppendProblem) RunAndCheck(r *pagedkv.Runtime, s *pagedkv.Stream) error {
	plan, err := r.PlanAppendWith(&p.Args, p.Shape.Path)
	if err != nil {
		return err
	}
	if err := r.AppendWithPlan(s, &p.Args, plan); err != nil {
		return err
	}
	if err := s.Fault(); err != nil {
		return err
	}
	gotK := make([]byte, len(p.KCache))
	gotV := make([]byte, len(p.VCache))
	if err := pagedkv.Download(s, gotK, p.Args.KCache); err != nil {
		return err
	}
	if err := pagedkv.Download(s, gotV, p.Args.VCache); err != nil {
		return err
	}
	c, a := p.Shape, &p.Args
	wantK := append([]byte(nil), p.KCache...)
	wantV := append([]byte(nil), p.VCache...)
	ref.CacheAppendFlash(ref.CacheAppend{
		Key: p.KeyRaw, Value: p.ValueRaw, KCache: wantK, VCache: wantV, SlotMapping: p.SlotMapping, SlotRemap: p.Remap,
		NumTokens: c.Tokens, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize, NumBlocks: c.NumBlocks,
		KTokenStride: a.KTokenStride, VTokenStride: a.VTokenStride,
		KHeadStride: a.KHeadStride, VHeadStride: a.VHeadStride,
		DType: ref.DType(c.DType), CacheDType: ref.DType(c.CacheDType), KScale: a.KScale, VScale: a.VScale,
		Layout: ref.Layout(c.Layout),
	})
	if i := FirstDiff(wantK, gotK); i >= 0 {
		return errorf("%v: key cache byte %d is %#x, want %#x", c, i, gotK[i], wantK[i])
	}
	if i := FirstDiff(wantV, gotV); i >= 0 {
		return errorf("%v: value cache byte %d is %#x, want %#x", c, i, gotV[i], wantV[i])
	}
	return p.gatherAndCheck(r, s, wantK, wantV)
}

// gatherAndCheck gathers every written slot back to token-major rows on the
// device and checks them against the reference gather of the expected caches
// and, for unconverted caches, against the input rows themselves (the gather
// inverts the write bit for bit).
func (p *AppendProblem) gatherAndCheck(r *pagedkv.Runtime, s *pagedkv.Stream, wantK, wantV []byte) error {
	c := p.Shape
	slots := make([]int64, c.Tokens)
	for t, slot := range p.SlotMapping {
		if slot >= 0 && p.Remap != nil {
			slot = p.Remap[slot]
		}
		slots[t] = slot
	}
	size := c.CacheDType.Size()
	rowBytes := c.KVHeads * c.HeadDim * size
	// Rows of skipped tokens keep their poison.
	poison := make([]byte, max(c.Tokens*rowBytes, 16))
	for i := range poison {
		poison[i] = 0xA5
	}
	a := pagedkv.GatherArgs{NumTokens: c.Tokens, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize,
		NumBlocks: c.NumBlocks, CacheDType: c.CacheDType, Layout: c.Layout, KCache: p.Args.KCache, VCache: p.Args.VCache}
	var set Setter
	set.To(&a.SlotMapping)(Upload(p.Arena, s, slots, 8))
	set.To(&a.KOut)(Upload(p.Arena, s, poison, 1))
	set.To(&a.VOut)(Upload(p.Arena, s, poison, 1))
	if set.Err != nil {
		return set.Err
	}
	if err := r.Gather(s, &a); err != nil {
		return err
	}
	if err := s.Fault(); err != nil {
		return err
	}
	gotK := make([]byte, len(poison))
	gotV := make([]byte, len(poison))
	if err := pagedkv.Download(s, gotK, a.KOut); err != nil {
		return err
	}
	if err := pagedkv.Download(s, gotV, a.VOut); err != nil {
		return err
	}
	refK := append([]byte(nil), poison...)
	refV := append([]byte(nil), poison...)
	ref.CacheGatherTokens(ref.CacheGather{KCache: wantK, VCache: wantV, SlotMapping: slots, KOut: refK, VOut: refV,
		NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize, NumBlocks: c.NumBlocks,
		CacheDType: ref.DType(c.CacheDType), Layout: ref.Layout(c.Layout)})
	if i := FirstDiff(refK, gotK); i >= 0 {
		return errorf("%v: gathered key byte %d is %#x, want %#x", c, i, gotK[i], refK[i])
	}
	if i := FirstDiff(refV, gotV); i >= 0 {
		return errorf("%v: gathered value byte %d is %#x, want %#x", c, i, gotV[i], refV[i])
	}
	if c.CacheDType != c.DType {
		return nil
	}
	// Round trip: every row whose slot no later token overwrote equals its input row.
	last := map[int64]int{}
	for t, slot := range slots {
		if slot >= 0 {
			last[slot] = t
		}
	}
	in := c.HeadDim * size
	for t, slot := range slots {
		if slot < 0 || last[slot] != t {
			continue
		}
		for h := range c.KVHeads {
			src := (t*p.Args.KTokenStride + h*p.Args.KHeadStride) * size
			dst := (t*c.KVHeads + h) * in
			if i := FirstDiff(p.KeyRaw[src:src+in], gotK[dst:dst+in]); i >= 0 {
				return errorf("%v: round trip of token %d head %d differs at byte %d", c, t, h, i)
			}
			src = (t*p.Args.VTokenStride + h*p.Args.VHeadStride) * size
			if i := FirstDiff(p.ValueRaw[src:src+in], gotV[dst:dst+in]); i >= 0 {
				return errorf("%v: value round trip of token %d head %d differs at byte %d", c, t, h, i)
			}
		}
	}
	return nil
}
