package pagedkv

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/internal/ref"
)

// quotientByReciprocal models quotient_by_reciprocal of
// kernels_src/common.cuh with exact float32 roundings: q = RN(x·y), the
// residual RN(x − b·q) and RN(r·y + q) each rounded once, as the device's
// multiply and fused multiply-adds round; q itself where |q| ≥ 2^127 (or
// NaN), and the corrected value with q's sign.
func quotientByReciprocal(x, b, y float32) float32 {
	q := float32(float64(x) * float64(y)) // exact product, one rounding
	if !(math.Abs(float64(q)) < math.Ldexp(1, 127)) {
		return q
	}
	r := new(big.Float).SetPrec(256).SetFloat64(float64(b))
	r.Mul(r, big.NewFloat(float64(q)))
	r.Sub(big.NewFloat(float64(x)), r)
	r32, _ := r.Float32()
	s := new(big.Float).SetPrec(256).SetFloat64(float64(r32))
	s.Mul(s, big.NewFloat(float64(y)))
	s.Add(s, big.NewFloat(float64(q)))
	out, _ := s.Float32()
	return float32(math.Copysign(float64(out), float64(q)))
}

// TestE4M3QuotientByReciprocal checks the fp8 cache writes' division (see
// quotientByReciprocal) against the IEEE quotient the references take, for
// every finite f16 and bf16 value and scales across [2^-64, 2^64] (the range
// where the kernels use it): the e4m3 bytes must be equal.
func TestE4M3QuotientByReciprocal(t *testing.T) {
	g := rand.New(rand.NewPCG(3, 64))
	scales := []float32{1, 0.75, 3, 0.05, 1.0 / 3, 123.456, float32(math.Ldexp(1, -64)), float32(math.Ldexp(1, 64)),
		float32(math.Ldexp(1.7, -64)), float32(math.Ldexp(1.3, 63))}
	for range 14 {
		scales = append(scales, float32(math.Ldexp(1+g.Float64(), g.IntN(128)-64)))
	}
	f16 := make([]float32, 1)
	for _, b := range scales {
		y64, _ := new(big.Float).SetPrec(256).Quo(big.NewFloat(1), big.NewFloat(float64(b))).Float32()
		for bits := range 1 << 16 {
			require.NoError(t, Float32FromF16(f16, []uint16{uint16(bits)}))
			for _, x := range []float32{f16[0], math.Float32frombits(uint32(bits) << 16)} {
				if x != x || math.IsInf(float64(x), 0) {
					continue
				}
				want := ref.E4M3FromFloat32(x / b)
				if got := ref.E4M3FromFloat32(quotientByReciprocal(x, b, y64)); got != want {
					t.Fatalf("e4m3(%g / %g): reciprocal path gives %#02x, IEEE division %#02x", x, b, got, want)
				}
			}
		}
	}
}
