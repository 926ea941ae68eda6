package check

import (
	"fmt"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// QKVShape is the shape of one split-QKV + norm + RoPE + cache problem.
type QKVShape struct {
	Seqs, MaxLen                int // sequences of 1..MaxLen tokens
	QHeads, KVHeads, HeadDim    int
	BlockSize                   int
	In, Cache                   pagedkv.DType
	Norm, NeoX, HalfRot, Varlen bool
	PadToken                    int   // extra QKV token stride, a multiple of 8
	QKVOffset, QOutOffset       int64 // byte offsets, multiples of 16
}

func (c QKVShape) String() string {
	return fmt.Sprintf("S%d_len%d_QH%d_KH%d_D%d_bs%d_%s_%s_norm%v_neox%v_half%v_varlen%v", c.Seqs, c.MaxLen, c.QHeads, c.KVHeads,
		c.HeadDim, c.BlockSize, c.In, c.Cache, c.Norm, c.NeoX, c.HalfRot, c.Varlen)
}

// RandomQKVShape draws a random shape.
func RandomQKVShape(g *rand.Rand) QKVShape {
	c := QKVShape{
		Seqs: 1, MaxLen: 1 + g.IntN(200), KVHeads: 1 + g.IntN(4), HeadDim: []int{64, 128, 256}[g.IntN(3)],
		BlockSize: 1 << g.IntN(7), In: []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
		Norm: g.IntN(2) == 0, NeoX: g.IntN(2) == 0, HalfRot: g.IntN(2) == 0, Varlen: g.IntN(2) == 0,
		PadToken: 8 * g.IntN(2), QKVOffset: 16 * int64(g.IntN(3)), QOutOffset: 16 * int64(g.IntN(3)),
	}
	if c.Varlen {
		c.Seqs = 1 + g.IntN(5)
	}
	c.QHeads = c.KVHeads * []int{1, 2, 4, 8}[g.IntN(4)]
	c.Cache = c.In
	if g.IntN(3) == 0 {
		c.Cache = pagedkv.E4M3
	}
	return c
}

// RunQKV builds a random problem, runs QKVNormRope on s and checks q_out and
// the K cache against the float64 norm + rotation, the V cache bit for bit,
// and that no other cache byte changed.
func RunQKV(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c QKVShape) error {
	a := NewArena(r)
	defer a.Free()
	lens := make([]int, c.Seqs)
	cu := make([]int32, c.Seqs+1)
	posOff := make([]int64, c.Seqs)
	maxPosNeeded := 0
	for i := range lens {
		lens[i] = 1 + g.IntN(c.MaxLen)
		cu[i+1] = cu[i] + int32(lens[i])
		posOff[i] = int64(g.IntN(300))
		maxPosNeeded = max(maxPosNeeded, int(posOff[i])+lens[i])
	}
	tokens := int(cu[c.Seqs])
	maxPos := maxPosNeeded + g.IntN(50)
	maxBlocks := (maxPosNeeded+c.BlockSize-1)/c.BlockSize + g.IntN(2)
	numBlocks := c.Seqs*maxBlocks + 2
	tables := make([]int32, c.Seqs*maxBlocks)
	for i, b := range g.Perm(numBlocks)[:len(tables)] {
		tables[i] = int32(b)
	}
	hd := c.HeadDim
	width := (c.QHeads + 2*c.KVHeads) * hd
	stride := width + c.PadToken
	size := c.In.Size()
	qkvRaw, qkvAll := RandomTensor(g, c.In, tokens*stride, 1)
	rot := hd
	if c.HalfRot {
		rot = hd / 2
	}
	cosT := make([]float32, maxPos*rot)
	sinT := make([]float32, maxPos*rot)
	combined := make([]float32, maxPos*2*rot)
	for p := range maxPos {
		for i := range rot {
			cosT[p*rot+i], sinT[p*rot+i] = float32(2*g.Float64()-1), float32(2*g.Float64()-1)
			combined[p*2*rot+i], combined[p*2*rot+rot+i] = cosT[p*rot+i], sinT[p*rot+i]
		}
	}
	kvElems := c.KVHeads * hd
	cacheBytes := numBlocks * c.BlockSize * kvElems * c.Cache.Size()
	kc, vc := RandomCaches(g, cacheBytes)
	args := pagedkv.QKVNormRopeArgs{
		QKVOffset: c.QKVOffset, QKVTokenStride: stride, QOutOffset: c.QOutOffset,
		NumTokens: tokens, NumSeqs: c.Seqs, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: hd,
		BlockSize: c.BlockSize, NumBlocks: numBlocks, MaxBlocksPerSeq: maxBlocks, MaxPos: maxPos, RotDim: rot, NeoX: c.NeoX,
		DType: c.In, CacheDType: c.Cache,
	}
	if c.Cache == pagedkv.E4M3 {
		args.KScale, args.VScale = 0.05+g.Float32(), 0.05+g.Float32()
	}
	var qw, kw []float64
	var set Setter
	if c.Norm {
		args.Norm, args.Eps = pagedkv.NormQK, 1e-5
		// Weights near 1.
		_, q0 := RandomTensor(g, c.In, hd, 0.3)
		_, k0 := RandomTensor(g, c.In, hd, 0.3)
		qwRaw := ref.EncodeSlice(ref.DType(c.In), shift(q0, 1))
		kwRaw := ref.EncodeSlice(ref.DType(c.In), shift(k0, 1))
		qw, kw = ref.DecodeSlice(ref.DType(c.In), qwRaw), ref.DecodeSlice(ref.DType(c.In), kwRaw)
		set.To(&args.QNormWeight)(Upload(a, s, qwRaw, 1))
		set.To(&args.KNormWeight)(Upload(a, s, kwRaw, 1))
	}
	withOffset := func(raw []byte, off int64) []byte { return append(make([]byte, off), raw...) }
	set.To(&args.QKV)(Upload(a, s, withOffset(qkvRaw, c.QKVOffset), 1))
	set.To(&args.QOut)(a.Alloc(c.QOutOffset + int64(tokens*c.QHeads*hd*size)))
	set.To(&args.KeyCache)(Upload(a, s, kc, 1))
	set.To(&args.ValueCache)(Upload(a, s, vc, 1))
	set.To(&args.BlockTables)(Upload(a, s, tables, 4))
	if c.Varlen {
		set.To(&args.CuSeqlensQ)(Upload(a, s, cu, 4))
	}
	set.To(&args.PosOffsets)(Upload(a, s, posOff, 8))
	set.To(&args.Cos)(Upload(a, s, cosT, 4))
	set.To(&args.Sin)(Upload(a, s, sinT, 4))
	if set.Err != nil {
		return set.Err
	}
	if err := s.Fill32(args.QOut, NaNPattern(c.In)); err != nil {
		return err
	}
	if err := r.QKVNormRope(s, &args); err != nil {
		return err
	}
	if err := s.Fault(); err != nil {
		return err
	}
	qOutAll := make([]byte, args.QOut.Bytes)
	gotK, gotV := make([]byte, cacheBytes), make([]byte, cacheBytes)
	for _, d := range []struct {
		dst []byte
		src pagedkv.Buffer
	}{{qOutAll, args.QOut}, {gotK, args.KeyCache}, {gotV, args.ValueCache}} {
		if err := pagedkv.Download(s, d.dst, d.src); err != nil {
			return err
		}
	}

	// Reference: split, norm, rotate.
	positions := make([]int64, tokens)
	slots := make([]int64, tokens)
	q := make([]float64, tokens*c.QHeads*hd)
	k := make([]float64, tokens*kvElems)
	vRaw := make([]byte, tokens*kvElems*size)
	for sq := range c.Seqs {
		for t := int(cu[sq]); t < int(cu[sq+1]); t++ {
			p := posOff[sq] + int64(t-int(cu[sq]))
			positions[t] = p
			slots[t] = int64(tables[sq*maxBlocks+int(p)/c.BlockSize])*int64(c.BlockSize) + p%int64(c.BlockSize)
		}
	}
	for t := range tokens {
		copy(q[t*c.QHeads*hd:], qkvAll[t*stride:t*stride+c.QHeads*hd])
		copy(k[t*kvElems:], qkvAll[t*stride+c.QHeads*hd:t*stride+c.QHeads*hd+kvElems])
		vo := (t*stride + c.QHeads*hd + kvElems) * size
		copy(vRaw[t*kvElems*size:], qkvRaw[vo:vo+kvElems*size])
	}
	if c.Norm {
		q = ref.RMSNormHeads(q, c.QHeads, hd, qw, 1e-5)
		k = ref.RMSNormHeads(k, c.KVHeads, hd, kw, 1e-5)
	}
	wantQ := ref.RopeRotate(q, c.QHeads, hd, positions, combined, rot, c.NeoX)
	wantK := ref.RopeRotate(k, c.KVHeads, hd, positions, combined, rot, c.NeoX)
	gotQ := ref.DecodeSlice(ref.DType(c.In), qOutAll[c.QOutOffset:])
	if e := ref.RelL2(gotQ, wantQ); !(e <= Tolerance(c.In)) {
		return errorf("%v: q_out relative L2 error %.3g", c, e)
	}
	// K: the written rows against the reference, every other byte unchanged.
	cs := c.Cache.Size()
	gotKVals := make([]float64, 0, len(wantK))
	for _, slot := range slots {
		for e := range kvElems {
			at := (int(slot)*kvElems + e) * cs
			v := ref.DecodeAt(ref.DType(c.Cache), gotK[at:at+cs], 0)
			if c.Cache == pagedkv.E4M3 {
				v *= float64(args.KScale)
			}
			gotKVals = append(gotKVals, v)
			copy(kc[at:at+cs], gotK[at:at+cs]) // checked here; must match below
		}
	}
	tol := Tolerance(c.In)
	if c.Cache == pagedkv.E4M3 {
		tol = 0.07 // e4m3 keeps 3 mantissa bits
	}
	if e := ref.RelL2(gotKVals, wantK); !(e <= tol) {
		return errorf("%v: K cache relative L2 error %.3g", c, e)
	}
	if i := FirstDiff(kc, gotK); i >= 0 {
		return errorf("%v: key cache byte %d outside the written rows changed", c, i)
	}
	ref.CacheAppendFlash(ref.CacheAppend{Key: vRaw, Value: vRaw, KeyCache: make([]byte, cacheBytes), ValueCache: vc, SlotMapping: slots,
		NumTokens: tokens, NumKVHeads: c.KVHeads, HeadDim: hd, BlockSize: c.BlockSize, NumBlocks: numBlocks,
		KeyTokenStride: kvElems, ValueTokenStride: kvElems, KeyHeadStride: hd, ValueHeadStride: hd,
		In: ref.DType(c.In), Cache: ref.DType(c.Cache), KScale: args.VScale, VScale: args.VScale})
	if i := FirstDiff(vc, gotV); i >= 0 {
		return errorf("%v: value cache byte %d is %#x, want %#x", c, i, gotV[i], vc[i])
	}
	return nil
}

// shift returns x + d elementwise, as float32 for encoding.
func shift(x []float64, d float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v + d)
	}
	return out
}
