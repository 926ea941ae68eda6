package pagedkv

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/pagedkv/pagedkv/dispatch"
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

// maxPoolRows bounds NumBlocks·BlockSize, the slots of a paged cache, in
// every op: every slot and pool row fits an int32, so one host index type
// ([]int32) serves every op, and the kernels index pool rows in 32 bits. A
// pool of 2^31 slots is terabytes per layer, beyond any GPU.
const maxPoolRows = int64(math.MaxInt32)

// checkPool checks BlockSize and NumBlocks of a paged cache, the same way in
// every op.
func checkPool(arg string, numBlocks, blockSize int) error {
	if err := powerOfTwo(arg, "BlockSize", blockSize, 1, 256); err != nil {
		return err
	}
	if err := inRange(arg, "NumBlocks", numBlocks, 1, math.MaxInt32); err != nil {
		return err
	}
	if int64(numBlocks)*int64(blockSize) > maxPoolRows {
		return errf("%s.NumBlocks=%d is too large for BlockSize=%d; allowed: NumBlocks·BlockSize at most 2^31−1 (at most %d blocks)",
			arg, numBlocks, blockSize, maxPoolRows/int64(blockSize))
	}
	return nil
}

// maxDecodeSeqs is DecodeArgs' largest NumSeqs (the decode grid's y); a
// mixed Varlen runs at most this many leading sequences as a decode.
const maxDecodeSeqs = 65535

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

// ErrAliasing is matched (errors.Is) by the error of an op whose output
// overlaps another buffer it touches; it wraps ErrInvalidArgument.
var ErrAliasing = &aliasSentinel{}

type aliasSentinel struct{}

func (*aliasSentinel) Error() string { return "pagedkv: buffers overlap" }
func (*aliasSentinel) Unwrap() error { return ErrInvalidArgument }

// aliasError names the two overlapping buffers; it matches ErrAliasing and
// through it ErrInvalidArgument.
type aliasError struct{ msg string }

func (e *aliasError) Error() string { return e.msg }
func (e *aliasError) Unwrap() error { return ErrAliasing }

// Buffer roles for spans.
const (
	read  = false // an input: inputs may overlap one another
	write = true  // an output: it may overlap nothing else the op touches
)

// touch is the bytes one buffer of an op touches: from its pointer to the
// last byte its shape reaches (for a strided tensor every byte in between
// counts).
type touch struct {
	field  string
	lo, hi uint64 // [lo, hi)
	out    bool
}

// spans collects the spans of one call's buffers as Validate checks them,
// then checks that no output overlaps another buffer. Its array is sized
// for the op with the most buffers (RopeCacheArgs: 13).
type spans struct {
	arg string
	n   int
	s   [16]touch
}

// buffer is buffer() that records b's first need bytes as a span.
func (sp *spans) buffer(field string, b Buffer, need int64, align uintptr, out bool) error {
	if err := buffer(sp.arg, field, b, need, align); err != nil {
		return err
	}
	sp.add(field, b, need, out)
	return nil
}

// add records the first n bytes of b (checked against b.Bytes) as a span.
// An empty span overlaps nothing.
func (sp *spans) add(field string, b Buffer, n int64, out bool) {
	if n <= 0 || sp.n == len(sp.s) {
		return
	}
	sp.s[sp.n] = touch{field: field, lo: uint64(b.Ptr), hi: uint64(b.Ptr) + uint64(n), out: out}
	sp.n++
}

// check returns an ErrAliasing error for the first output that overlaps
// another span, naming both fields and their byte ranges.
func (sp *spans) check() error {
	for i := range sp.n {
		for j := i + 1; j < sp.n; j++ {
			a, b := &sp.s[i], &sp.s[j]
			if !a.out && !b.out || a.hi <= b.lo || b.hi <= a.lo {
				continue
			}
			if !a.out {
				a, b = b, a
			}
			return &argError{&aliasError{fmt.Sprintf("pagedkv: %s.%s [%#x, %#x) overlaps %s.%s [%#x, %#x); allowed: an output that overlaps no other buffer of the call (the inputs may overlap one another)",
				sp.arg, a.field, a.lo, a.hi, sp.arg, b.field, b.lo, b.hi)}}
		}
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

// pagedAttention is what the attention ops (decode, varlen) share of their
// arguments: the query and cache types, the heads, the paged cache and its
// block tables, the KV lengths a plan may be made for, the workspace and the
// scales. Its checks run in the order the ops' own checks interleave with.
type pagedAttention struct {
	arg                            string // the argument struct's name, for errors
	dtype, cacheDType              DType
	headDim, numQHeads, numKVHeads int
	maxKVHeads                     int // the grid dimension the KV heads run on allows
	numSeqs                        int // rows of BlockTables (checked by the op)
	blockSize, numBlocks           int
	maxBlocksPerSeq                int
	maxKVLen, kvCapacity           int
	keyCache, valueCache           Buffer
	blockTables, workspace         Buffer
	scale, kScale, vScale          float32
}

// types checks the dtypes and the head dim.
func (p *pagedAttention) types() error {
	if p.dtype != F16 && p.dtype != BF16 {
		return errf("%s.DType=%s is not supported; allowed: f16, bf16", p.arg, p.dtype)
	}
	if p.cacheDType != p.dtype && p.cacheDType != E4M3 {
		return errf("%s.CacheDType=%s is not supported with DType=%s; allowed: %s, e4m3", p.arg, p.cacheDType, p.dtype, p.dtype)
	}
	switch p.headDim {
	case 64, 128, 256:
	case 80, 96, 112, 120, 192:
		if p.cacheDType == E4M3 && p.headDim != 96 && p.headDim != 192 {
			return errf("%s.HeadDim=%d is not supported with CacheDType=e4m3; allowed there: %s", p.arg, p.headDim, dispatch.FP8HeadDimsText)
		}
	default:
		return errf("%s.HeadDim=%d is not supported; allowed: %s", p.arg, p.headDim, dispatch.HeadDimsText)
	}
	return nil
}

// heads checks the KV heads and the GQA group (1..16 query heads per KV
// head).
func (p *pagedAttention) heads() error {
	if err := inRange(p.arg, "NumKVHeads", p.numKVHeads, 1, p.maxKVHeads); err != nil {
		return err
	}
	if p.numQHeads < 1 {
		return errf("%s.NumQHeads=%d is out of range; allowed: a multiple of NumKVHeads=%d from %d to %d", p.arg, p.numQHeads, p.numKVHeads, p.numKVHeads, 16*p.numKVHeads)
	}
	if p.numQHeads%p.numKVHeads != 0 {
		return errf("%s.NumQHeads=%d is not a multiple of NumKVHeads=%d", p.arg, p.numQHeads, p.numKVHeads)
	}
	if g := p.numQHeads / p.numKVHeads; g > 16 {
		return errf("%s.NumQHeads/NumKVHeads=%d is not supported; allowed: a group size from 1 to 16", p.arg, g)
	}
	return nil
}

// pages checks the block size, the pool, the block tables' width and the
// KV lengths planned for.
func (p *pagedAttention) pages() error {
	if err := checkPool(p.arg, p.numBlocks, p.blockSize); err != nil {
		return err
	}
	// The kernels hold token positions in int32, and the decode's split
	// arithmetic reaches up to MaxSplits−1 pages and a tile past the table's
	// end (the guessed start of the last split): a bound well below 2^31
	// keeps every one of them exact.
	if p.maxBlocksPerSeq < 1 || p.maxBlocksPerSeq > dispatch.MaxSeqTokens/p.blockSize {
		return errf("%s.MaxBlocksPerSeq=%d is out of range; allowed: 1..%d (MaxBlocksPerSeq·BlockSize at most 2^30 tokens)",
			p.arg, p.maxBlocksPerSeq, dispatch.MaxSeqTokens/p.blockSize)
	}
	capTokens := p.maxBlocksPerSeq * p.blockSize
	if p.maxKVLen < 0 || p.maxKVLen > capTokens {
		return errf("%s.MaxKVLen=%d is not allowed; allowed: 0..MaxBlocksPerSeq·BlockSize=%d", p.arg, p.maxKVLen, capTokens)
	}
	if p.kvCapacity < 0 || p.kvCapacity > capTokens {
		return errf("%s.KVCapacity=%d is not allowed; allowed: 0 (KV_CAPACITY) or 1..MaxBlocksPerSeq·BlockSize=%d", p.arg, p.kvCapacity, capTokens)
	}
	return nil
}

// scalars checks the workspace's alignment and the scales.
func (p *pagedAttention) scalars(sp *spans) error {
	if !p.workspace.IsZero() {
		if err := buffer(p.arg, "Workspace", p.workspace, 1, 256); err != nil {
			return err
		}
		// The plan decides how much of it a call uses: all of it counts.
		sp.add("Workspace", p.workspace, p.workspace.Bytes, write)
	}
	if p.scale < 0 || math.IsNaN(float64(p.scale)) || math.IsInf(float64(p.scale), 0) {
		return errf("%s.Scale=%g is not allowed; allowed: 0 (1/√HeadDim) or a finite value > 0", p.arg, p.scale)
	}
	if err := cacheScale(p.arg, "KScale", p.kScale, p.cacheDType); err != nil {
		return err
	}
	return cacheScale(p.arg, "VScale", p.vScale, p.cacheDType)
}

// caches checks that the caches hold the pool and BlockTables the tables.
func (p *pagedAttention) caches(sp *spans) error {
	cbytes, err := size(p.arg, "NumBlocks·BlockSize·NumKVHeads·HeadDim", int64(p.cacheDType.Size()),
		int64(p.numBlocks), int64(p.blockSize), int64(p.numKVHeads), int64(p.headDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("KCache", p.keyCache, cbytes, 16, read); err != nil {
		return err
	}
	if err := sp.buffer("VCache", p.valueCache, cbytes, 16, read); err != nil {
		return err
	}
	tableBytes, err := size(p.arg, "NumSeqs·MaxBlocksPerSeq", 4, int64(p.numSeqs), int64(p.maxBlocksPerSeq))
	if err != nil {
		return err
	}
	return sp.buffer("BlockTables", p.blockTables, tableBytes, 4, read)
}

// qRows checks a token- (or sequence-) major q of rows rows at stride
// (elements; 0 = contiguous) named strideField: every row 16-byte aligned
// and wide enough for its heads, and the buffer large enough. It returns
// the stride in effect.
func (p *pagedAttention) qRows(sp *spans, q Buffer, rows int, stride int, rowsField, strideField string) (int64, error) {
	rowElems := int64(p.numQHeads) * int64(p.headDim)
	qs := p.qStride(stride)
	if qs < rowElems || qs%8 != 0 || qs > maxStride {
		return 0, errf("%s.%s=%d is not allowed; allowed: 0 (contiguous) or a multiple of 8 (16-byte rows) ≥ NumQHeads·HeadDim=%d and ≤ %d",
			p.arg, strideField, stride, rowElems, maxStride)
	}
	if rows == 0 {
		return qs, nil
	}
	qBytes, err := extent(p.arg, "Q", int64(p.dtype.Size()), rowElems, axis{int64(rows), qs, rowsField, strideField})
	if err != nil {
		return 0, err
	}
	return qs, sp.buffer("Q", q, qBytes, 16, read)
}

// graphCapacity returns the KV length a graph that captures an attention
// call is planned for: the call's KVCapacity, else the runtime's
// KV_CAPACITY (configured).
func graphCapacity(kvCapacity, configured int) int {
	if kvCapacity > 0 {
		return kvCapacity
	}
	return configured
}

// checkGraphCapacity checks that block tables of maxBlocksPerSeq pages of
// blockSize tokens hold that capacity, for the attention call op whose
// argument struct is arg.
func checkGraphCapacity(arg, op string, maxBlocksPerSeq, blockSize, kvCapacity, configured int) error {
	c := graphCapacity(kvCapacity, configured)
	if have := maxBlocksPerSeq * blockSize; have < c {
		return errf("%s.MaxBlocksPerSeq·BlockSize=%d is below the capacity %d (%s.KVCapacity, else KV_CAPACITY): a %s captured into a graph is planned for its capacity, so its block tables must hold that many tokens", arg, have, c, arg, op)
	}
	return nil
}
