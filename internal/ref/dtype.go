package ref

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is the storage type of a tensor element. The zero value is not a
// valid DType, so a forgotten field panics instead of silently meaning fp16.
// It mirrors dispatch.DType number for number and name for name (the checks
// convert one to the other by number; TestDTypeMatchesRef in internal/check
// ties them), as this package imports nothing of pagedkv.
type DType int

const (
	// F16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits).
	F16 DType = iota + 1
	// BF16 is bfloat16 (1 sign, 8 exponent, 7 mantissa bits).
	BF16
	// E4M3 is OCP fp8 E4M3FN (1 sign, 4 exponent, 3 mantissa bits, bias 7,
	// no infinities, max finite 448).
	E4M3
)

// String returns the dtype's short name ("f16", "bf16", "e4m3").
func (d DType) String() string {
	switch d {
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case E4M3:
		return "e4m3"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size returns the size of one element in bytes. It panics for an invalid DType.
func (d DType) Size() int {
	switch d {
	case F16, BF16:
		return 2
	case E4M3:
		return 1
	}
	panic(fmt.Sprintf("ref: invalid %v", d))
}

// DecodeAt returns element i of raw, a little-endian buffer of dtype d, as
// float64. The conversion is exact.
func DecodeAt(d DType, raw []byte, i int) float64 {
	switch d {
	case F16:
		return F16ToFloat64(binary.LittleEndian.Uint16(raw[2*i:]))
	case BF16:
		return BF16ToFloat64(binary.LittleEndian.Uint16(raw[2*i:]))
	case E4M3:
		return E4M3ToFloat64(raw[i])
	}
	panic(fmt.Sprintf("ref: invalid %v", d))
}

// EncodeAt rounds v to dtype d (see F16FromFloat32, BF16FromFloat32,
// E4M3FromFloat32) and stores it as element i of raw, little-endian.
func EncodeAt(d DType, raw []byte, i int, v float32) {
	switch d {
	case F16:
		binary.LittleEndian.PutUint16(raw[2*i:], F16FromFloat32(v))
	case BF16:
		binary.LittleEndian.PutUint16(raw[2*i:], BF16FromFloat32(v))
	case E4M3:
		raw[i] = E4M3FromFloat32(v)
	default:
		panic(fmt.Sprintf("ref: invalid %v", d))
	}
}

// EncodeSlice returns vals rounded to dtype d as a new little-endian buffer of
// len(vals)*d.Size() bytes.
func EncodeSlice(d DType, vals []float32) []byte {
	raw := make([]byte, len(vals)*d.Size())
	for i, v := range vals {
		EncodeAt(d, raw, i, v)
	}
	return raw
}

// DecodeSlice returns every element of raw, a little-endian buffer of dtype d,
// as float64. It panics if len(raw) is not a multiple of d.Size().
func DecodeSlice(d DType, raw []byte) []float64 {
	size := d.Size()
	if len(raw)%size != 0 {
		panic(fmt.Sprintf("ref: DecodeSlice: %d bytes is not a whole number of %v elements", len(raw), d))
	}
	out := make([]float64, len(raw)/size)
	for i := range out {
		out[i] = DecodeAt(d, raw, i)
	}
	return out
}

// roundShiftRNE returns m >> shift rounded to nearest, ties to even.
// shift must be in [1, 31].
func roundShiftRNE(m uint32, shift uint) uint32 {
	q := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// F16FromFloat32 returns the IEEE binary16 bit pattern nearest to f, ties to
// even. Values beyond the largest finite half (65504) that round away from it
// become ±Inf; subnormal results are rounded correctly; a NaN stays a NaN
// with its top payload bits kept and the quiet bit set.
func F16FromFloat32(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23) & 0xff
	mant := bits & 0x7fffff

	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	if exp == 0 {
		// float32 zeros and subnormals are below 2^-126, far under half
		// the smallest half subnormal (2^-25).
		return sign
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	m := mant | 0x800000 // 24 significant bits
	if e <= 0 {
		// Subnormal half: units of 2^-24.
		shift := uint(14 - e)
		if shift > 24 {
			return sign
		}
		return sign | uint16(roundShiftRNE(m, shift))
	}
	// A carry out of the mantissa correctly bumps the exponent, up to Inf.
	q := uint32(e)<<10 + roundShiftRNE(m, 13) - 0x400
	return sign | uint16(q)
}

// F16ToFloat64 returns the exact value of the IEEE binary16 bit pattern h.
func F16ToFloat64(h uint16) float64 {
	exp := int(h>>10) & 0x1f
	mant := int(h & 0x3ff)
	var v float64
	switch exp {
	case 0x1f:
		if mant != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case 0:
		v = math.Ldexp(float64(mant), -24)
	default:
		v = math.Ldexp(float64(mant|0x400), exp-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// BF16FromFloat32 returns the bfloat16 bit pattern nearest to f, ties to even.
// Values that round beyond the largest finite bfloat16 become ±Inf; a NaN
// stays a NaN with its top payload bits kept and the quiet bit set.
func BF16FromFloat32(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return uint16(bits>>16) | 0x0040
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// BF16ToFloat64 returns the exact value of the bfloat16 bit pattern b.
func BF16ToFloat64(b uint16) float64 {
	return float64(math.Float32frombits(uint32(b) << 16))
}

// E4M3NaN is the canonical fp8 e4m3 NaN that E4M3FromFloat32 returns.
const E4M3NaN uint8 = 0x7f

// E4M3Max is the largest finite fp8 e4m3 value.
const E4M3Max = 448.0

// E4M3FromFloat32 returns the fp8 E4M3FN bit pattern nearest to f, ties to
// even, subnormals (multiples of 2^-9) included. Finite values beyond ±448 and
// ±Inf saturate to ±448 (0x7E/0xFE), and every NaN becomes 0x7F: this matches
// CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), the conversion the
// kernels use. Values that round to zero keep their sign (-0 is 0x80).
func E4M3FromFloat32(f float32) uint8 {
	bits := math.Float32bits(f)
	sign := uint8(bits>>24) & 0x80
	exp := int(bits>>23) & 0xff
	mant := bits & 0x7fffff

	if exp == 0xff {
		if mant != 0 {
			return E4M3NaN
		}
		return sign | 0x7e
	}
	if exp == 0 {
		return sign
	}
	e := exp - 127 + 7 // biased e4m3 exponent
	if e > 15 {
		return sign | 0x7e
	}
	m := mant | 0x800000
	if e <= 0 {
		// Subnormal e4m3: units of 2^-9.
		shift := uint(21 - e)
		if shift > 24 {
			return sign
		}
		return sign | uint8(roundShiftRNE(m, shift))
	}
	q := uint32(e)<<3 + roundShiftRNE(m, 20) - 0x8
	if q > 0x7e {
		q = 0x7e
	}
	return sign | uint8(q)
}

// E4M3ToFloat64 returns the exact value of the fp8 E4M3FN bit pattern b;
// 0x7F and 0xFF are NaN.
func E4M3ToFloat64(b uint8) float64 {
	exp := int(b>>3) & 0xf
	mant := int(b & 0x7)
	if exp == 0xf && mant == 0x7 {
		return math.NaN()
	}
	var v float64
	if exp == 0 {
		v = math.Ldexp(float64(mant), -9)
	} else {
		v = math.Ldexp(float64(mant|0x8), exp-10)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}
