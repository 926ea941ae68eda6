package ref

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// format describes one dtype for the table-driven conversion tests.
type format struct {
	name string
	// posPatterns is the number of non-negative finite bit patterns, which
	// are the consecutive integers 0 … posPatterns-1 in increasing value.
	posPatterns int
	signBit     uint32
	// overflow is the value the first pattern past the largest finite one
	// would have; a value rounding to it (or beyond) gives overflowPattern.
	overflow        float64
	overflowPattern uint32
	isNaN           func(p uint32) bool
	toFloat64       func(p uint32) float64
	fromFloat32     func(f float32) uint32
}

var formats = []format{
	{
		name: "f16", posPatterns: 0x7c00, signBit: 0x8000,
		overflow: 65536, overflowPattern: 0x7c00,
		isNaN:       func(p uint32) bool { return p&0x7c00 == 0x7c00 && p&0x3ff != 0 },
		toFloat64:   func(p uint32) float64 { return F16ToFloat64(uint16(p)) },
		fromFloat32: func(f float32) uint32 { return uint32(F16FromFloat32(f)) },
	},
	{
		name: "bf16", posPatterns: 0x7f80, signBit: 0x8000,
		overflow: math.Ldexp(1, 128), overflowPattern: 0x7f80,
		isNaN:       func(p uint32) bool { return p&0x7f80 == 0x7f80 && p&0x7f != 0 },
		toFloat64:   func(p uint32) float64 { return BF16ToFloat64(uint16(p)) },
		fromFloat32: func(f float32) uint32 { return uint32(BF16FromFloat32(f)) },
	},
	{
		// e4m3 saturates: everything past 448 maps to 448 (0x7e).
		name: "e4m3", posPatterns: 0x7f, signBit: 0x80,
		overflow: math.Inf(1), overflowPattern: 0x7e,
		isNaN:       func(p uint32) bool { return p&0x7f == 0x7f },
		toFloat64:   func(p uint32) float64 { return E4M3ToFloat64(uint8(p)) },
		fromFloat32: func(f float32) uint32 { return uint32(E4M3FromFloat32(f)) },
	},
}

// nearest is the math-derived expectation for converting x: the sign of x
// plus the non-negative pattern whose value is closest to |x|, ties to the
// even pattern (the even mantissa), overflow as the format defines it.
func (f format) nearest(values []float64, x float64) uint32 {
	sign := uint32(0)
	if math.Signbit(x) {
		sign = f.signBit
	}
	ax := math.Abs(x)
	if math.IsInf(ax, 1) {
		return sign | f.overflowPattern
	}
	// values[i] is the value of pattern i; values[len-1] is the overflow value.
	i := sort.SearchFloat64s(values, ax) // first values[i] >= ax
	if i == len(values) {
		return sign | f.overflowPattern
	}
	if values[i] == ax || i == 0 {
		if i == len(values)-1 {
			return sign | f.overflowPattern
		}
		return sign | uint32(i)
	}
	lo, hi := i-1, i
	dlo, dhi := ax-values[lo], values[hi]-ax
	p := hi
	if dlo < dhi || (dlo == dhi && lo%2 == 0) {
		p = lo
	}
	if p == len(values)-1 {
		return sign | f.overflowPattern
	}
	return sign | uint32(p)
}

// valueTable returns the values of the non-negative finite patterns followed
// by the overflow value (or the largest finite value again for a saturating
// format, which makes its midpoint rounding land on it).
func (f format) valueTable() []float64 {
	values := make([]float64, f.posPatterns+1)
	for p := range f.posPatterns {
		values[p] = f.toFloat64(uint32(p))
	}
	values[f.posPatterns] = f.overflow
	if math.IsInf(f.overflow, 1) {
		values = values[:f.posPatterns]
	}
	return values
}

func TestRoundTripEveryPattern(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			for p := uint32(0); p <= 2*f.signBit-1; p++ {
				// testify is only called on a mismatch: asserting every one of
				// the 65536 patterns through it would cost most of a second.
				v := f.toFloat64(p)
				if f.isNaN(p) {
					if !math.IsNaN(v) || !f.isNaN(f.fromFloat32(float32(v))) {
						require.Failf(t, "NaN pattern not preserved", "pattern %#x gives %g", p, v)
					}
					continue
				}
				if math.IsNaN(v) || float64(float32(v)) != v || f.fromFloat32(float32(v)) != p {
					require.Failf(t, "round trip", "pattern %#x (%g) comes back as %#x",
						p, v, f.fromFloat32(float32(v)))
				}
			}
		})
	}
}

func TestValuesIncreaseWithPattern(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			prev := math.Inf(-1)
			for p := range f.posPatterns {
				v := f.toFloat64(uint32(p))
				neg := f.toFloat64(uint32(p) | f.signBit)
				if !(v > prev) || neg != -v || !math.Signbit(neg) {
					require.Failf(t, "ordering", "pattern %#x is %g (previous %g), its negative %g", p, v, prev, neg)
				}
				prev = v
			}
		})
	}
}

// TestMatchesMathExpectation converts every midpoint between neighbouring
// values, the float32 values just beside each midpoint, and random float32
// values, and checks each against the nearest-value search.
func TestMatchesMathExpectation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			values := f.valueTable()
			check := func(x float32) {
				for _, x := range []float32{x, -x} {
					if want, got := f.nearest(values, float64(x)), f.fromFloat32(x); got != want {
						require.Failf(t, "conversion", "x=%g (%#08x): got %#x, want %#x",
							x, math.Float32bits(x), got, want)
					}
				}
			}
			for i := 0; i+1 < len(values); i++ {
				mid := float32((values[i] + values[i+1]) / 2)
				if float64(mid) != (values[i]+values[i+1])/2 {
					require.Failf(t, "midpoint", "between %g and %g is not exact in float32", values[i], values[i+1])
				}
				check(mid)
				check(math.Nextafter32(mid, 0))
				check(math.Nextafter32(mid, float32(math.Inf(1))))
			}
			for range 100_000 {
				// Random bits over the whole float32 range, then random
				// values near the format's own range.
				x := math.Float32frombits(rng.Uint32())
				if x != x {
					continue
				}
				check(x)
				check(float32(values[len(values)-1] * 1.1 * rng.Float64()))
			}
			check(float32(math.Inf(1)))
			check(math.MaxFloat32)
			check(0)
		})
	}
}

func TestF16Boundaries(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{65504, 0x7bff},
		{-65504, 0xfbff},
		{65519.99, 0x7bff}, // below the midpoint to 65536
		{65520, 0x7c00},    // midpoint, ties to even (Inf)
		{1e6, 0x7c00},      // overflow
		{float32(math.Inf(-1)), 0xfc00},
		{0x1p-24, 0x0001},        // smallest subnormal
		{0x1p-25, 0x0000},        // half of it: tie to even 0
		{0x1.000002p-25, 0x0001}, // just above the tie
		{0x3p-25, 0x0002},        // 1.5 ulp: tie to even 2
		{0x5p-25, 0x0002},        // 2.5 ulp: tie to even 2
		{0x1p-14, 0x0400},        // smallest normal
		{0x1.ff8p-15, 0x03ff},    // largest subnormal
		{0x1.ffcp-15, 0x0400},    // largest subnormal + half ulp: tie to even (normal)
		{0x1.ff4p-15, 0x03fe},    // largest subnormal - half ulp: tie to even
		{1, 0x3c00},
		{1 + 0x1p-11, 0x3c00},   // tie to even down
		{1 + 3*0x1p-11, 0x3c02}, // tie to even up
		{1 + 0x1p-11 + 0x1p-23, 0x3c01},
		{-2, 0xc000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{0x1p-149, 0x0000}, // float32 subnormal
	}
	for _, tc := range tests {
		assert.Equalf(t, tc.want, F16FromFloat32(tc.in), "F16FromFloat32(%g)", tc.in)
	}
	assert.Equal(t, 65504.0, F16ToFloat64(0x7bff))
	assert.Equal(t, 0x1p-24, F16ToFloat64(0x0001))
	assert.Equal(t, 0x1p-14, F16ToFloat64(0x0400))
	assert.True(t, math.IsInf(F16ToFloat64(0xfc00), -1))
}

func TestF16NaNPayload(t *testing.T) {
	for _, payload := range []uint32{0, 1, 0x155, 0x1ff} {
		quiet := math.Float32frombits(0x7fc00000 | payload<<13)
		assert.Equal(t, uint16(0x7e00)|uint16(payload), F16FromFloat32(quiet))
		// A signalling NaN comes back quiet, payload kept.
		signalling := math.Float32frombits(0xff800000 | (payload|0x100)<<13)
		assert.Equal(t, uint16(0xfe00)|uint16(payload|0x100), F16FromFloat32(signalling))
	}
	// A payload only in the low bits still gives a NaN, never Inf.
	assert.Equal(t, uint16(0x7e00), F16FromFloat32(math.Float32frombits(0x7f800001)))
}

func TestBF16Boundaries(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie to even down
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie to even up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{math.Float32frombits(0x7f7f7fff), 0x7f7f}, // below the last midpoint
		{math.Float32frombits(0x7f7f8000), 0x7f80}, // midpoint to 2^128: Inf
		{math.MaxFloat32, 0x7f80},
		{float32(math.Inf(-1)), 0xff80},
		{0x1p-133, 0x0001}, // smallest bf16 subnormal
		{0x1p-134, 0x0000}, // tie to even 0
		{0x3p-134, 0x0002},
		{float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, tc := range tests {
		assert.Equalf(t, tc.want, BF16FromFloat32(tc.in), "BF16FromFloat32(%g)", tc.in)
	}
	assert.Equal(t, uint16(0x7fc1), BF16FromFloat32(math.Float32frombits(0x7f810000)))
	assert.Equal(t, uint16(0xffc0), BF16FromFloat32(math.Float32frombits(0xff800001)))
}

func TestE4M3Boundaries(t *testing.T) {
	tests := []struct {
		in   float32
		want uint8
	}{
		{448, 0x7e},
		{-448, 0xfe},
		{416, 0x7d},
		{432, 0x7e},   // tie between 416 (odd) and 448 (even)
		{449, 0x7e},   // saturate
		{464, 0x7e},   // would round to 480 without SATFINITE
		{1e30, 0x7e},  // saturate
		{-1e30, 0xfe}, // saturate
		{float32(math.Inf(1)), 0x7e},
		{float32(math.Inf(-1)), 0xfe},
		{float32(math.NaN()), 0x7f},
		{math.Float32frombits(0xffc00000), 0x7f},
		{0x1p-9, 0x01}, // smallest subnormal
		{0x1p-10, 0x00},
		{-0x1p-10, 0x80},
		{0x1.000002p-10, 0x01},
		{0x3p-10, 0x02},
		{0x7p-9, 0x07}, // largest subnormal
		{0x1p-6, 0x08}, // smallest normal
		{0xfp-10, 0x08},
		{1, 0x38},
		{1.0625, 0x38}, // tie to even down
		{1.1875, 0x3a}, // tie to even up
		{1.07, 0x39},
		{float32(math.Copysign(0, -1)), 0x80},
	}
	for _, tc := range tests {
		assert.Equalf(t, tc.want, E4M3FromFloat32(tc.in), "E4M3FromFloat32(%g)", tc.in)
	}
	assert.Equal(t, E4M3Max, E4M3ToFloat64(0x7e))
	assert.Equal(t, 0x1p-9, E4M3ToFloat64(0x01))
	assert.True(t, math.IsNaN(E4M3ToFloat64(0x7f)))
	assert.True(t, math.IsNaN(E4M3ToFloat64(0xff)))
	assert.Equal(t, -1.0, E4M3ToFloat64(0xb8))
}

func TestSliceHelpers(t *testing.T) {
	vals := []float32{1, -2.5, 0.1, 300, -1e-2}
	for _, d := range []DType{F16, BF16, E4M3} {
		t.Run(d.String(), func(t *testing.T) {
			raw := EncodeSlice(d, vals)
			require.Len(t, raw, len(vals)*d.Size())
			got := DecodeSlice(d, raw)
			require.Len(t, got, len(vals))
			for i, v := range vals {
				assert.Equal(t, got[i], DecodeAt(d, raw, i))
				assert.InEpsilon(t, float64(v), got[i], 0.07, "element %d", i)
			}
		})
	}
	// Little-endian layout.
	assert.Equal(t, []byte{0x00, 0x3c, 0x00, 0xc0}, EncodeSlice(F16, []float32{1, -2}))
	assert.Equal(t, []byte{0x80, 0x3f}, EncodeSlice(BF16, []float32{1}))
	assert.Equal(t, []byte{0x38, 0xfe}, EncodeSlice(E4M3, []float32{1, -448}))
	assert.Panics(t, func() { DecodeSlice(F16, []byte{1, 2, 3}) })
	assert.Panics(t, func() { DType(0).Size() })
	assert.Equal(t, "DType(0)", DType(0).String())
}
