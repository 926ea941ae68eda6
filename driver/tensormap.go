package driver

import (
	"fmt"
	"runtime"
	"unsafe"
)

// TensorMap is a CUtensorMap: the 128-byte opaque descriptor with which the
// Tensor Memory Accelerator of compute capability 9.0 and later copies tiles
// between global and shared memory (cp.async.bulk.tensor). The host encodes
// it with EncodeTensorMapTiled; a kernel takes it by value, as a
// __grid_constant__ const CUtensorMap parameter (.param .align 64 .b8 [128]
// in PTX), so the driver copies its bytes into the kernel's parameter space at
// launch and the Go value may be reused at once.
//
// The driver writes a CUtensorMap only at a 64-byte-aligned address, while Go
// aligns a [16]uint64 to 8 bytes; EncodeTensorMapTiled encodes into an
// aligned scratch block and returns a copy, so a TensorMap may live anywhere.
// Treat the words as opaque: only the driver and PTX give them meaning.
type TensorMap [16]uint64

// TensorMapDataType is a CUtensorMapDataType: the element type of the tensor
// a TensorMap describes.
type TensorMapDataType int32

// CUtensorMapDataType values (ABI; from cuda.h, CUDA 12.0).
const (
	TensorMapUint8       TensorMapDataType = 0  // 1 byte
	TensorMapUint16      TensorMapDataType = 1  // 2 bytes
	TensorMapUint32      TensorMapDataType = 2  // 4 bytes
	TensorMapInt32       TensorMapDataType = 3  // 4 bytes
	TensorMapUint64      TensorMapDataType = 4  // 8 bytes
	TensorMapInt64       TensorMapDataType = 5  // 8 bytes
	TensorMapFloat16     TensorMapDataType = 6  // 2 bytes
	TensorMapFloat32     TensorMapDataType = 7  // 4 bytes
	TensorMapFloat64     TensorMapDataType = 8  // 8 bytes
	TensorMapBFloat16    TensorMapDataType = 9  // 2 bytes
	TensorMapFloat32FTZ  TensorMapDataType = 10 // 4 bytes, denormals flushed to zero
	TensorMapTFloat32    TensorMapDataType = 11 // 4 bytes
	TensorMapTFloat32FTZ TensorMapDataType = 12 // 4 bytes, denormals flushed to zero
)

// tensorMapElementBytes is the element size of each TensorMapDataType, and
// tensorMapFloat whether it is a floating-point type.
var (
	tensorMapElementBytes = [...]uint64{1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4}
	tensorMapFloat        = [...]bool{false, false, false, false, false, false, true, true, true, true, true, true, true}
)

// TensorMapInterleave is a CUtensorMapInterleave: whether the tensor's
// innermost dimension is stored interleaved in 16- or 32-byte chunks (as
// NC/8HWC8 layouts are); TensorMapInterleaveNone for ordinary strided
// tensors.
type TensorMapInterleave int32

// CUtensorMapInterleave values (ABI; from cuda.h).
const (
	TensorMapInterleaveNone TensorMapInterleave = 0
	TensorMapInterleave16B  TensorMapInterleave = 1
	TensorMapInterleave32B  TensorMapInterleave = 2
)

// TensorMapSwizzle is a CUtensorMapSwizzle: how the copy permutes 16-byte
// chunks within each 32-, 64- or 128-byte span of a shared-memory row, so
// that reading the tile by columns avoids bank conflicts. wgmma's shared
// memory descriptors name the same patterns.
type TensorMapSwizzle int32

// CUtensorMapSwizzle values (ABI; from cuda.h).
const (
	TensorMapSwizzleNone TensorMapSwizzle = 0
	TensorMapSwizzle32B  TensorMapSwizzle = 1
	TensorMapSwizzle64B  TensorMapSwizzle = 2
	TensorMapSwizzle128B TensorMapSwizzle = 3
)

// TensorMapL2Promotion is a CUtensorMapL2promotion: the size of the L2
// requests the copy widens its reads to.
type TensorMapL2Promotion int32

// CUtensorMapL2promotion values (ABI; from cuda.h).
const (
	TensorMapL2PromotionNone TensorMapL2Promotion = 0
	TensorMapL2Promotion64B  TensorMapL2Promotion = 1
	TensorMapL2Promotion128B TensorMapL2Promotion = 2
	TensorMapL2Promotion256B TensorMapL2Promotion = 3
)

// TensorMapOOBFill is a CUtensorMapFloatOOBfill: what a copy writes to
// shared memory for box elements outside the tensor.
type TensorMapOOBFill int32

// CUtensorMapFloatOOBfill values (ABI; from cuda.h).
const (
	// TensorMapOOBFillNone fills out-of-bounds elements with zeros.
	TensorMapOOBFillNone TensorMapOOBFill = 0
	// TensorMapOOBFillNaNRequestZeroFMA fills them with a NaN that the FMA
	// units treat as zero; floating-point data types only.
	TensorMapOOBFillNaNRequestZeroFMA TensorMapOOBFill = 1
)

// Limits of cuTensorMapEncodeTiled's arguments, as the CUDA driver API
// documents them.
const (
	tensorMapMaxRank          = 5
	tensorMapMaxDim           = 1 << 32 // globalDim[i] <= 2^32
	tensorMapStrideLimit      = 1 << 40 // globalStrides[i] < 2^40
	tensorMapMaxBox           = 256
	tensorMapMaxElementStride = 8
)

// TensorMapTiled describes a tiled tensor map: a tensor of Dims elements in
// global memory at Address, and the box of Box elements that one
// cp.async.bulk.tensor copies to or from shared memory. Dimension 0 is the
// innermost (contiguous) one: a row-major [rows, cols] matrix has
// Dims = {cols, rows}, Strides = {rowBytes}.
type TensorMapTiled struct {
	DataType TensorMapDataType
	// Address is the tensor's first element: a multiple of 16 bytes (32 with
	// TensorMapInterleave32B).
	Address DevicePtr
	// Dims are the tensor's sizes in elements, innermost first: 1 to 5 of
	// them (the rank; 3 to 5 when interleaved), each 1..2^32.
	Dims []uint64
	// Strides are the byte strides of dimensions 1..rank−1 (dimension 0 is
	// contiguous), rank−1 entries, each a multiple of 16 (32 with
	// TensorMapInterleave32B) and below 2^40.
	Strides []uint64
	// Box is the tile a copy moves, in elements per dimension, rank entries
	// of 1..256. Without interleave, Box[0] times the element size must be a
	// multiple of 16 bytes, and at most the swizzle span (32, 64 or 128
	// bytes) when Swizzle is not TensorMapSwizzleNone.
	Box []uint32
	// ElementStrides are the steps, in elements, with which a copy walks
	// each dimension of the box: rank entries of 1..8, or nil for all 1.
	ElementStrides []uint32
	// Interleave is TensorMapInterleaveNone unless the tensor is stored
	// interleaved; TensorMapInterleave32B needs Swizzle = TensorMapSwizzle32B.
	Interleave  TensorMapInterleave
	Swizzle     TensorMapSwizzle
	L2Promotion TensorMapL2Promotion
	// OOBFill is TensorMapOOBFillNone (zeros) or, for floating-point data
	// types only, TensorMapOOBFillNaNRequestZeroFMA.
	OOBFill TensorMapOOBFill
}

// Validate checks t against every constraint the CUDA driver API documents
// for cuTensorMapEncodeTiled, without calling the driver. The error names the
// field as TensorMapTiled spells it, its value and what is allowed, and
// matches ErrInvalidArgument.
func (t *TensorMapTiled) Validate() error {
	rank := len(t.Dims)
	if rank < 1 || rank > tensorMapMaxRank {
		return argError("len(TensorMapTiled.Dims)=%d; want 1..%d (the tensor's rank)", rank, tensorMapMaxRank)
	}
	if len(t.Strides) != rank-1 {
		return argError("len(TensorMapTiled.Strides)=%d; want %d (rank−1: the byte strides of dimensions 1..rank−1)",
			len(t.Strides), rank-1)
	}
	if len(t.Box) != rank {
		return argError("len(TensorMapTiled.Box)=%d; want %d (the rank)", len(t.Box), rank)
	}
	if n := len(t.ElementStrides); n != 0 && n != rank {
		return argError("len(TensorMapTiled.ElementStrides)=%d; want %d (the rank), or 0 for all 1", n, rank)
	}
	if t.DataType < TensorMapUint8 || t.DataType > TensorMapTFloat32FTZ {
		return argError("TensorMapTiled.DataType=%d; want %d..%d (TensorMapUint8..TensorMapTFloat32FTZ)",
			t.DataType, TensorMapUint8, TensorMapTFloat32FTZ)
	}
	if t.Interleave < TensorMapInterleaveNone || t.Interleave > TensorMapInterleave32B {
		return argError("TensorMapTiled.Interleave=%d; want %d..%d (TensorMapInterleaveNone, TensorMapInterleave16B or TensorMapInterleave32B)",
			t.Interleave, TensorMapInterleaveNone, TensorMapInterleave32B)
	}
	if t.Swizzle < TensorMapSwizzleNone || t.Swizzle > TensorMapSwizzle128B {
		return argError("TensorMapTiled.Swizzle=%d; want %d..%d (TensorMapSwizzleNone, TensorMapSwizzle32B, TensorMapSwizzle64B or TensorMapSwizzle128B)",
			t.Swizzle, TensorMapSwizzleNone, TensorMapSwizzle128B)
	}
	if t.L2Promotion < TensorMapL2PromotionNone || t.L2Promotion > TensorMapL2Promotion256B {
		return argError("TensorMapTiled.L2Promotion=%d; want %d..%d (TensorMapL2PromotionNone, TensorMapL2Promotion64B, TensorMapL2Promotion128B or TensorMapL2Promotion256B)",
			t.L2Promotion, TensorMapL2PromotionNone, TensorMapL2Promotion256B)
	}
	if t.OOBFill < TensorMapOOBFillNone || t.OOBFill > TensorMapOOBFillNaNRequestZeroFMA {
		return argError("TensorMapTiled.OOBFill=%d; want %d..%d (TensorMapOOBFillNone or TensorMapOOBFillNaNRequestZeroFMA)",
			t.OOBFill, TensorMapOOBFillNone, TensorMapOOBFillNaNRequestZeroFMA)
	}
	if t.Interleave != TensorMapInterleaveNone && rank < 3 {
		return argError("TensorMapTiled.Interleave=%d with len(TensorMapTiled.Dims)=%d; an interleaved tensor needs rank 3..%d",
			t.Interleave, rank, tensorMapMaxRank)
	}
	if t.Interleave == TensorMapInterleave32B && t.Swizzle != TensorMapSwizzle32B {
		return argError("TensorMapTiled.Swizzle=%d with Interleave=TensorMapInterleave32B; want TensorMapSwizzle32B (%d)",
			t.Swizzle, TensorMapSwizzle32B)
	}
	if t.OOBFill == TensorMapOOBFillNaNRequestZeroFMA && !tensorMapFloat[t.DataType] {
		return argError("TensorMapTiled.OOBFill=TensorMapOOBFillNaNRequestZeroFMA with DataType=%d; want a floating-point DataType (%d..%d), or TensorMapOOBFillNone",
			t.DataType, TensorMapFloat16, TensorMapTFloat32FTZ)
	}
	align := uint64(16)
	if t.Interleave == TensorMapInterleave32B {
		align = 32
	}
	if uint64(t.Address)%align != 0 {
		return argError("TensorMapTiled.Address=%#x; want a multiple of %d bytes", uint64(t.Address), align)
	}
	for i, d := range t.Dims {
		if d < 1 || d > tensorMapMaxDim {
			return argError("TensorMapTiled.Dims[%d]=%d; want 1..2^32", i, d)
		}
	}
	for i, s := range t.Strides {
		if s%align != 0 || s >= tensorMapStrideLimit {
			return argError("TensorMapTiled.Strides[%d]=%d; want a multiple of %d bytes below 2^40", i, s, align)
		}
	}
	for i, b := range t.Box {
		if b < 1 || b > tensorMapMaxBox {
			return argError("TensorMapTiled.Box[%d]=%d; want 1..%d", i, b, tensorMapMaxBox)
		}
	}
	for i, e := range t.ElementStrides {
		if e < 1 || e > tensorMapMaxElementStride {
			return argError("TensorMapTiled.ElementStrides[%d]=%d; want 1..%d", i, e, tensorMapMaxElementStride)
		}
	}
	if t.Interleave == TensorMapInterleaveNone {
		size := tensorMapElementBytes[t.DataType]
		inner := uint64(t.Box[0]) * size
		if inner%16 != 0 {
			return argError("TensorMapTiled.Box[0]=%d elements of %d bytes is %d bytes; want a multiple of 16 bytes",
				t.Box[0], size, inner)
		}
		if t.Swizzle != TensorMapSwizzleNone {
			span := uint64(16) << t.Swizzle // 32, 64 or 128 bytes
			if inner > span {
				return argError("TensorMapTiled.Box[0]=%d elements of %d bytes is %d bytes; want at most %d bytes with Swizzle=TensorMapSwizzle%dB",
					t.Box[0], size, inner, span, span)
			}
		}
	}
	return nil
}

// EncodeTensorMapTiled encodes the tiled tensor map t describes
// (cuTensorMapEncodeTiled) for kernels of compute capability 9.0 and later
// to copy with. It checks t with Validate before calling the driver, so an
// argument the driver documents as invalid never reaches it; the driver may
// still refuse a combination it does not document, with an *Error. Call it
// inside Context.Do: the driver lists CUDA_ERROR_INVALID_CONTEXT among the
// function's results.
//
// cuTensorMapEncodeTiled exists in drivers from CUDA 12.0 on; with an older
// driver the error wraps ErrNotSupported.
//
// # Memory
//
// The map holds t.Address, not the memory: the tensor must stay allocated
// while kernels use the map. The Go slices of t are copied into one heap
// block together with the output, which is 64-byte aligned inside it as the
// driver requires, and kept alive for the call; nothing of t is retained.
//
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html
func EncodeTensorMapTiled(t TensorMapTiled) (TensorMap, error) {
	if err := t.Validate(); err != nil {
		return TensorMap{}, err
	}
	if err := Init(); err != nil {
		return TensorMap{}, err
	}
	return encodeTensorMapTiledWith(cuTensorMapEncodeTiled, &t)
}

// tensorMapCall is the heap block one encode hands the driver: the argument
// arrays, and out, which holds a 64-byte-aligned 128-byte window whatever
// the 8-byte-aligned address the allocator gives it (at most 56 bytes in).
type tensorMapCall struct {
	out            [len(TensorMap{}) + 7]uint64
	dims           [tensorMapMaxRank]uint64
	strides        [tensorMapMaxRank]uint64 // rank−1 used; never empty, so rank 1 passes a valid pointer
	box            [tensorMapMaxRank]uint32
	elementStrides [tensorMapMaxRank]uint32
}

// aligned returns the 64-byte-aligned TensorMap inside c.out.
func (c *tensorMapCall) aligned() *TensorMap {
	p := unsafe.Pointer(&c.out[0])
	return (*TensorMap)(unsafe.Add(p, -uintptr(p)&63))
}

// encodeTensorMapTiledWith encodes the validated t through call
// (cuTensorMapEncodeTiled, or a fake in tests); a nil call is a driver that
// lacks the function.
func encodeTensorMapTiledWith(call tensorMapEncodeTiledFunc, t *TensorMapTiled) (TensorMap, error) {
	if call == nil {
		return TensorMap{}, fmt.Errorf("%w: the driver lacks cuTensorMapEncodeTiled, which drivers for CUDA 12.0 and later have; install a newer NVIDIA driver",
			ErrNotSupported)
	}
	c := new(tensorMapCall)
	rank := copy(c.dims[:], t.Dims)
	copy(c.strides[:], t.Strides)
	copy(c.box[:], t.Box)
	if len(t.ElementStrides) == 0 {
		for i := range rank {
			c.elementStrides[i] = 1
		}
	} else {
		copy(c.elementStrides[:], t.ElementStrides)
	}
	out := c.aligned()
	r := call(out, t.DataType, uint32(rank), t.Address, &c.dims[0], &c.strides[0], &c.box[0], &c.elementStrides[0],
		t.Interleave, t.Swizzle, t.L2Promotion, t.OOBFill)
	runtime.KeepAlive(c)
	if err := check("cuTensorMapEncodeTiled", r); err != nil {
		return TensorMap{}, err
	}
	return *out, nil
}
