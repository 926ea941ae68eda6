package check

import (
	"fmt"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// RopeShape is the shape of one fused RoPE + cache write problem.
type RopeShape struct {
	Tokens, KVOnly                int // rotated tokens; trailing KV-only tokens
	QHeads, KVHeads, HeadDim      int
	BlockSize, NumBlocks          int
	DType, CacheDType             pagedkv.DType
	Layout                        pagedkv.CacheLayout
	NeoX, HalfRot, Offsets, Remap bool
	Zeros                         bool
	PadToken                      int // extra input token stride, a multiple of 8
	// PageRuns maps the tokens like a batch of prefills (PageRunSlots, a
	// remap moving whole pages), as AppendShape.PageRuns; otherwise each
	// token gets a random slot. HostSlots passes the host's copy of the
	// slots (RopeCacheArgs.HostSlotMapping).
	PageRuns, HostSlots bool
}

func (c RopeShape) String() string {
	slots := "random"
	if c.PageRuns {
		slots = "runs"
	}
	if c.HostSlots {
		slots += "+host"
	}
	return fmt.Sprintf("T%d+%d_QH%d_KH%d_D%d_bs%d_%s_%s_%s_neox%v_half%v_off%v_remap%v_%s", c.Tokens, c.KVOnly, c.QHeads,
		c.KVHeads, c.HeadDim, c.BlockSize, c.DType, c.CacheDType, c.Layout, c.NeoX, c.HalfRot, c.Offsets, c.Remap, slots)
}

// RandomRopeShape draws a random shape: GQA 1/4/8, head dims that are powers
// of two and not (80, 96, 112, 120, 192), both styles and table widths,
// offsets, KV-only tokens, remap, fp8 and every layout it allows.
func RandomRopeShape(g *rand.Rand) RopeShape {
	c := RopeShape{
		Tokens:    1 + g.IntN(300),
		KVHeads:   1 + g.IntN(4),
		HeadDim:   []int{64, 128, 256, 80, 96, 112, 120, 192}[g.IntN(8)],
		BlockSize: 1 << (3 + g.IntN(6)),
		DType:     []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
		NeoX:      g.IntN(2) == 0,
		HalfRot:   g.IntN(2) == 0,
		Offsets:   g.IntN(2) == 0,
		Remap:     g.IntN(3) == 0,
		Zeros:     g.IntN(2) == 0,
		PadToken:  8 * g.IntN(2),
		PageRuns:  g.IntN(2) == 0,
		HostSlots: g.IntN(3) == 0,
	}
	if g.IntN(2) == 0 {
		c.KVOnly = g.IntN(20)
	}
	c.QHeads = c.KVHeads * []int{1, 4, 8}[g.IntN(3)]
	c.CacheDType = c.DType
	if g.IntN(3) == 0 {
		c.CacheDType = pagedkv.E4M3
	}
	x := 16 / c.CacheDType.Size()
	if l := pagedkv.CacheLayout(g.IntN(4)); !l.Laid() || c.BlockSize%x == 0 && c.HeadDim%x == 0 {
		c.Layout = l
	}
	c.NumBlocks = (c.Tokens+c.KVOnly+c.BlockSize-1)/c.BlockSize + 1 + g.IntN(3)
	return c
}

// RopeProblem is a RoPE + cache write problem on the device.
type RopeProblem struct {
	Shape RopeShape
	Args  pagedkv.RopeCacheArgs
	Arena *Arena

	Q, K, V            []float64 // decoded inputs, contiguous
	KRaw, VRaw         []byte    // contiguous raw K and V, [Tokens+KVOnly, KVHeads, HeadDim]
	KCache, VCache     []byte    // initial cache bytes
	Positions          []int64   // positions with offsets applied
	CosSin             []float32
	SlotMapping, Remap []int64
	rot, maxPos        int
	qElems, kvElems    int
}

// NewRopeProblem draws random inputs, a random cos/sin table and slots, and
// uploads them on s.
func NewRopeProblem(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c RopeShape) (*RopeProblem, error) {
	p := &RopeProblem{Shape: c, Arena: NewArena(r), maxPos: 64 + g.IntN(4000)}
	p.rot = c.HeadDim
	if c.HalfRot {
		p.rot = c.HeadDim / 2
	}
	kvTokens := c.Tokens + c.KVOnly
	row := c.HeadDim
	qStride := c.QHeads*row + c.PadToken
	kvStride := c.KVHeads*row + c.PadToken
	qRaw, qAll := RandomTensor(g, c.DType, c.Tokens*qStride, 1)
	kRawStrided, kAll := RandomTensor(g, c.DType, kvTokens*kvStride, 1)
	vRawStrided, _ := RandomTensor(g, c.DType, kvTokens*kvStride, 1)
	size := c.DType.Size()
	p.qElems, p.kvElems = c.QHeads*row, c.KVHeads*row
	p.Q = make([]float64, c.Tokens*p.qElems)
	for t := range c.Tokens {
		copy(p.Q[t*p.qElems:(t+1)*p.qElems], qAll[t*qStride:])
	}
	p.K = make([]float64, kvTokens*p.kvElems)
	p.KRaw = make([]byte, kvTokens*p.kvElems*size)
	p.VRaw = make([]byte, kvTokens*p.kvElems*size)
	for t := range kvTokens {
		copy(p.K[t*p.kvElems:(t+1)*p.kvElems], kAll[t*kvStride:])
		copy(p.KRaw[t*p.kvElems*size:(t+1)*p.kvElems*size], kRawStrided[t*kvStride*size:])
		copy(p.VRaw[t*p.kvElems*size:(t+1)*p.kvElems*size], vRawStrided[t*kvStride*size:])
	}
	p.CosSin = make([]float32, p.maxPos*2*p.rot)
	for i := range p.CosSin {
		p.CosSin[i] = float32(2*g.Float64() - 1)
	}
	positions := make([]int64, c.Tokens)
	offsets := make([]int64, c.Tokens)
	p.Positions = make([]int64, c.Tokens)
	for t := range positions {
		positions[t] = int64(g.IntN(p.maxPos - 16))
		if c.Offsets {
			offsets[t] = int64(g.IntN(16))
		}
		p.Positions[t] = positions[t] + offsets[t]
	}
	numSlots := c.NumBlocks * c.BlockSize
	p.KCache, p.VCache = RandomCaches(g, numSlots*p.kvElems*c.CacheDType.Size())
	switch {
	case c.PageRuns:
		p.SlotMapping = PageRunSlots(g, kvTokens, c.NumBlocks, c.BlockSize)
		if c.Remap {
			p.Remap = PageRemap(g, c.NumBlocks, c.BlockSize)
		}
	default:
		p.SlotMapping = RandomSlots(g, kvTokens, g.Perm(numSlots))
		if c.Remap {
			p.Remap = RandomRemap(g, numSlots)
		}
	}
	a := &p.Args
	*a = pagedkv.RopeCacheArgs{
		NumTokens: c.Tokens, NumKVTokens: kvTokens, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim,
		BlockSize: c.BlockSize, NumBlocks: c.NumBlocks, MaxPos: p.maxPos, RotDim: p.rot, NeoX: c.NeoX,
		QTokenStride: qStride, KTokenStride: kvStride, VTokenStride: kvStride,
		DType: c.DType, CacheDType: c.CacheDType, Layout: c.Layout,
	}
	if c.CacheDType == pagedkv.E4M3 {
		a.KScale, a.VScale = 0.05+g.Float32(), 0.05+g.Float32()
	}
	if c.HostSlots {
		a.HostSlotMapping = make([]int32, kvTokens)
		for i, v := range p.SlotMapping {
			a.HostSlotMapping[i] = int32(v)
		}
	}
	var set Setter
	set.To(&a.Q)(Upload(p.Arena, s, qRaw, 1))
	set.To(&a.K)(Upload(p.Arena, s, kRawStrided, 1))
	set.To(&a.V)(Upload(p.Arena, s, vRawStrided, 1))
	set.To(&a.QOut)(p.Arena.Alloc(int64(c.Tokens * p.qElems * size)))
	set.To(&a.KOut)(p.Arena.Alloc(int64(c.Tokens * p.kvElems * size)))
	if c.Zeros {
		set.To(&a.ZerosOut)(p.Arena.Alloc(int64(c.Tokens * p.qElems * size)))
	}
	set.To(&a.KCache)(Upload(p.Arena, s, p.KCache, 1))
	set.To(&a.VCache)(Upload(p.Arena, s, p.VCache, 1))
	set.To(&a.Positions)(Upload(p.Arena, s, positions, 8))
	if c.Offsets {
		set.To(&a.PositionDeltas)(Upload(p.Arena, s, offsets, 8))
	}
	set.To(&a.CosSin)(Upload(p.Arena, s, p.CosSin, 4))
	set.To(&a.SlotMapping)(Upload(p.Arena, s, p.SlotMapping, 8))
	if p.Remap != nil {
		set.To(&a.SlotRemap)(Upload(p.Arena, s, p.Remap, 8))
	}
	if err := set.FreeOnError(p.Arena); err != nil {
		return nil, err
	}
	return p, nil
}

// RunAndCheck poisons the outputs, runs the op on s and checks q_out and
// k_out against the float64 rotation, zeros_out for zeros, and both caches
// bit for bit against the reference append of what the kernel must write
// (k_out for rotated tokens, k as given for KV-only ones, v as given).
func (p *RopeProblem) RunAndCheck(r *pagedkv.Runtime, s *pagedkv.Stream) error {
	c, a := p.Shape, &p.Args
	for _, b := range []pagedkv.Buffer{a.QOut, a.KOut, a.ZerosOut} {
		if err := s.Fill32(b, NaNPattern(c.DType)); err != nil {
			return err
		}
	}
	if err := r.RopeCache(s, a); err != nil {
		return err
	}
	if err := s.Fault(); err != nil {
		return err
	}
	size := c.DType.Size()
	qOut := make([]byte, c.Tokens*p.qElems*size)
	kOut := make([]byte, c.Tokens*p.kvElems*size)
	for _, d := range []struct {
		dst []byte
		src pagedkv.Buffer
	}{{qOut, a.QOut}, {kOut, a.KOut}} {
		if err := pagedkv.Download(s, d.dst, d.src); err != nil {
			return err
		}
	}
	wantQ := ref.RopeRotate(p.Q, c.QHeads, c.HeadDim, p.Positions, p.CosSin, p.rot, c.NeoX)
	wantK := ref.RopeRotate(p.K[:c.Tokens*p.kvElems], c.KVHeads, c.HeadDim, p.Positions, p.CosSin, p.rot, c.NeoX)
	if e := ref.RelL2(ref.DecodeSlice(ref.DType(c.DType), qOut), wantQ); !(e <= Tolerance(c.DType)) {
		return errorf("%v: q_out relative L2 error %.3g", c, e)
	}
	if e := ref.RelL2(ref.DecodeSlice(ref.DType(c.DType), kOut), wantK); !(e <= Tolerance(c.DType)) {
		return errorf("%v: k_out relative L2 error %.3g", c, e)
	}
	if c.Zeros {
		zeros := make([]byte, len(qOut))
		if err := pagedkv.Download(s, zeros, a.ZerosOut); err != nil {
			return err
		}
		for i, b := range zeros {
			if b != 0 {
				return errorf("%v: zeros_out byte %d is %#x", c, i, b)
			}
		}
	}
	return p.checkCaches(s, kOut, p.SlotMapping)
}

// CheckCachesSkipping checks both caches after a run in which token skip's
// position was outside the cos/sin table: every other token's rows are
// written (k as the run's KOut holds it), none of skip's.
func (p *RopeProblem) CheckCachesSkipping(s *pagedkv.Stream, skip int) error {
	kOut := make([]byte, p.Shape.Tokens*p.kvElems*p.Shape.DType.Size())
	if err := pagedkv.Download(s, kOut, p.Args.KOut); err != nil {
		return err
	}
	slots := append([]int64(nil), p.SlotMapping...)
	slots[skip] = -1
	return p.checkCaches(s, kOut, slots)
}

// checkCaches compares both caches bit for bit with the reference append
// of kOut (the rotated k of the rotated tokens) and the KV-only tokens' k,
// and of v, at slots.
func (p *RopeProblem) checkCaches(s *pagedkv.Stream, kOut []byte, slots []int64) error {
	c, a := p.Shape, &p.Args
	gotK := make([]byte, len(p.KCache))
	gotV := make([]byte, len(p.VCache))
	if err := pagedkv.Download(s, gotK, a.KCache); err != nil {
		return err
	}
	if err := pagedkv.Download(s, gotV, a.VCache); err != nil {
		return err
	}
	keyFinal := append(append([]byte(nil), kOut...), p.KRaw[len(kOut):]...)
	expK := append([]byte(nil), p.KCache...)
	expV := append([]byte(nil), p.VCache...)
	ref.CacheAppendFlash(ref.CacheAppend{
		Key: keyFinal, Value: p.VRaw, KCache: expK, VCache: expV, SlotMapping: slots, SlotRemap: p.Remap,
		NumTokens: c.Tokens + c.KVOnly, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize, NumBlocks: c.NumBlocks,
		KTokenStride: p.kvElems, VTokenStride: p.kvElems, KHeadStride: c.HeadDim, VHeadStride: c.HeadDim,
		DType: ref.DType(c.DType), CacheDType: ref.DType(c.CacheDType), KScale: a.KScale, VScale: a.VScale, Layout: ref.Layout(c.Layout),
	})
	if i := FirstDiff(expK, gotK); i >= 0 {
		return errorf("%v: key cache byte %d is %#x, want %#x", c, i, gotK[i], expK[i])
	}
	if i := FirstDiff(expV, gotV); i >= 0 {
		return errorf("%v: value cache byte %d is %#x, want %#x", c, i, gotV[i], expV[i])
	}
	return nil
}
