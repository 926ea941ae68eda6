package pagedkv

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Validation helpers shared by the argument structs. Each names the struct
// and field in its error, with the value and what is allowed.
//
// Every size and extent a Validate method compares with a buffer goes
// through one checked path: mul64 and add64 fail instead of wrapping, size
// multiplies the dimensions of a contiguous tensor, and extent finds the last
// byte of a strided one. Each count and stride also has an upper bound that
// fits the kernels' parameter types: counts the kernels hold in 32-bit ints
// (token, head and sequence counts and indices) stay far below 2^31, and the
// int64 strides below maxStride, so the kernels' own index arithmetic cannot
// overflow for any value Validate accepts.

// ErrInvalidArgument is matched (errors.Is) by every error that rejects an
// argument before anything reaches the GPU: each Validate method, the ops
// that call them, Buffer.Slice and the host copies and conversions.
var ErrInvalidArgument = errors.New("pagedkv: invalid argument")

// argError is a validation error: its text names the argument, and it
// matches ErrInvalidArgument.
type argError struct{ err error }

func (e *argError) Error() string   { return e.err.Error() }
func (e *argError) Unwrap() []error { return []error{ErrInvalidArgument, e.err} }

// errf returns a validation error (it wraps ErrInvalidArgument) whose text is
// "pagedkv: " and the formatted message.
func errf(format string, a ...any) error {
	return &argError{fmt.Errorf("pagedkv: "+format, a...)}
}

// maxElems bounds element counts so that byte sizes fit in int64 with room.
const maxElems = int64(1) << 56

// maxStride bounds every element stride an argument struct takes. The
// kernels take strides as int64 and form index·stride from token indices
// below 2^30 and head or sequence indices below 2^16: with strides up to
// 2^31 elements (4 GiB of f16 between two rows, more than any real layout
// spans) no such address, in bytes, comes near 2^63.
const maxStride = int64(1) << 31

// mul64 returns a·b of two non-negative values, and false when it does not
// fit in int64 (or an operand is negative).
func mul64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// add64 returns a+b of two non-negative values, and false when it does not
// fit in int64 (or an operand is negative).
func add64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}

// size returns the bytes of a contiguous tensor: the product of counts,
// element counts whose fields what names ("NumTokens·NumQHeads·HeadDim"),
// times esize. Past maxElems elements it is an error that names the first
// count's field and the largest value it may take with the others as given.
func size(arg, what string, esize int64, counts ...int64) (int64, error) {
	p := int64(1)
	ok := true
	for _, c := range counts {
		if p, ok = mul64(p, c); !ok || p > maxElems {
			ok = false
			break
		}
	}
	if ok {
		if bytes, ok := mul64(p, esize); ok {
			return bytes, nil
		}
	}
	first, _, _ := strings.Cut(what, "·")
	rest := int64(1)
	for _, c := range counts[1:] {
		rest = satMul(rest, max(c, 1))
	}
	return 0, errf("%s.%s=%d is too large: %s is more than 2^56 elements; allowed: at most %d with the other sizes as given",
		arg, first, counts[0], what, maxElems/rest)
}

// satMul and satAdd are mul64 and add64 that stop at math.MaxInt64, for
// the bounds error texts quote.
func satMul(a, b int64) int64 {
	if p, ok := mul64(a, b); ok {
		return p
	}
	return math.MaxInt64
}

func satAdd(a, b int64) int64 {
	if s, ok := add64(a, b); ok {
		return s
	}
	return math.MaxInt64
}

// axis is one strided dimension of a tensor argument: count items stride
// elements apart, and the fields that set them.
type axis struct {
	count, stride   int64
	countF, strideF string
}

// extent returns how many bytes from its first element a strided tensor of
// esize-byte elements reaches: rows of row elements at every index of axes,
// (Σ (count−1)·stride + row)·esize; 0 when a count is 0. Counts and strides
// must be non-negative (the callers check them first). Every step is checked:
// a tensor reaching past 2^63 bytes is an error for field (the buffer) of
// arg that names the stride and count of the axis reaching farthest, and
// the largest stride that axis may have with the others as given.
func extent(arg, field string, esize, row int64, axes ...axis) (int64, error) {
	for _, ax := range axes {
		if ax.count == 0 {
			return 0, nil
		}
	}
	last, ok := row, row >= 0
	worst := -1
	var worstTerm int64
	for i, ax := range axes {
		term, fits := mul64(ax.count-1, ax.stride)
		if !fits {
			term = math.MaxInt64
		}
		if worst < 0 || term > worstTerm {
			worst, worstTerm = i, term
		}
		if ok {
			last, ok = add64(last, term)
		}
		ok = ok && fits
	}
	if ok {
		if bytes, fits := mul64(last, esize); fits {
			return bytes, nil
		}
	}
	if worst < 0 {
		return 0, errf("%s.%s: a row of %d elements of %d bytes is more than 2^63 bytes", arg, field, row, esize)
	}
	// The rest of the extent, without the worst axis, in elements.
	rest := max(row, 0)
	for i, ax := range axes {
		if i != worst {
			rest = satAdd(rest, satMul(ax.count-1, ax.stride))
		}
	}
	ax := axes[worst]
	limit := max(math.MaxInt64/max(esize, 1)-rest, 0) / max(ax.count-1, 1)
	return 0, errf("%s.%s=%d is too large with %s=%d: %s would span more than 2^63 bytes; allowed: at most %d with the other sizes as given",
		arg, ax.strideF, ax.stride, ax.countF, ax.count, field, limit)
}

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
	if b.Bytes < 0 {
		return errf("%s.%s holds %d bytes; allowed: a size ≥ 0", arg, field, b.Bytes)
	}
	if uint64(b.Ptr)+uint64(b.Bytes) < uint64(b.Ptr) {
		return errf("%s.%s at %#x with %d bytes runs past the end of the address space", arg, field, uintptr(b.Ptr), b.Bytes)
	}
	if b.Bytes < need {
		return errf("%s.%s holds %d bytes; the shapes need %d", arg, field, b.Bytes, need)
	}
	return nil
}

// inRange checks lo ≤ v ≤ hi.
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

func itoa(v int) string { return strconv.Itoa(v) }
