package pagedkv

import "math"

// Host conversions between float32 and the element types the kernels read and
// write, for filling input buffers and reading results (Upload and Download
// move the []uint16 and []uint8 slices). Every narrowing conversion rounds to
// nearest, ties to even, as the kernels do.
//
// They are written here rather than taken from github.com/x448/float16: that
// module covers f16 only (bf16 and e4m3 would still be ours), it is not in
// this module's dependencies, and the three encoders share one rounding
// helper in about forty lines. They are checked bit for bit against the
// float64 reference in internal/ref (convert_test.go), which the library
// itself does not import.

// F16FromFloat32 stores src rounded to IEEE binary16 in dst. Values that round
// beyond the largest finite half (65504) become ±Inf; a NaN stays a NaN with
// its top payload bits kept and the quiet bit set. It returns an error, and
// writes nothing, when len(dst) != len(src).
func F16FromFloat32(dst []uint16, src []float32) error {
	if err := sameLen("F16FromFloat32", len(dst), len(src)); err != nil {
		return err
	}
	for i, x := range src {
		dst[i] = f16FromFloat32(x)
	}
	return nil
}

// Float32FromF16 stores the IEEE binary16 values of src in dst, exactly. It
// returns an error, and writes nothing, when len(dst) != len(src).
func Float32FromF16(dst []float32, src []uint16) error {
	if err := sameLen("Float32FromF16", len(dst), len(src)); err != nil {
		return err
	}
	for i, h := range src {
		dst[i] = float32FromF16(h)
	}
	return nil
}

// BF16FromFloat32 stores src rounded to bfloat16 in dst. Values that round
// beyond the largest finite bfloat16 become ±Inf; a NaN stays a NaN with its
// top payload bits kept and the quiet bit set. It returns an error, and writes
// nothing, when len(dst) != len(src).
func BF16FromFloat32(dst []uint16, src []float32) error {
	if err := sameLen("BF16FromFloat32", len(dst), len(src)); err != nil {
		return err
	}
	for i, x := range src {
		dst[i] = bf16FromFloat32(x)
	}
	return nil
}

// Float32FromBF16 stores the bfloat16 values of src in dst, exactly. It
// returns an error, and writes nothing, when len(dst) != len(src).
func Float32FromBF16(dst []float32, src []uint16) error {
	if err := sameLen("Float32FromBF16", len(dst), len(src)); err != nil {
		return err
	}
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
	return nil
}

// E4M3FromFloat32 stores src as fp8 e4m3 (OCP E4M3FN) with a per-tensor scale,
// as the cache kernels store K and V: element x becomes x/scale (a float32
// division) rounded to e4m3, subnormals included. Values beyond ±448, and
// ±Inf, saturate to ±448 (0x7E, 0xFE); every NaN becomes 0x7F; values that
// round to zero keep their sign. scale must be finite and > 0 (KScale and
// VScale obey the same rule). It returns an error, and writes nothing, for a
// bad scale or when len(dst) != len(src).
func E4M3FromFloat32(dst []uint8, src []float32, scale float32) error {
	if err := sameLen("E4M3FromFloat32", len(dst), len(src)); err != nil {
		return err
	}
	if err := e4m3Scale("E4M3FromFloat32", scale); err != nil {
		return err
	}
	for i, x := range src {
		dst[i] = e4m3FromFloat32(x / scale)
	}
	return nil
}

// Float32FromE4M3 stores the fp8 e4m3 values of src, times scale, in dst: the
// e4m3 value is exact in float32 and the product is rounded once. 0x7F and
// 0xFF are NaN. scale must be finite and > 0. It returns an error, and writes
// nothing, for a bad scale or when len(dst) != len(src).
func Float32FromE4M3(dst []float32, src []uint8, scale float32) error {
	if err := sameLen("Float32FromE4M3", len(dst), len(src)); err != nil {
		return err
	}
	if err := e4m3Scale("Float32FromE4M3", scale); err != nil {
		return err
	}
	for i, b := range src {
		dst[i] = float32FromE4M3(b) * scale
	}
	return nil
}

func sameLen(fn string, dst, src int) error {
	if dst != src {
		return errf("%s: len(dst)=%d does not match len(src)=%d", fn, dst, src)
	}
	return nil
}

func e4m3Scale(fn string, scale float32) error {
	if !(scale > 0) || math.IsInf(float64(scale), 1) {
		return errf("%s: scale=%g is not allowed; allowed: a finite value > 0", fn, scale)
	}
	return nil
}

// roundBits returns v >> n rounded to nearest, ties to even; n is 1..31 and
// v < 2^31. A carry out of the kept mantissa bits lands in the exponent,
// which is the correctly rounded result there too.
func roundBits(v uint32, n uint) uint32 {
	return (v + (1<<(n-1) - 1) + (v>>n)&1) >> n
}

// subnormalUnits returns |x| (the float32 bits abs, below the target format's
// smallest normal) in units of 2^-unitExp, rounded to nearest even.
func subnormalUnits(abs uint32, unitExp int) uint32 {
	e := int(abs >> 23) // float32 biased exponent; the value is m·2^(e-150)
	shift := 150 - unitExp - e
	if e == 0 || shift > 31 {
		return 0 // far below half a unit
	}
	return roundBits(abs&0x7fffff|0x800000, uint(shift))
}

func f16FromFloat32(x float32) uint16 {
	bits := math.Float32bits(x)
	sign := uint16(bits>>16) & 0x8000
	abs := bits & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(abs>>13)&0x3ff
	case abs >= 0x47800000: // 2^16 and beyond, Inf included
		return sign | 0x7c00
	case abs >= 0x38800000: // 2^-14, the smallest normal half
		// Rebias the exponent from 127 to 15 and drop 13 mantissa bits;
		// 65520 and above round up into Inf.
		return sign | uint16(roundBits(abs-(127-15)<<23, 13))
	}
	return sign | uint16(subnormalUnits(abs, 24))
}

func float32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f: // Inf or NaN, payload kept
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0: // zero or subnormal: mant·2^-24, exact
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*0x1p-24))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

func bf16FromFloat32(x float32) uint16 {
	bits := math.Float32bits(x)
	if bits&0x7fffffff > 0x7f800000 { // NaN
		return uint16(bits>>16) | 0x0040
	}
	// Rounding the low 16 bits away carries into the exponent, and from
	// the largest finite values into Inf, as it should.
	return uint16((bits + 0x7fff + (bits>>16)&1) >> 16)
}

func e4m3FromFloat32(x float32) uint8 {
	bits := math.Float32bits(x)
	sign := uint8(bits>>24) & 0x80
	abs := bits & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN
		return 0x7f
	case abs >= 0x43e00000: // 448 and beyond, Inf included: saturate
		return sign | 0x7e
	case abs >= 0x3c800000: // 2^-6, the smallest normal e4m3
		// Rebias the exponent from 127 to 7 and drop 20 mantissa bits;
		// below 448 nothing rounds past 0x7e.
		return sign | uint8(roundBits(abs-(127-7)<<23, 20))
	}
	return sign | uint8(subnormalUnits(abs, 9))
}

func float32FromE4M3(b uint8) float32 {
	sign := uint32(b&0x80) << 24
	exp := uint32(b>>3) & 0xf
	mant := uint32(b & 0x7)
	switch {
	case exp == 0xf && mant == 0x7:
		return float32(math.NaN())
	case exp == 0: // zero or subnormal: mant·2^-9, exact
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*0x1p-9))
	}
	return math.Float32frombits(sign | (exp+127-7)<<23 | mant<<20)
}
