package check

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// MLAShape is the shape of one MLA rope+quant and concat problem.
type MLAShape struct {
	Tokens, QHeads, KVHeads, Lora, Rope int
	DType                               pagedkv.DType
	NeoX, HalfRot                       bool
	Pad                                 int // extra token stride of every input, a multiple of 8
}

func (c MLAShape) String() string {
	return fmt.Sprintf("T%d_H%d_KH%d_lora%d_rope%d_%s_neox%v_half%v_pad%d", c.Tokens, c.QHeads, c.KVHeads, c.Lora, c.Rope, c.DType, c.NeoX, c.HalfRot, c.Pad)
}

// RandomMLAShape draws a random MLA shape.
func RandomMLAShape(g *rand.Rand) MLAShape {
	return MLAShape{
		Tokens: 1 + g.IntN(200), QHeads: 1 + g.IntN(16), KVHeads: 1 + g.IntN(2),
		Lora: []int{64, 128, 512}[g.IntN(3)], Rope: []int{32, 64}[g.IntN(2)],
		DType: []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[g.IntN(2)],
		NeoX:  g.IntN(2) == 0, HalfRot: g.IntN(2) == 0, Pad: 8 * g.IntN(2),
	}
}

// mlaInput is one strided input tensor: raw bytes and contiguous values.
type mlaInput struct {
	raw         []byte
	vals        []float64 // [Tokens, heads, dim], contiguous
	heads, dim  int
	tokenStride int
}

func newMLAInput(g *rand.Rand, d pagedkv.DType, tokens, heads, dim, pad int) mlaInput {
	in := mlaInput{heads: heads, dim: dim, tokenStride: heads*dim + pad}
	var all []float64
	in.raw, all = RandomTensor(g, d, tokens*in.tokenStride, 1)
	in.vals = make([]float64, tokens*heads*dim)
	for t := range tokens {
		copy(in.vals[t*heads*dim:(t+1)*heads*dim], all[t*in.tokenStride:])
	}
	return in
}

// RunMLA builds a random MLA problem, runs MLARopeQuant and MLAConcatQ on s
// and checks them: nope parts bit for bit against the e4m3 reference, rope
// parts within e4m3 rounding of the float64 rotation, the concat bit for bit.
func RunMLA(r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c MLAShape) error {
	a := NewArena(r)
	defer a.Free()
	qn := newMLAInput(g, c.DType, c.Tokens, c.QHeads, c.Lora, c.Pad)
	qr := newMLAInput(g, c.DType, c.Tokens, c.QHeads, c.Rope, c.Pad)
	kn := newMLAInput(g, c.DType, c.Tokens, c.KVHeads, c.Lora, c.Pad)
	kr := newMLAInput(g, c.DType, c.Tokens, c.KVHeads, c.Rope, c.Pad)
	rot := c.Rope
	if c.HalfRot {
		rot /= 2
	}
	maxPos := 100 + g.IntN(1000)
	cosSin := make([]float32, maxPos*2*rot)
	for i := range cosSin {
		cosSin[i] = float32(2*g.Float64() - 1)
	}
	positions := make([]int64, c.Tokens)
	for i := range positions {
		positions[i] = int64(g.IntN(maxPos))
	}
	qScale, kScale := 0.05+g.Float32(), 0.05+g.Float32()
	args := pagedkv.MLARopeQuantArgs{NumTokens: c.Tokens, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, LoraRank: c.Lora, RopeDim: c.Rope,
		MaxPos: maxPos, RotDim: rot, NeoX: c.NeoX, DType: c.DType, QOutScale: qScale, KOutScale: kScale,
		QNopeTokenStride: qn.tokenStride, QRopeTokenStride: qr.tokenStride, KNopeTokenStride: kn.tokenStride, KRopeTokenStride: kr.tokenStride}
	qOutBytes := c.Tokens * c.QHeads * (c.Lora + c.Rope)
	var set Setter
	set.To(&args.QNope)(Upload(a, s, qn.raw, 1))
	set.To(&args.QRope)(Upload(a, s, qr.raw, 1))
	set.To(&args.KNope)(Upload(a, s, kn.raw, 1))
	set.To(&args.KRope)(Upload(a, s, kr.raw, 1))
	set.To(&args.QOut)(a.Alloc(int64(qOutBytes)))
	set.To(&args.KNopeOut)(a.Alloc(int64(c.Tokens * c.KVHeads * c.Lora)))
	set.To(&args.KRopeOut)(a.Alloc(int64(c.Tokens * c.KVHeads * c.Rope)))
	set.To(&args.Positions)(Upload(a, s, positions, 8))
	set.To(&args.CosSin)(Upload(a, s, cosSin, 4))
	if set.Err != nil {
		return set.Err
	}
	for _, b := range []pagedkv.Buffer{args.QOut, args.KNopeOut, args.KRopeOut} {
		if err := s.Fill(b, 0x7F); err != nil { // e4m3 NaN
			return err
		}
	}
	if err := r.MLARopeQuant(s, &args); err != nil {
		return err
	}
	if err := s.Fault(); err != nil {
		return err
	}
	qOut := make([]byte, qOutBytes)
	knOut := make([]byte, c.Tokens*c.KVHeads*c.Lora)
	krOut := make([]byte, c.Tokens*c.KVHeads*c.Rope)
	for _, d := range []struct {
		dst []byte
		src pagedkv.Buffer
	}{{qOut, args.QOut}, {knOut, args.KNopeOut}, {krOut, args.KRopeOut}} {
		if err := pagedkv.Download(s, d.dst, d.src); err != nil {
			return err
		}
	}
	exact := func(name string, got []byte, at func(i int) int, vals []float64, scale float32) error {
		for i, x := range vals {
			if want := ref.E4M3FromFloat32(float32(x) / scale); got[at(i)] != want {
				return errorf("%v: %s element %d is %#x, want %#x", c, name, i, got[at(i)], want)
			}
		}
		return nil
	}
	near := func(name string, got []byte, at func(i int) int, want []float64, scale float32) error {
		for i, w := range want {
			v := ref.E4M3ToFloat64(got[at(i)]) * float64(scale)
			if tol := math.Max(math.Abs(w)/16, float64(scale)/1024)*1.0001 + 1e-6; !(math.Abs(v-w) <= tol) {
				return errorf("%v: %s element %d is %g, want %g", c, name, i, v, w)
			}
		}
		return nil
	}
	qRow := c.Lora + c.Rope
	qNopeAt := func(i int) int { th := i / c.Lora; return th*qRow + i%c.Lora }
	qRopeAt := func(i int) int { th := i / c.Rope; return th*qRow + c.Lora + i%c.Rope }
	same := func(i int) int { return i }
	if err := exact("q nope", qOut, qNopeAt, qn.vals, qScale); err != nil {
		return err
	}
	if err := exact("k nope", knOut, same, kn.vals, kScale); err != nil {
		return err
	}
	if err := near("q rope", qOut, qRopeAt, ref.RopeRotate(qr.vals, c.QHeads, c.Rope, positions, cosSin, rot, c.NeoX), qScale); err != nil {
		return err
	}
	if err := near("k rope", krOut, same, ref.RopeRotate(kr.vals, c.KVHeads, c.Rope, positions, cosSin, rot, c.NeoX), kScale); err != nil {
		return err
	}

	// The concat of the unquantized q parts.
	cat := pagedkv.MLAConcatQArgs{QNope: args.QNope, QRope: args.QRope, NumTokens: c.Tokens, NumQHeads: c.QHeads,
		LoraRank: c.Lora, RopeDim: c.Rope, QNopeTokenStride: qn.tokenStride, QRopeTokenStride: qr.tokenStride, DType: c.DType}
	size := c.DType.Size()
	out, err := a.Alloc(int64(c.Tokens * c.QHeads * qRow * size))
	if err != nil {
		return err
	}
	cat.Out = out
	if err := s.Fill32(cat.Out, NaNPattern(c.DType)); err != nil {
		return err
	}
	if err := r.MLAConcatQ(s, &cat); err != nil {
		return err
	}
	got := make([]byte, c.Tokens*c.QHeads*qRow*size)
	if err := pagedkv.Download(s, got, cat.Out); err != nil {
		return err
	}
	for t := range c.Tokens {
		for h := range c.QHeads {
			o := (t*c.QHeads + h) * qRow * size
			n := (t*qn.tokenStride + h*c.Lora) * size
			p := (t*qr.tokenStride + h*c.Rope) * size
			want := append(append([]byte(nil), qn.raw[n:n+c.Lora*size]...), qr.raw[p:p+c.Rope*size]...)
			if i := FirstDiff(want, got[o:o+qRow*size]); i >= 0 {
				return errorf("%v: concat token %d head %d differs at byte %d", c, t, h, i)
			}
		}
	}
	return nil
}
