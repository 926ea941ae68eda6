package pagedkv

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/pagedkv/pagedkv/driver"
)

// Validation helpers shared by the argument structs. Each names the struct
// and field in its error, with the value and what is allowed.

// maxElems bounds element counts so that byte sizes fit in int64 with room.
const maxElems = int64(1) << 56

func errf(format string, a ...any) error { return fmt.Errorf("pagedkv: "+format, a...) }

// buffer checks that b holds at least need bytes and that its pointer is
// aligned to align bytes. An empty need (0) still requires a pointer unless
// the buffer is optional and zero.
func buffer(arg, field string, b Buffer, need int64, align uintptr) error {
	if b.Ptr == 0 {
		return errf("%s.%s is missing (a null device pointer)", arg, field)
	}
	if uintptr(b.Ptr)%align != 0 {
		return errf("%s.%s pointer %#x is not %d-byte aligned", arg, field, uintptr(b.Ptr), align)
	}
	if b.Bytes < need {
		return errf("%s.%s holds %d bytes; the shapes need %d", arg, field, b.Bytes, need)
	}
	return nil
}

// positive checks lo ≤ v ≤ hi.
func inRange(arg, field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return errf("%s.%s=%d is out of range; allowed: %d..%d", arg, field, v, lo, hi)
	}
	return nil
}

// powerOfTwo checks that v is a power of two in [lo, hi].
func powerOfTwo(arg, field string, v, lo, hi int) error {
	if v < lo || v > hi || v&(v-1) != 0 {
		return errf("%s.%s=%d is not allowed; allowed: a power of two from %d to %d", arg, field, v, lo, hi)
	}
	return nil
}

// mul multiplies element counts, failing instead of overflowing.
func mul(arg, what string, xs ...int64) (int64, error) {
	p := int64(1)
	for _, x := range xs {
		if x < 0 {
			return 0, errf("%s: %s is negative", arg, what)
		}
		hi, lo := bits.Mul64(uint64(p), uint64(x))
		if hi != 0 || lo > uint64(maxElems) {
			return 0, errf("%s: %s overflows (%d × %d)", arg, what, p, x)
		}
		p = int64(lo)
	}
	return p, nil
}

// cacheScale checks an fp8 scale: finite and positive with an e4m3 cache,
// and left at 0 (or 1) otherwise, so that a scale is never silently ignored.
func cacheScale(arg, field string, v float32, cache DType) error {
	if cache == E4M3 {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return errf("%s.%s=%g is not allowed with an e4m3 cache; allowed: a finite value > 0", arg, field, v)
		}
		return nil
	}
	if v != 0 && v != 1 {
		return errf("%s.%s=%g is only used with an e4m3 cache; with a %s cache leave it 0", arg, field, v, cache)
	}
	return nil
}

func log2(v int) int32 { return int32(bits.TrailingZeros(uint(v))) }

func ptrOf(b Buffer) driver.DevicePtr { return b.Ptr }

func itoa(v int) string { return strconv.Itoa(v) }
