package dispatch

import (
	"fmt"
	"strconv"
)

// DType is the element type of a tensor that a kernel reads or writes. The
// zero value is not a valid type, so a shape that forgets to set one fails
// validation instead of silently meaning f16.
type DType uint8

// The element types the kernels support.
const (
	F16  DType = iota + 1 // IEEE half precision
	BF16                  // bfloat16
	E4M3                  // fp8 e4m3 (OCP FP8, finite-only); caches and MLA quantized outputs, never queries
)

// String returns the name used in kernel entry points: "f16", "bf16", "e4m3".
func (d DType) String() string {
	switch d {
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case E4M3:
		return "e4m3"
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// Size returns the size of one element in bytes, or 0 for an invalid DType.
func (d DType) Size() int {
	switch d {
	case F16, BF16:
		return 2
	case E4M3:
		return 1
	}
	return 0
}

// Valid reports whether d is one of F16, BF16, E4M3.
func (d DType) Valid() bool { return d >= F16 && d <= E4M3 }

// ParseDType returns the DType whose String is s.
func ParseDType(s string) (DType, error) {
	for _, d := range [...]DType{F16, BF16, E4M3} {
		if s == d.String() {
			return d, nil
		}
	}
	return 0, fmt.Errorf("dispatch: dtype %q is not supported; supported: f16, bf16, e4m3", s)
}

// Layout is the memory layout of a paged K/V cache pair; pagedkv.CacheLayout
// is this type. x is 16 bytes over the cache element size: 8 for f16/bf16,
// 16 for fp8.
type Layout int

// The cache layouts.
const (
	// LayoutFlash: K and V [NumBlocks, BlockSize, NumKVHeads, HeadDim].
	LayoutFlash Layout = iota
	// LayoutXSplit (vLLM's "paged" layout): K [NumBlocks, NumKVHeads,
	// HeadDim/x, BlockSize, x], V [NumBlocks, NumKVHeads, HeadDim, BlockSize].
	// HeadDim must be a multiple of x.
	LayoutXSplit
	// LayoutShuffle: K as LayoutXSplit, V [NumBlocks, NumKVHeads,
	// BlockSize/x, HeadDim, x]. HeadDim and BlockSize must be multiples of x.
	LayoutShuffle
	// LayoutHND (FlashInfer's "HND"): K and V [NumBlocks, NumKVHeads,
	// BlockSize, HeadDim]; slot s is row s mod BlockSize of block
	// s/BlockSize, as in the flash layout. It takes what LayoutFlash
	// takes. The attention kernels (and their plans: a plan made for
	// either layout runs both) read it as the flash layout of a one-head
	// cache whose block b·NumKVHeads + h is head h of block b, in 32-bit
	// rows, so Decode and Varlen bound NumBlocks · NumKVHeads · BlockSize
	// to 2^32; the cache writes address it directly, without that bound.
	LayoutHND
)

// String returns "flash", "x-split", "shuffle" or "HND".
func (l Layout) String() string {
	switch l {
	case LayoutFlash:
		return "flash"
	case LayoutXSplit:
		return "x-split"
	case LayoutShuffle:
		return "shuffle"
	case LayoutHND:
		return "HND"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// LayoutsText names the layouts every op takes, for errors.
const LayoutsText = "LayoutFlash, LayoutXSplit, LayoutShuffle, LayoutHND"

// Laid reports whether l is the x-split or the shuffle layout, whose
// pages the kernels read and write as tiles of their own; the flash and
// HND layouts keep each token's row of a head contiguous and share the
// flash layout's kernels.
func (l Layout) Laid() bool { return l == LayoutXSplit || l == LayoutShuffle }

// known reports whether l is one of the layouts above.
func (l Layout) known() bool { return l >= LayoutFlash && l <= LayoutHND }
