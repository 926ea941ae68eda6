package pagedkv

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/internal/ref"
)

// convertFormat describes one device format for the table-driven conversion
// tests: the exported conversions (at scale 1 for e4m3) and internal/ref's.
type convertFormat struct {
	name     string
	patterns int // bit patterns: 1<<16 or 1<<8
	// finite is the number of non-negative finite patterns, the consecutive
	// integers 0 … finite-1 in increasing value; overflow is the value the
	// pattern after the largest would have.
	finite   int
	overflow float64
	isNaN    func(p uint32) bool
	encode   func(t *testing.T, src []float32) []uint32
	decode   func(t *testing.T, src []uint32) []float32
	refEnc   func(x float32) uint32
	refDec   func(p uint32) float64
}

func convertFormats() []convertFormat {
	return []convertFormat{
		{
			name: "f16", patterns: 1 << 16, finite: 0x7c00, overflow: 65536,
			isNaN: func(p uint32) bool { return p&0x7c00 == 0x7c00 && p&0x3ff != 0 },
			encode: func(t *testing.T, src []float32) []uint32 {
				dst := make([]uint16, len(src))
				require.NoError(t, F16FromFloat32(dst, src))
				return widen(dst)
			},
			decode: func(t *testing.T, src []uint32) []float32 {
				dst := make([]float32, len(src))
				require.NoError(t, Float32FromF16(dst, narrow[uint16](src)))
				return dst
			},
			refEnc: func(x float32) uint32 { return uint32(ref.F16FromFloat32(x)) },
			refDec: func(p uint32) float64 { return ref.F16ToFloat64(uint16(p)) },
		},
		{
			name: "bf16", patterns: 1 << 16, finite: 0x7f80, overflow: math.Ldexp(1, 128),
			isNaN: func(p uint32) bool { return p&0x7f80 == 0x7f80 && p&0x7f != 0 },
			encode: func(t *testing.T, src []float32) []uint32 {
				dst := make([]uint16, len(src))
				require.NoError(t, BF16FromFloat32(dst, src))
				return widen(dst)
			},
			decode: func(t *testing.T, src []uint32) []float32 {
				dst := make([]float32, len(src))
				require.NoError(t, Float32FromBF16(dst, narrow[uint16](src)))
				return dst
			},
			refEnc: func(x float32) uint32 { return uint32(ref.BF16FromFloat32(x)) },
			refDec: func(p uint32) float64 { return ref.BF16ToFloat64(uint16(p)) },
		},
		{
			name: "e4m3", patterns: 1 << 8, finite: 0x7f, overflow: 480,
			isNaN: func(p uint32) bool { return p&0x7f == 0x7f },
			encode: func(t *testing.T, src []float32) []uint32 {
				dst := make([]uint8, len(src))
				require.NoError(t, E4M3FromFloat32(dst, src, 1))
				return widen(dst)
			},
			decode: func(t *testing.T, src []uint32) []float32 {
				dst := make([]float32, len(src))
				require.NoError(t, Float32FromE4M3(dst, narrow[uint8](src), 1))
				return dst
			},
			refEnc: func(x float32) uint32 { return uint32(ref.E4M3FromFloat32(x)) },
			refDec: func(p uint32) float64 { return ref.E4M3ToFloat64(uint8(p)) },
		},
	}
}

func widen[T uint8 | uint16](s []T) []uint32 {
	out := make([]uint32, len(s))
	for i, v := range s {
		out[i] = uint32(v)
	}
	return out
}

func narrow[T uint8 | uint16](s []uint32) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[i] = T(v)
	}
	return out
}

// TestConvertAllPatterns decodes every bit pattern of each format, checks the
// value against internal/ref exactly, and encodes it back: every non-NaN
// pattern (-0 included) round-trips, and a NaN stays a NaN.
func TestConvertAllPatterns(t *testing.T) {
	for _, f := range convertFormats() {
		t.Run(f.name, func(t *testing.T) {
			all := make([]uint32, f.patterns)
			for p := range all {
				all[p] = uint32(p)
			}
			values := f.decode(t, all)
			back := f.encode(t, values)
			for p, v := range values {
				want := f.refDec(uint32(p))
				if f.isNaN(uint32(p)) {
					require.True(t, math.IsNaN(float64(v)), "%s %#x decodes to %v, want NaN", f.name, p, v)
					require.True(t, f.isNaN(back[p]), "%s %#x: NaN encodes to %#x", f.name, p, back[p])
					continue
				}
				require.Equal(t, want, float64(v), "%s %#x", f.name, p)
				require.Equal(t, math.Signbit(want), math.Signbit(float64(v)), "%s %#x: sign", f.name, p)
				require.Equal(t, uint32(p), back[p], "%s %#x: round trip through %v", f.name, p, v)
			}
		})
	}
}

// TestConvertRounding encodes the values where rounding decides, for every
// pair of neighbouring finite patterns of each format and both signs: both
// values, their midpoint (a tie) and the float32 values next to each, plus
// a million random float32 bit patterns (NaNs and infinities included), and
// checks every result against internal/ref bit for bit.
func TestConvertRounding(t *testing.T) {
	for _, f := range convertFormats() {
		t.Run(f.name, func(t *testing.T) {
			var inputs []float32
			for p := range f.finite {
				v := f.refDec(uint32(p))
				next := f.overflow
				if p+1 < f.finite {
					next = f.refDec(uint32(p + 1))
				}
				mid := float32((v + next) / 2) // exact: one more bit than the format has
				for _, x := range []float32{float32(v), mid} {
					up := math.Nextafter32(x, float32(math.Inf(1)))
					down := math.Nextafter32(x, 0)
					inputs = append(inputs, x, up, down, -x, -up, -down)
				}
			}
			rng := rand.New(rand.NewPCG(1, uint64(f.patterns)))
			for range 1 << 20 {
				inputs = append(inputs, math.Float32frombits(rng.Uint32()))
			}
			inputs = append(inputs, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32)

			got := f.encode(t, inputs)
			mismatches := 0
			for i, x := range inputs {
				if want := f.refEnc(x); got[i] != want {
					mismatches++
					if mismatches <= 5 {
						t.Errorf("%s(%g = %#08x) = %#x, internal/ref gives %#x", f.name, x, math.Float32bits(x), got[i], want)
					}
				}
			}
			assert.Zero(t, mismatches, "%d of %d inputs differ from internal/ref", mismatches, len(inputs))
		})
	}
}

// TestConvertCases pins rounding by hand: ties go to the even pattern, the
// largest finite value's tie with the next power of two overflows (f16,
// bf16) or saturates (e4m3), subnormals round in their own units, and NaN
// and signed zero keep their meaning.
func TestConvertCases(t *testing.T) {
	f16 := func(x float32) uint32 {
		d := make([]uint16, 1)
		require.NoError(t, F16FromFloat32(d, []float32{x}))
		return uint32(d[0])
	}
	bf16 := func(x float32) uint32 {
		d := make([]uint16, 1)
		require.NoError(t, BF16FromFloat32(d, []float32{x}))
		return uint32(d[0])
	}
	e4m3 := func(scale float32) func(float32) uint32 {
		return func(x float32) uint32 {
			d := make([]uint8, 1)
			require.NoError(t, E4M3FromFloat32(d, []float32{x}, scale))
			return uint32(d[0])
		}
	}
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name   string
		encode func(float32) uint32
		in     float32
		want   uint32
	}{
		{"f16 one", f16, 1, 0x3c00},
		{"f16 tie down to even", f16, 1 + 0x1p-11, 0x3c00},
		{"f16 tie up to even", f16, 1 + 3*0x1p-11, 0x3c02},
		{"f16 above tie", f16, math.Nextafter32(1+0x1p-11, 2), 0x3c01},
		{"f16 max", f16, 65504, 0x7bff},
		{"f16 below overflow tie", f16, math.Nextafter32(65520, 0), 0x7bff},
		{"f16 overflow tie", f16, 65520, 0x7c00},
		{"f16 -overflow", f16, -1e6, 0xfc00},
		{"f16 inf", f16, inf, 0x7c00},
		{"f16 nan", f16, nan, 0x7e00},
		{"f16 -0", f16, float32(math.Copysign(0, -1)), 0x8000},
		{"f16 half the smallest subnormal", f16, 0x1p-25, 0x0000},
		{"f16 above half the smallest subnormal", f16, math.Nextafter32(0x1p-25, 1), 0x0001},
		{"f16 subnormal tie to even", f16, 3 * 0x1p-25, 0x0002},
		{"f16 largest subnormal tie", f16, 1023.5 * 0x1p-24, 0x0400},
		{"bf16 one", bf16, 1, 0x3f80},
		{"bf16 tie down to even", bf16, 1 + 0x1p-8, 0x3f80},
		{"bf16 tie up to even", bf16, 1 + 3*0x1p-8, 0x3f82},
		{"bf16 max float32 overflows", bf16, math.MaxFloat32, 0x7f80},
		{"bf16 -inf", bf16, -inf, 0xff80},
		{"bf16 nan", bf16, nan, 0x7fc0},
		{"e4m3 one", e4m3(1), 1, 0x38},
		{"e4m3 tie down to even", e4m3(1), 1.0625, 0x38},
		{"e4m3 tie up to even", e4m3(1), 1.1875, 0x3a},
		{"e4m3 max", e4m3(1), 448, 0x7e},
		{"e4m3 saturates", e4m3(1), 464, 0x7e},
		{"e4m3 saturates far", e4m3(1), -1e9, 0xfe},
		{"e4m3 inf saturates", e4m3(1), -inf, 0xfe},
		{"e4m3 nan", e4m3(1), nan, 0x7f},
		{"e4m3 negative nan", e4m3(1), float32(math.Copysign(math.NaN(), -1)), 0x7f},
		{"e4m3 -0", e4m3(1), float32(math.Copysign(0, -1)), 0x80},
		{"e4m3 half the smallest subnormal", e4m3(1), 0x1p-10, 0x00},
		{"e4m3 subnormal tie to even", e4m3(1), 3 * 0x1p-10, 0x02},
		{"e4m3 largest subnormal tie", e4m3(1), 7.5 * 0x1p-9, 0x08},
		{"e4m3 scale divides", e4m3(2), 3, 0x3c},
		{"e4m3 scale saturates after dividing", e4m3(2), 1000, 0x7e},
		{"e4m3 small scale", e4m3(0.25), 0.25, 0x38},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.encode(tt.in), "%g", tt.in)
		})
	}
}

// TestE4M3Scale checks that both directions apply the scale as the kernels
// do, against internal/ref: stored = e4m3(float32(x / scale)), value =
// e4m3 value × scale.
func TestE4M3Scale(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	for _, scale := range []float32{0.01, 0.25, 1, 3, 17.5} {
		src := make([]float32, 4096)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 600 * float64(scale) / 448)
		}
		enc := make([]uint8, len(src))
		require.NoError(t, E4M3FromFloat32(enc, src, scale))
		dec := make([]float32, len(src))
		require.NoError(t, Float32FromE4M3(dec, enc, scale))
		for i, x := range src {
			require.Equal(t, ref.E4M3FromFloat32(x/scale), enc[i], "scale %g, x %g", scale, x)
			require.Equal(t, float32(ref.E4M3ToFloat64(enc[i]))*scale, dec[i], "scale %g, %#x", scale, enc[i])
		}
	}
	nan := make([]float32, 2)
	require.NoError(t, Float32FromE4M3(nan, []uint8{0x7f, 0xff}, 2))
	assert.True(t, math.IsNaN(float64(nan[0])) && math.IsNaN(float64(nan[1])), "%v", nan)
}

// TestConvertErrors checks that a length mismatch or a bad scale is an error
// naming the function, the argument and its value, and that nothing is
// written then.
func TestConvertErrors(t *testing.T) {
	const sentinel = 0x5a
	f32 := func(n int) []float32 { return make([]float32, n) }
	u16 := func(n int) []uint16 {
		s := make([]uint16, n)
		for i := range s {
			s[i] = sentinel
		}
		return s
	}
	u8 := func(n int) []uint8 {
		s := make([]uint8, n)
		for i := range s {
			s[i] = sentinel
		}
		return s
	}
	tests := []struct {
		name    string
		convert func() error
		want    string // "" for no error
	}{
		{"f16 ok", func() error { return F16FromFloat32(u16(3), f32(3)) }, ""},
		{"f16 empty", func() error { return F16FromFloat32(nil, nil) }, ""},
		{"f16 short dst", func() error { return F16FromFloat32(u16(2), f32(3)) },
			"pagedkv: F16FromFloat32: len(dst)=2 does not match len(src)=3"},
		{"from f16 long dst", func() error { return Float32FromF16(f32(4), u16(3)) },
			"pagedkv: Float32FromF16: len(dst)=4 does not match len(src)=3"},
		{"bf16", func() error { return BF16FromFloat32(u16(1), f32(0)) },
			"pagedkv: BF16FromFloat32: len(dst)=1 does not match len(src)=0"},
		{"from bf16", func() error { return Float32FromBF16(nil, u16(1)) },
			"pagedkv: Float32FromBF16: len(dst)=0 does not match len(src)=1"},
		{"e4m3 lengths", func() error { return E4M3FromFloat32(u8(1), f32(2), 1) },
			"pagedkv: E4M3FromFloat32: len(dst)=1 does not match len(src)=2"},
		{"e4m3 zero scale", func() error { return E4M3FromFloat32(u8(2), f32(2), 0) },
			"pagedkv: E4M3FromFloat32: scale=0 is not allowed; allowed: a finite value > 0"},
		{"e4m3 negative scale", func() error { return E4M3FromFloat32(u8(2), f32(2), -1) },
			"pagedkv: E4M3FromFloat32: scale=-1 is not allowed; allowed: a finite value > 0"},
		{"e4m3 nan scale", func() error { return E4M3FromFloat32(u8(2), f32(2), float32(math.NaN())) },
			"pagedkv: E4M3FromFloat32: scale=NaN is not allowed; allowed: a finite value > 0"},
		{"from e4m3 lengths", func() error { return Float32FromE4M3(f32(3), u8(2), 1) },
			"pagedkv: Float32FromE4M3: len(dst)=3 does not match len(src)=2"},
		{"from e4m3 inf scale", func() error { return Float32FromE4M3(f32(2), u8(2), float32(math.Inf(1))) },
			"pagedkv: Float32FromE4M3: scale=+Inf is not allowed; allowed: a finite value > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.convert()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tt.want)
		})
	}

	// Nothing is written on an error.
	dst16 := u16(2)
	require.Error(t, F16FromFloat32(dst16, f32(3)))
	assert.Equal(t, u16(2), dst16)
	dst8 := u8(2)
	require.Error(t, E4M3FromFloat32(dst8, f32(2), 0))
	assert.Equal(t, u8(2), dst8)
}
