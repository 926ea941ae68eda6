package check

import (
	"encoding/binary"
	"errors"
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
	DType, CacheDType           pagedkv.DType
	Norm, NeoX, HalfRot, Varlen bool
	// Aligned makes every sequence start at a position that is a multiple
	// of 16 and hold a multiple of 16 tokens (at least MaxLen rounded up):
	// a prefill whose pages are whole runs of 16 rows.
	Aligned               bool
	PadToken              int   // extra QKV token stride, a multiple of 8
	QKVOffset, QOutOffset int64 // byte offsets of the QKV and QOut views (Buffer.Slice), multiples of 16
	TableOffset           int64 // where CosSin starts in its buffer, a multiple of 4 bytes
	Layout                pagedkv.CacheLayout
	Fault                 QKVFault
}

// QKVFault names a bad device-side value RunQKV plants in the last sequence.
type QKVFault int

const (
	QKVNoFault QKVFault = iota
	// QKVPositionFault puts every position of the last sequence past the
	// cos/sin table: none of its tokens may be written.
	QKVPositionFault
	// QKVBlockFault makes the block-table entry of the last sequence's first
	// page name a block outside the pool: the cache rows of that page's
	// tokens may not be written, their q_out must be.
	QKVBlockFault
)

func (c QKVShape) String() string {
	s := fmt.Sprintf("S%d_len%d_QH%d_KH%d_D%d_bs%d_%s_%s_norm%v_neox%v_half%v_varlen%v_tab%d", c.Seqs, c.MaxLen, c.QHeads, c.KVHeads,
		c.HeadDim, c.BlockSize, c.DType, c.CacheDType, c.Norm, c.NeoX, c.HalfRot, c.Varlen, c.TableOffset)
	if c.Layout != pagedkv.LayoutFlash {
		s += "_" + c.Layout.String()
	}
	if c.Aligned {
		s += "_aligned"
	}
	switch c.Fault {
	case QKVPositionFault:
		s += "_positionfault"
	case QKVBlockFault:
		s += "_blockfault"
	}
	return s
}

// RandomQKVShape draws a random shape, head dims that are powers of two and
// not (80, 96, 112, 120, 192) among them.
func RandomQKVShape(g *rand.Rand) QKVShape {
	c := QKVShape{
		Seqs: 1, MaxLen: 1 + g.IntN(200), KVHeads: 1 + g.IntN(4), HeadDim: []int{16, 32, 64, 128, 256, 80, 96, 112, 120, 192}[g.IntN(10)],
		BlockSize: 1 << g.IntN(7), DType: []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
		Norm: g.IntN(2) == 0, NeoX: g.IntN(2) == 0, HalfRot: g.IntN(2) == 0, Varlen: g.IntN(2) == 0,
		PadToken: 8 * g.IntN(2), QKVOffset: 16 * int64(g.IntN(3)), QOutOffset: 16 * int64(g.IntN(3)),
		TableOffset: 4 * int64(g.IntN(4)),
	}
	if c.Varlen {
		c.Seqs = 1 + g.IntN(5)
		if g.IntN(4) == 0 { // many short sequences: several steps of the kernel's search
			c.Seqs, c.MaxLen = 34+g.IntN(100), 1+g.IntN(8)
		}
	}
	c.QHeads = c.KVHeads * []int{1, 2, 4, 8}[g.IntN(4)]
	c.CacheDType = c.DType
	if g.IntN(3) == 0 {
		c.CacheDType = pagedkv.E4M3
	}
	// Every layout; the shuffle layout needs whole x-groups of rows per
	// block (x = 16 bytes of cache elements), else x-split; both need whole
	// x-groups of elements per head, else flash.
	x := 16 / c.CacheDType.Size()
	c.Layout = pagedkv.CacheLayout(g.IntN(4))
	if c.Layout == pagedkv.LayoutShuffle && c.BlockSize%x != 0 {
		c.Layout = pagedkv.LayoutXSplit
	}
	if c.Layout.Laid() && c.HeadDim%x != 0 {
		c.Layout = pagedkv.LayoutFlash
	}
	return c
}

// RunQKV builds a random problem, runs QKVNormRope on s and checks q_out and
// the K cache against the float64 norm + rotation, the V cache bit for bit,
// and that no other cache byte changed. With c.Fault it also checks the
// fault record, that the faulting tokens' q_out keeps its NaN poison
// (position fault) and that their cache rows are untouched.
func RunQKV(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c QKVShape) error {
	a := NewArena(r)
	defer a.Free()
	lens := make([]int, c.Seqs)
	cu := make([]int32, c.Seqs+1)
	posOff := make([]int32, c.Seqs)
	maxPosNeeded := 0
	for i := range lens {
		lens[i] = 1 + g.IntN(c.MaxLen)
		posOff[i] = int32(g.IntN(300))
		if c.Aligned {
			lens[i] = (lens[i] + 15) &^ 15
			posOff[i] &^= 15
		}
		cu[i+1] = cu[i] + int32(lens[i])
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
	last, badPage, badBlock := c.Seqs-1, -1, int32(0)
	switch c.Fault {
	case QKVPositionFault:
		posOff[last] = int32(maxPos + g.IntN(3))
	case QKVBlockFault:
		badPage = int(posOff[last]) / c.BlockSize
		badBlock = []int32{-1, int32(numBlocks), int32(numBlocks + 7)}[g.IntN(3)]
		tables[last*maxBlocks+badPage] = badBlock
	}
	hd := c.HeadDim
	width := (c.QHeads + 2*c.KVHeads) * hd
	stride := width + c.PadToken
	size := c.DType.Size()
	qkvRaw, qkvAll := RandomTensor(g, c.DType, tokens*stride, 1)
	rot := hd
	if c.HalfRot {
		rot = hd / 2
	}
	combined := make([]float32, maxPos*2*rot) // each row rot cosines, then rot sines
	for i := range combined {
		combined[i] = float32(2*g.Float64() - 1)
	}
	kvElems := c.KVHeads * hd
	cacheBytes := numBlocks * c.BlockSize * kvElems * c.CacheDType.Size()
	kc, vc := RandomCaches(g, cacheBytes)
	args := pagedkv.QKVNormRopeArgs{
		QKVTokenStride: stride,
		NumTokens:      tokens, NumSeqs: c.Seqs, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: hd,
		BlockSize: c.BlockSize, NumBlocks: numBlocks, MaxBlocksPerSeq: maxBlocks, MaxPos: maxPos, RotDim: rot, NeoX: c.NeoX,
		DType: c.DType, CacheDType: c.CacheDType, Layout: c.Layout,
	}
	if c.CacheDType == pagedkv.E4M3 {
		args.KScale, args.VScale = 0.05+g.Float32(), 0.05+g.Float32()
	}
	var qw, kw []float64
	var set Setter
	if c.Norm {
		args.Norm, args.Eps = pagedkv.NormQK, 1e-5
		// Weights near 1.
		_, q0 := RandomTensor(g, c.DType, hd, 0.3)
		_, k0 := RandomTensor(g, c.DType, hd, 0.3)
		qwRaw := ref.EncodeSlice(ref.DType(c.DType), shift(q0, 1))
		kwRaw := ref.EncodeSlice(ref.DType(c.DType), shift(k0, 1))
		qw, kw = ref.DecodeSlice(ref.DType(c.DType), qwRaw), ref.DecodeSlice(ref.DType(c.DType), kwRaw)
		set.To(&args.QNormWeight)(Upload(a, s, qwRaw, 1))
		set.To(&args.KNormWeight)(Upload(a, s, kwRaw, 1))
	}
	// QKV and QOut are views (Buffer.Slice) c.QKVOffset and c.QOutOffset
	// bytes into larger buffers.
	view := func(b pagedkv.Buffer, off int64, err error) (pagedkv.Buffer, error) {
		if err != nil {
			return b, err
		}
		return b.Slice(off, b.Bytes-off)
	}
	withOffset := func(raw []byte, off int64) []byte { return append(make([]byte, off), raw...) }
	qkvBuf, err := Upload(a, s, withOffset(qkvRaw, c.QKVOffset), 1)
	set.To(&args.QKV)(view(qkvBuf, c.QKVOffset, err))
	qOutBuf, err := a.Alloc(c.QOutOffset + int64(tokens*c.QHeads*hd*size))
	set.To(&args.QOut)(view(qOutBuf, c.QOutOffset, err))
	set.To(&args.KCache)(Upload(a, s, kc, 1))
	set.To(&args.VCache)(Upload(a, s, vc, 1))
	set.To(&args.BlockTables)(Upload(a, s, tables, 4))
	if c.Varlen {
		set.To(&args.CuSeqlensQ)(Upload(a, s, cu, 4))
	}
	set.To(&args.PosOffsets)(Upload(a, s, posOff, 4))
	tableBuf, err := Upload(a, s, append(make([]float32, c.TableOffset/4), combined...), 4)
	set.To(&args.CosSin)(view(tableBuf, c.TableOffset, err))
	if set.Err != nil {
		return set.Err
	}
	if err := s.Fill32(args.QOut, NaNPattern(c.DType)); err != nil {
		return err
	}
	err = r.QKVNormRope(s, &args)
	if err == nil { // with CheckBounds the launch itself returns the fault
		err = s.Fault()
	}
	if err := checkQKVFault(c, err, cu, posOff, maxPos, badPage, badBlock); err != nil {
		return err
	}
	qOutAll := make([]byte, qOutBuf.Bytes)
	gotK, gotV := make([]byte, cacheBytes), make([]byte, cacheBytes)
	for _, d := range []struct {
		dst []byte
		src pagedkv.Buffer
	}{{qOutAll, qOutBuf}, {gotK, args.KCache}, {gotV, args.VCache}} {
		if err := pagedkv.Download(s, d.dst, d.src); err != nil {
			return err
		}
	}

	// Reference: split, norm, rotate, for the tokens the kernel must write:
	// qTok get q_out, kvTok their cache rows (slots[t] < 0 for the others).
	var qTok, kvTok []int
	positions := make([]int64, tokens)
	slots := make([]int64, tokens)
	for sq := range c.Seqs {
		for t := int(cu[sq]); t < int(cu[sq+1]); t++ {
			p := int64(posOff[sq]) + int64(t-int(cu[sq]))
			positions[t], slots[t] = p, -1
			if p >= int64(maxPos) {
				continue
			}
			qTok = append(qTok, t)
			page := int(p) / c.BlockSize
			if sq == last && page == badPage {
				continue
			}
			kvTok = append(kvTok, t)
			slots[t] = int64(tables[sq*maxBlocks+page])*int64(c.BlockSize) + p%int64(c.BlockSize)
		}
	}
	// rows gathers the heads [first, first+n) of tokens toks from the QKV
	// activation, with their positions.
	rows := func(toks []int, first, n int) ([]float64, []int64) {
		x := make([]float64, 0, len(toks)*n*hd)
		pos := make([]int64, len(toks))
		for i, t := range toks {
			x = append(x, qkvAll[t*stride+first*hd:t*stride+(first+n)*hd]...)
			pos[i] = positions[t]
		}
		return x, pos
	}
	q, qPos := rows(qTok, 0, c.QHeads)
	k, kPos := rows(kvTok, c.QHeads, c.KVHeads)
	vRaw := make([]byte, tokens*kvElems*size)
	for t := range tokens {
		vo := (t*stride + c.QHeads*hd + kvElems) * size
		copy(vRaw[t*kvElems*size:], qkvRaw[vo:vo+kvElems*size])
	}
	if c.Norm {
		q = ref.RMSNormHeads(q, c.QHeads, hd, qw, 1e-5)
		k = ref.RMSNormHeads(k, c.KVHeads, hd, kw, 1e-5)
	}
	wantQ := ref.RopeRotate(q, c.QHeads, hd, qPos, combined, rot, c.NeoX)
	wantK := ref.RopeRotate(k, c.KVHeads, hd, kPos, combined, rot, c.NeoX)
	qElems := c.QHeads * hd
	allQ := ref.DecodeSlice(ref.DType(c.DType), qOutAll[c.QOutOffset:])
	gotQ := make([]float64, 0, len(wantQ))
	for _, t := range qTok {
		gotQ = append(gotQ, allQ[t*qElems:(t+1)*qElems]...)
	}
	if e := ref.RelL2(gotQ, wantQ); len(qTok) > 0 && !(e <= Tolerance(c.DType)) {
		return errorf("%v: q_out relative L2 error %.3g", c, e)
	}
	// Tokens without q_out keep the poison.
	poison := NaNPattern(c.DType)
	for t := range tokens {
		if positions[t] < int64(maxPos) {
			continue
		}
		row := qOutAll[c.QOutOffset+int64(t*qElems*size) : c.QOutOffset+int64((t+1)*qElems*size)]
		for i := 0; i < len(row); i += 4 {
			if binary.LittleEndian.Uint32(row[i:]) != poison {
				return errorf("%v: q_out of token %d (position outside the table) was written", c, t)
			}
		}
	}
	// K: the written rows against the reference, every other byte unchanged.
	cs := c.CacheDType.Size()
	gotKVals := make([]float64, 0, len(wantK))
	for _, t := range kvTok {
		slot := slots[t]
		for e := range kvElems {
			at := ref.CacheIndex(ref.Layout(c.Layout), false, int(slot), e/hd, e%hd, c.KVHeads, hd, c.BlockSize, 16/cs) * cs
			v := ref.DecodeAt(ref.DType(c.CacheDType), gotK[at:at+cs], 0)
			if c.CacheDType == pagedkv.E4M3 {
				v *= float64(args.KScale)
			}
			gotKVals = append(gotKVals, v)
			copy(kc[at:at+cs], gotK[at:at+cs]) // checked here; must match below
		}
	}
	tol := Tolerance(c.DType)
	if c.CacheDType == pagedkv.E4M3 {
		tol = 0.07 // e4m3 keeps 3 mantissa bits
	}
	if e := ref.RelL2(gotKVals, wantK); len(kvTok) > 0 && !(e <= tol) {
		return errorf("%v: K cache relative L2 error %.3g", c, e)
	}
	if i := FirstDiff(kc, gotK); i >= 0 {
		return errorf("%v: key cache byte %d outside the written rows changed", c, i)
	}
	ref.CacheAppendFlash(ref.CacheAppend{Key: vRaw, Value: vRaw, KCache: make([]byte, cacheBytes), VCache: vc, SlotMapping: slots,
		NumTokens: tokens, NumKVHeads: c.KVHeads, HeadDim: hd, BlockSize: c.BlockSize, NumBlocks: numBlocks,
		KTokenStride: kvElems, VTokenStride: kvElems, KHeadStride: hd, VHeadStride: hd,
		DType: ref.DType(c.DType), CacheDType: ref.DType(c.CacheDType), KScale: args.VScale, VScale: args.VScale,
		Layout: ref.Layout(c.Layout)})
	if i := FirstDiff(vc, gotV); i >= 0 {
		return errorf("%v: value cache byte %d is %#x, want %#x", c, i, gotV[i], vc[i])
	}
	return nil
}

// checkQKVFault checks the stream's fault record after a RunQKV launch
// against the fault c plants (see QKVFault).
func checkQKVFault(c QKVShape, err error, cu []int32, posOff []int32, maxPos, badPage int, badBlock int32) error {
	if c.Fault == QKVNoFault {
		return err
	}
	var fe *pagedkv.FaultError
	if !errors.As(err, &fe) {
		return errorf("%v: want a FaultError, got %v", c, err)
	}
	last := c.Seqs - 1
	switch c.Fault {
	case QKVPositionFault:
		// Any token of the last sequence may be the one recorded.
		first, end := int64(cu[last]), int64(cu[last+1])
		if fe.Code != pagedkv.FaultPositionBeyond || fe.A < first || fe.A >= end || fe.B != int64(posOff[last])+fe.A-first || fe.C != int64(maxPos) {
			return errorf("%v: fault %+v, want code 5 for a token in [%d, %d) at position %d + (token − %d), table of %d rows",
				c, *fe, first, end, posOff[last], first, maxPos)
		}
	case QKVBlockFault:
		if want := (pagedkv.FaultError{Code: pagedkv.FaultBlockBeyondPool, A: int64(last), B: int64(badPage), C: int64(badBlock)}); *fe != want {
			return errorf("%v: fault %+v, want %+v", c, *fe, want)
		}
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
