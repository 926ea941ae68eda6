package driver

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validTiled is a bf16 [rows=1024, cols=4096] row-major matrix copied in
// 64×64 boxes with the 128-byte swizzle, as a wgmma producer loads K.
func validTiled() TensorMapTiled {
	return TensorMapTiled{
		DataType: TensorMapBFloat16,
		Address:  0x7f0000000000,
		Dims:     []uint64{4096, 1024},
		Strides:  []uint64{4096 * 2},
		Box:      []uint32{64, 64},
		Swizzle:  TensorMapSwizzle128B,
	}
}

func TestTensorMapLayout(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(TensorMap{}), "sizeof(CUtensorMap)")
	assert.Len(t, tensorMapElementBytes, int(TensorMapTFloat32FTZ)+1)
	assert.Len(t, tensorMapFloat, int(TensorMapTFloat32FTZ)+1)
	// The ABI values, from cuda.h.
	assert.Equal(t, []int32{0, 6, 7, 9, 12}, []int32{int32(TensorMapUint8), int32(TensorMapFloat16),
		int32(TensorMapFloat32), int32(TensorMapBFloat16), int32(TensorMapTFloat32FTZ)})
	assert.Equal(t, []int32{0, 1, 2, 3}, []int32{int32(TensorMapSwizzleNone), int32(TensorMapSwizzle32B),
		int32(TensorMapSwizzle64B), int32(TensorMapSwizzle128B)})
	assert.Equal(t, []int32{0, 1, 2}, []int32{int32(TensorMapInterleaveNone), int32(TensorMapInterleave16B),
		int32(TensorMapInterleave32B)})
	assert.Equal(t, []int32{0, 1, 2, 3}, []int32{int32(TensorMapL2PromotionNone), int32(TensorMapL2Promotion64B),
		int32(TensorMapL2Promotion128B), int32(TensorMapL2Promotion256B)})
	assert.Equal(t, []int32{0, 1}, []int32{int32(TensorMapOOBFillNone), int32(TensorMapOOBFillNaNRequestZeroFMA)})
}

func TestTensorMapTiledValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*TensorMapTiled)
		want   string // the whole message after "cuda: "; "" for valid
	}{
		{"valid", func(*TensorMapTiled) {}, ""},
		{"rank 1", func(m *TensorMapTiled) {
			m.Dims, m.Strides, m.Box, m.Swizzle = []uint64{1 << 20}, nil, []uint32{256}, TensorMapSwizzleNone
		}, ""},
		{"rank 5 with element strides", func(m *TensorMapTiled) {
			m.Dims = []uint64{128, 8, 4, 2, 1 << 32}
			m.Strides = []uint64{256, 2048, 8192, 16384}
			m.Box = []uint32{64, 8, 4, 2, 1}
			m.ElementStrides = []uint32{1, 2, 1, 8, 1}
		}, ""},
		{"interleave 32B", func(m *TensorMapTiled) {
			m.DataType, m.Interleave, m.Swizzle = TensorMapUint8, TensorMapInterleave32B, TensorMapSwizzle32B
			m.Address = 0x1020
			m.Dims, m.Strides, m.Box = []uint64{32, 16, 16}, []uint64{32, 512}, []uint32{3, 16, 16}
		}, ""},
		{"NaN fill on floats", func(m *TensorMapTiled) { m.OOBFill = TensorMapOOBFillNaNRequestZeroFMA }, ""},
		{"every promotion", func(m *TensorMapTiled) { m.L2Promotion = TensorMapL2Promotion256B }, ""},

		{"rank 0", func(m *TensorMapTiled) { m.Dims = nil },
			"len(TensorMapTiled.Dims)=0; want 1..5 (the tensor's rank)"},
		{"rank 6", func(m *TensorMapTiled) { m.Dims = []uint64{1, 1, 1, 1, 1, 1} },
			"len(TensorMapTiled.Dims)=6; want 1..5 (the tensor's rank)"},
		{"strides too many", func(m *TensorMapTiled) { m.Strides = []uint64{8192, 8192} },
			"len(TensorMapTiled.Strides)=2; want 1 (rank−1: the byte strides of dimensions 1..rank−1)"},
		{"strides as many as dims", func(m *TensorMapTiled) { m.Dims, m.Strides = []uint64{64}, []uint64{128} },
			"len(TensorMapTiled.Strides)=1; want 0 (rank−1: the byte strides of dimensions 1..rank−1)"},
		{"box short", func(m *TensorMapTiled) { m.Box = []uint32{64} },
			"len(TensorMapTiled.Box)=1; want 2 (the rank)"},
		{"element strides short", func(m *TensorMapTiled) { m.ElementStrides = []uint32{1} },
			"len(TensorMapTiled.ElementStrides)=1; want 2 (the rank), or 0 for all 1"},
		{"data type", func(m *TensorMapTiled) { m.DataType = 13 },
			"TensorMapTiled.DataType=13; want 0..12 (TensorMapUint8..TensorMapTFloat32FTZ)"},
		{"negative data type", func(m *TensorMapTiled) { m.DataType = -1 },
			"TensorMapTiled.DataType=-1; want 0..12 (TensorMapUint8..TensorMapTFloat32FTZ)"},
		{"interleave", func(m *TensorMapTiled) { m.Interleave = 3 },
			"TensorMapTiled.Interleave=3; want 0..2 (TensorMapInterleaveNone, TensorMapInterleave16B or TensorMapInterleave32B)"},
		{"swizzle", func(m *TensorMapTiled) { m.Swizzle = 4 },
			"TensorMapTiled.Swizzle=4; want 0..3 (TensorMapSwizzleNone, TensorMapSwizzle32B, TensorMapSwizzle64B or TensorMapSwizzle128B)"},
		{"promotion", func(m *TensorMapTiled) { m.L2Promotion = 4 },
			"TensorMapTiled.L2Promotion=4; want 0..3 (TensorMapL2PromotionNone, TensorMapL2Promotion64B, TensorMapL2Promotion128B or TensorMapL2Promotion256B)"},
		{"oob fill", func(m *TensorMapTiled) { m.OOBFill = 2 },
			"TensorMapTiled.OOBFill=2; want 0..1 (TensorMapOOBFillNone or TensorMapOOBFillNaNRequestZeroFMA)"},
		{"interleave at rank 2", func(m *TensorMapTiled) { m.Interleave = TensorMapInterleave16B },
			"TensorMapTiled.Interleave=1 with len(TensorMapTiled.Dims)=2; an interleaved tensor needs rank 3..5"},
		{"interleave 32B without swizzle 32B", func(m *TensorMapTiled) {
			m.Interleave = TensorMapInterleave32B
			m.Dims, m.Strides, m.Box = []uint64{32, 16, 16}, []uint64{64, 1024}, []uint32{2, 16, 16}
		}, "TensorMapTiled.Swizzle=3 with Interleave=TensorMapInterleave32B; want TensorMapSwizzle32B (1)"},
		{"NaN fill on integers", func(m *TensorMapTiled) {
			m.DataType, m.OOBFill = TensorMapUint16, TensorMapOOBFillNaNRequestZeroFMA
		}, "TensorMapTiled.OOBFill=TensorMapOOBFillNaNRequestZeroFMA with DataType=1; want a floating-point DataType (6..12), or TensorMapOOBFillNone"},
		{"misaligned address", func(m *TensorMapTiled) { m.Address += 8 },
			"TensorMapTiled.Address=0x7f0000000008; want a multiple of 16 bytes"},
		{"address not 32-aligned with interleave 32B", func(m *TensorMapTiled) {
			m.DataType, m.Interleave, m.Swizzle = TensorMapUint8, TensorMapInterleave32B, TensorMapSwizzle32B
			m.Address = 0x1010
			m.Dims, m.Strides, m.Box = []uint64{32, 16, 16}, []uint64{32, 512}, []uint32{3, 16, 16}
		}, "TensorMapTiled.Address=0x1010; want a multiple of 32 bytes"},
		{"zero dim", func(m *TensorMapTiled) { m.Dims[1] = 0 },
			"TensorMapTiled.Dims[1]=0; want 1..2^32"},
		{"dim above 2^32", func(m *TensorMapTiled) { m.Dims[0] = 1<<32 + 1 },
			"TensorMapTiled.Dims[0]=4294967297; want 1..2^32"},
		{"stride not a multiple of 16", func(m *TensorMapTiled) { m.Strides[0] = 8200 },
			"TensorMapTiled.Strides[0]=8200; want a multiple of 16 bytes below 2^40"},
		{"stride 2^40", func(m *TensorMapTiled) { m.Strides[0] = 1 << 40 },
			"TensorMapTiled.Strides[0]=1099511627776; want a multiple of 16 bytes below 2^40"},
		{"stride not a multiple of 32 with interleave 32B", func(m *TensorMapTiled) {
			m.DataType, m.Interleave, m.Swizzle = TensorMapUint8, TensorMapInterleave32B, TensorMapSwizzle32B
			m.Dims, m.Strides, m.Box = []uint64{32, 16, 16}, []uint64{48, 768}, []uint32{3, 16, 16}
		}, "TensorMapTiled.Strides[0]=48; want a multiple of 32 bytes below 2^40"},
		{"box 0", func(m *TensorMapTiled) { m.Box[1] = 0 },
			"TensorMapTiled.Box[1]=0; want 1..256"},
		{"box 257", func(m *TensorMapTiled) { m.Box[1] = 257 },
			"TensorMapTiled.Box[1]=257; want 1..256"},
		{"element stride 0", func(m *TensorMapTiled) { m.ElementStrides = []uint32{1, 0} },
			"TensorMapTiled.ElementStrides[1]=0; want 1..8"},
		{"element stride 9", func(m *TensorMapTiled) { m.ElementStrides = []uint32{9, 1} },
			"TensorMapTiled.ElementStrides[0]=9; want 1..8"},
		{"inner box bytes not a multiple of 16", func(m *TensorMapTiled) { m.Box[0] = 60 },
			"TensorMapTiled.Box[0]=60 elements of 2 bytes is 120 bytes; want a multiple of 16 bytes"},
		{"inner box of 256 bytes with swizzle 128B", func(m *TensorMapTiled) { m.Box[0] = 128 },
			"TensorMapTiled.Box[0]=128 elements of 2 bytes is 256 bytes; want at most 128 bytes with Swizzle=TensorMapSwizzle128B"},
		{"inner box of 64 bytes with swizzle 32B", func(m *TensorMapTiled) {
			m.DataType, m.Box[0], m.Swizzle = TensorMapFloat32, 16, TensorMapSwizzle32B
		}, "TensorMapTiled.Box[0]=16 elements of 4 bytes is 64 bytes; want at most 32 bytes with Swizzle=TensorMapSwizzle32B"},
		{"inner box of 64 bytes with swizzle 64B", func(m *TensorMapTiled) {
			m.DataType, m.Box[0], m.Swizzle = TensorMapFloat32, 16, TensorMapSwizzle64B
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validTiled()
			tt.modify(&m)
			err := m.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.Equal(t, "cuda: "+tt.want, err.Error())

			// EncodeTensorMapTiled rejects it before looking for a driver.
			_, err = EncodeTensorMapTiled(m)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.NotErrorIs(t, err, ErrNoDriver)
		})
	}
}

// encodeCall is what a fake cuTensorMapEncodeTiled saw.
type encodeCall struct {
	out                                       uintptr
	dataType                                  int32
	rank                                      uint32
	address                                   DevicePtr
	dims, strides                             []uint64
	box, elementStrides                       []uint32
	stridesPtr                                bool
	interleave, swizzle, l2Promotion, oobFill int32
}

// fakeEncode records its arguments in *got and writes a pattern (word i =
// 0xA0+i) into the map, as the driver writes its encoding.
func fakeEncode(got *encodeCall) tensorMapEncodeTiledFunc {
	return func(tm *TensorMap, dataType TensorMapDataType, rank uint32, addr DevicePtr, dims, strides *uint64,
		box, elementStrides *uint32, interleave TensorMapInterleave, swizzle TensorMapSwizzle,
		l2 TensorMapL2Promotion, oob TensorMapOOBFill) Result {
		*got = encodeCall{
			out:            uintptr(unsafe.Pointer(tm)),
			dataType:       int32(dataType),
			rank:           rank,
			address:        addr,
			dims:           append([]uint64(nil), unsafe.Slice(dims, rank)...),
			strides:        append([]uint64(nil), unsafe.Slice(strides, rank-1)...),
			box:            append([]uint32(nil), unsafe.Slice(box, rank)...),
			elementStrides: append([]uint32(nil), unsafe.Slice(elementStrides, rank)...),
			stridesPtr:     strides != nil,
			interleave:     int32(interleave),
			swizzle:        int32(swizzle),
			l2Promotion:    int32(l2),
			oobFill:        int32(oob),
		}
		for i := range tm {
			tm[i] = 0xA0 + uint64(i)
		}
		return ResultSuccess
	}
}

func TestEncodeTensorMapTiledWith(t *testing.T) {
	var want TensorMap
	for i := range want {
		want[i] = 0xA0 + uint64(i)
	}
	tests := []struct {
		name string
		in   TensorMapTiled
		want encodeCall
	}{
		{
			name: "rank 2, element strides defaulted",
			in:   validTiled(),
			want: encodeCall{dataType: 9, rank: 2, address: 0x7f0000000000,
				dims: []uint64{4096, 1024}, strides: []uint64{8192}, box: []uint32{64, 64},
				elementStrides: []uint32{1, 1}, stridesPtr: true, swizzle: 3},
		},
		{
			name: "rank 5, every enum set",
			in: TensorMapTiled{
				DataType: TensorMapFloat16, Address: 0x20000,
				Dims:           []uint64{64, 5, 6, 7, 1 << 32},
				Strides:        []uint64{128, 640, 3840, 26880},
				Box:            []uint32{16, 5, 4, 2, 1},
				ElementStrides: []uint32{1, 2, 3, 4, 8},
				Interleave:     TensorMapInterleave16B,
				Swizzle:        TensorMapSwizzle64B,
				L2Promotion:    TensorMapL2Promotion128B,
				OOBFill:        TensorMapOOBFillNaNRequestZeroFMA,
			},
			want: encodeCall{dataType: 6, rank: 5, address: 0x20000,
				dims: []uint64{64, 5, 6, 7, 1 << 32}, strides: []uint64{128, 640, 3840, 26880},
				box: []uint32{16, 5, 4, 2, 1}, elementStrides: []uint32{1, 2, 3, 4, 8}, stridesPtr: true,
				interleave: 1, swizzle: 2, l2Promotion: 2, oobFill: 1},
		},
		{
			name: "rank 1 still passes a strides pointer",
			in: TensorMapTiled{DataType: TensorMapUint8, Address: 0x100, Dims: []uint64{1000},
				Box: []uint32{256}, L2Promotion: TensorMapL2Promotion256B},
			want: encodeCall{dataType: 0, rank: 1, address: 0x100, dims: []uint64{1000}, strides: nil,
				box: []uint32{256}, elementStrides: []uint32{1}, stridesPtr: true, l2Promotion: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.in.Validate())
			var got encodeCall
			tm, err := encodeTensorMapTiledWith(fakeEncode(&got), &tt.in)
			require.NoError(t, err)
			assert.Zero(t, got.out%64, "the driver writes at a 64-byte-aligned address, got %#x", got.out)
			assert.NotZero(t, got.out)
			got.out = 0
			assert.Equal(t, tt.want, got)
			assert.Equal(t, want, tm, "the encoded words are copied out")
		})
	}
}

func TestTensorMapCallAligned(t *testing.T) {
	// Whatever 8-byte-aligned address the block lands at, the window is
	// 64-aligned and inside out.
	buf := make([]tensorMapCall, 2)
	base := unsafe.Pointer(&buf[0])
	for off := uintptr(0); off < 64; off += 8 {
		c := (*tensorMapCall)(unsafe.Add(base, off))
		w := uintptr(unsafe.Pointer(c.aligned()))
		start := uintptr(unsafe.Pointer(&c.out[0]))
		assert.Zero(t, w%64, "offset %d", off)
		assert.GreaterOrEqual(t, w, start)
		assert.LessOrEqual(t, w+unsafe.Sizeof(TensorMap{}), start+unsafe.Sizeof(c.out), "offset %d", off)
	}
}

func TestEncodeTensorMapTiledDriverError(t *testing.T) {
	m := validTiled()
	failing := func(*TensorMap, TensorMapDataType, uint32, DevicePtr, *uint64, *uint64, *uint32, *uint32,
		TensorMapInterleave, TensorMapSwizzle, TensorMapL2Promotion, TensorMapOOBFill) Result {
		return ResultInvalidValue
	}
	tm, err := encodeTensorMapTiledWith(failing, &m)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "cuTensorMapEncodeTiled", e.Call)
	assert.Equal(t, ResultInvalidValue, e.Code)
	assert.Equal(t, TensorMap{}, tm)
}

func TestEncodeTensorMapTiledMissingSymbol(t *testing.T) {
	m := validTiled()
	tm, err := encodeTensorMapTiledWith(nil, &m)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.NotErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), "the driver lacks cuTensorMapEncodeTiled")
	assert.Contains(t, err.Error(), "CUDA 12.0")
	assert.Equal(t, TensorMap{}, tm)
}
