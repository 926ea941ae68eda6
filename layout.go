package pagedkv

import (
	"strconv"

	"github.com/pagedkv/pagedkv/dispatch"
)

// Cache layouts and token-major row layouts, shared by the op files: the
// layout of a paged K/V cache (CacheLayout, checkLayout), a token-major input
// at element strides (tokenRows: Append, RopeCache, QKVNormRope and the MLA
// ops), and the cache a write targets (cacheTarget: Append, RopeCache,
// QKVNormRope).

// CacheLayout is the memory layout of a paged K/V cache pair (see
// dispatch.Layout for each layout's shape). One type serves every op, the
// planner and the kernels' layout parameter.
type CacheLayout = dispatch.Layout

// The cache layouts.
const (
	LayoutFlash   = dispatch.LayoutFlash   // K and V [NumBlocks, BlockSize, NumKVHeads, HeadDim]
	LayoutXSplit  = dispatch.LayoutXSplit  // K [NumBlocks, NumKVHeads, HeadDim/x, BlockSize, x], V [NumBlocks, NumKVHeads, HeadDim, BlockSize]
	LayoutShuffle = dispatch.LayoutShuffle // K as LayoutXSplit, V [NumBlocks, NumKVHeads, BlockSize/x, HeadDim, x]
	LayoutHND     = dispatch.LayoutHND     // K and V [NumBlocks, NumKVHeads, BlockSize, HeadDim]
)

// checkLayout checks the layout and the multiples of x it needs.
func checkLayout(arg string, l CacheLayout, cache DType, headDim, blockSize int) error {
	x := 16 / cache.Size()
	switch l {
	case LayoutFlash, LayoutHND:
		return nil
	case LayoutXSplit, LayoutShuffle:
		if headDim%x != 0 {
			return errf("%s.HeadDim=%d is not allowed with the %s layout and a %s cache; allowed: a multiple of %d", arg, headDim, l, cache, x)
		}
		if l == LayoutShuffle && blockSize%x != 0 {
			return errf("%s.BlockSize=%d is not allowed with the shuffle layout and a %s cache; allowed: a multiple of %d", arg, blockSize, cache, x)
		}
		return nil
	}
	return errf("%s.Layout=%d is not supported; allowed: %s", arg, int(l), dispatch.LayoutsText)
}

// maxHNDRows bounds NumBlocks·NumKVHeads·BlockSize in the HND layout,
// whose pages the attention kernels read as the blocks of a one-head
// flash cache (block b·NumKVHeads + h is head h of block b) and index in
// 32 bits.
const maxHNDRows = int64(1) << 32

// checkAttentionLayout checks the cache layout of an attention op: every
// layout checkLayout allows, the x-split and shuffle ones with BlockSize ≥
// x (a 16-byte piece of their V is x tokens of one element, which the
// kernels load whole: 8 for 16-bit caches, 16 for e4m3), the HND one with
// NumBlocks·NumKVHeads·BlockSize ≤ 2^32 (maxHNDRows).
func checkAttentionLayout(arg string, l CacheLayout, cache DType, headDim, blockSize, numBlocks, numKVHeads int) error {
	if err := checkLayout(arg, l, cache, headDim, blockSize); err != nil || l == LayoutFlash {
		return err
	}
	if l == LayoutHND {
		if rows := int64(numBlocks) * int64(numKVHeads) * int64(blockSize); rows > maxHNDRows {
			return errf("%s.NumBlocks=%d is too large for Layout=%v with NumKVHeads=%d and BlockSize=%d; allowed: NumBlocks·NumKVHeads·BlockSize at most 2^32 (at most %d blocks)",
				arg, numBlocks, l, numKVHeads, blockSize, maxHNDRows/(int64(numKVHeads)*int64(blockSize)))
		}
		return nil
	}
	if x := 16 / cache.Size(); blockSize < x {
		return errf("%s.BlockSize=%d is not allowed with the %s layout and a %s cache; allowed: %d to 256", arg, blockSize, l, cache, x)
	}
	return nil
}

// tokenRows is a token-major input [tokens, heads, dim] at element strides,
// as an argument struct names it: field is the buffer, the other names are
// the fields that set each number (for errors).
type tokenRows struct {
	field, tokenF, headF  string
	tokensF, headsF, dimF string
	buf                   Buffer
	tokens, heads, dim    int
	token, head           int
}

// strides returns the strides in effect, once check has passed: 0 means
// contiguous, and the stride of a dimension of size 1 never moves an
// address, so it is canonicalized: one head's stride to the contiguous one,
// one token's to the heads' span.
func (r tokenRows) strides() (token, head int64) {
	head = r.headStride()
	return r.tokenStride(r.span(head)), head
}

func (r tokenRows) headStride() int64 {
	if r.head == 0 || r.heads == 1 {
		return int64(r.dim)
	}
	return int64(r.head)
}

// span is the elements one token's heads reach at head stride head (checked
// by check before strides uses it unchecked).
func (r tokenRows) span(head int64) int64 { return int64(r.heads-1)*head + int64(r.dim) }

func (r tokenRows) tokenStride(span int64) int64 {
	switch {
	case r.tokens == 1:
		return span
	case r.token == 0:
		return int64(r.heads) * int64(r.dim)
	}
	return int64(r.token)
}

// check validates the strides (multiples of 8 elements up to maxStride that
// keep heads and tokens apart) and that buf holds every element the shapes
// address, recording its span in sp with role out. The counts must already
// be in range.
func (r tokenRows) check(sp *spans, d DType, out bool) error {
	arg := sp.arg
	head := r.headStride()
	row := int64(r.dim)
	if head%8 != 0 || head < row || head > maxStride {
		return errf("%s.%s=%d is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ %s=%d and ≤ %d", arg, r.headF, r.head, r.dimF, row, maxStride)
	}
	heads := axis{int64(r.heads), head, r.headsF, r.headF}
	span, err := extent(arg, r.field, 1, row, heads)
	if err != nil {
		return err
	}
	token := r.tokenStride(span)
	if r.tokens != 1 && (token%8 != 0 || token < span || token > maxStride) {
		given := strconv.Itoa(r.token)
		if r.token == 0 {
			given = "0 (contiguous: " + strconv.FormatInt(token, 10) + ")"
		}
		return errf("%s.%s=%s is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ %d (the heads' span) and ≤ %d", arg, r.tokenF, given, span, maxStride)
	}
	if r.tokens == 0 {
		return nil
	}
	need, err := extent(arg, r.field, int64(d.Size()), row, axis{int64(r.tokens), token, r.tokensF, r.tokenF}, heads)
	if err != nil {
		return err
	}
	return sp.buffer(r.field, r.buf, need, 16, out)
}

// cacheTarget is the destination of a cache write: the caches, the slots
// and the element types.
type cacheTarget struct {
	keyCache, valueCache, slotMapping, slotRemap Buffer
	tokensF                                      string // the field that set tokens
	tokens, kvHeads, headDim, blockSize, blocks  int
	in, cache                                    DType
	kScale, vScale                               float32
	layout                                       CacheLayout
}

// check validates dtypes, shapes, layout, scales, cache capacities and the
// slot buffers, recording their spans in sp (the caches as outputs).
func (c cacheTarget) check(sp *spans) error {
	arg := sp.arg
	if c.in != F16 && c.in != BF16 {
		return errf("%s.DType=%s is not supported; allowed: f16, bf16", arg, c.in)
	}
	if c.cache != c.in && c.cache != E4M3 {
		return errf("%s.CacheDType=%s is not supported with DType=%s; allowed: %s, e4m3", arg, c.cache, c.in, c.in)
	}
	if c.headDim%8 != 0 || c.headDim < 8 || c.headDim > 256 {
		return errf("%s.HeadDim=%d is not supported; allowed: a multiple of 8 from 8 to 256", arg, c.headDim)
	}
	if err := inRange(arg, "NumKVHeads", c.kvHeads, 1, 1<<16); err != nil {
		return err
	}
	if err := inRange(arg, c.tokensF, c.tokens, 0, 1<<30); err != nil {
		return err
	}
	if err := checkPool(arg, c.blocks, c.blockSize); err != nil {
		return err
	}
	if err := checkLayout(arg, c.layout, c.cache, c.headDim, c.blockSize); err != nil {
		return err
	}
	if err := cacheScale(arg, "KScale", c.kScale, c.cache); err != nil {
		return err
	}
	if err := cacheScale(arg, "VScale", c.vScale, c.cache); err != nil {
		return err
	}
	bytes, err := size(arg, "NumBlocks·BlockSize·NumKVHeads·HeadDim", int64(c.cache.Size()),
		int64(c.blocks), int64(c.blockSize), int64(c.kvHeads), int64(c.headDim))
	if err != nil {
		return err
	}
	if err := sp.buffer("KCache", c.keyCache, bytes, 16, write); err != nil {
		return err
	}
	if err := sp.buffer("VCache", c.valueCache, bytes, 16, write); err != nil {
		return err
	}
	if c.tokens > 0 {
		if err := sp.buffer("SlotMapping", c.slotMapping, int64(c.tokens)*8, 8, read); err != nil { // tokens ≤ 2^30
			return err
		}
	}
	if !c.slotRemap.IsZero() {
		// The kernels read the whole table (NumRemap from its size).
		if err := sp.buffer("SlotRemap", c.slotRemap, c.slotRemap.Bytes, 8, read); err != nil {
			return err
		}
		if c.slotRemap.Bytes%8 != 0 {
			return errf("%s.SlotRemap holds %d bytes, not a whole number of int64 entries", arg, c.slotRemap.Bytes)
		}
	}
	return nil
}

// scales returns the scales the kernels divide by: the fp8 scales, or 1.
func (c cacheTarget) scales() (k, v float32) {
	if c.cache == E4M3 {
		return c.kScale, c.vScale
	}
	return 1, 1
}

// slotRunSamples is how many tokens slotRuns looks at: a full pass over
// 65536 slots costs about 25 µs of host time per Append (H200 host,
// 2026-12-02), more than the launch it decides.
const slotRunSamples = 256

// slotRuns reports whether slots come in runs of consecutive slots: of up
// to slotRunSamples tokens spread over the batch (after the first), at
// least 7 in 8 take the slot after their predecessor's. A prefill's
// slots in pages of 16 break a run at 1 token in 16 at most.
func slotRuns(slots []int32) bool {
	pairs := len(slots) - 1
	if pairs < 1 {
		return false
	}
	n := min(pairs, slotRunSamples)
	// An odd step, so that the samples fall on every offset within pages
	// (whose sizes are powers of two) rather than on one.
	step := max(pairs/n, 1) | 1
	hits := 0
	for i := range n {
		t := 1 + (i*step)%pairs
		if slots[t] == slots[t-1]+1 {
			hits++
		}
	}
	return 8*hits >= 7*n
}
