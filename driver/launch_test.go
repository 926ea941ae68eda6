package driver

import (
	"encoding/binary"
	"math"
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type decodeParams struct {
	Out       DevicePtr
	Q         DevicePtr
	NumHeads  int32
	BlockSize uint32
	Scale     float32
	Seqs      int64
	Stride    uint64
	Raw       uintptr
}

func TestParamLayoutAccepts(t *testing.T) {
	fields, err := ParamLayout(reflect.TypeFor[decodeParams]())
	require.NoError(t, err)
	want := []ParamField{
		{Name: "Out", Offset: 0, Size: 8},
		{Name: "Q", Offset: 8, Size: 8},
		{Name: "NumHeads", Offset: 16, Size: 4},
		{Name: "BlockSize", Offset: 20, Size: 4},
		{Name: "Scale", Offset: 24, Size: 4, Float: true},
		{Name: "Seqs", Offset: 32, Size: 8},
		{Name: "Stride", Offset: 40, Size: 8},
		{Name: "Raw", Offset: 48, Size: 8},
	}
	assert.Equal(t, want, fields)

	fields, err = ParamLayout(reflect.TypeFor[struct{}]())
	require.NoError(t, err)
	assert.Empty(t, fields)

	// A tensor map is one 128-byte parameter.
	fields, err = ParamLayout(reflect.TypeFor[struct {
		Out DevicePtr
		K   TensorMap
		N   int32
	}]())
	require.NoError(t, err)
	assert.Equal(t, []ParamField{{Name: "Out", Offset: 0, Size: 8}, {Name: "K", Offset: 8, Size: 128}, {Name: "N", Offset: 136, Size: 4}}, fields)
}

// TestPackTensorMap: the parameter a kernel sees for a tensor map field is
// its 128 bytes as given.
func TestPackTensorMap(t *testing.T) {
	type params struct {
		N int32
		M TensorMap
	}
	var p params
	p.N = 7
	for i := range p.M {
		p.M[i] = uint64(i)*0x0101010101010101 + 1
	}
	l := layoutOf[params]()
	require.NoError(t, l.err)
	fr := frames.Get().(*frame)
	defer frames.Put(fr)
	fr.pack(unsafe.Pointer(&p), l)
	assert.Equal(t, int32(7), *(*int32)(fr.ptrs[0]))
	assert.Equal(t, p.M, *(*TensorMap)(fr.ptrs[1]))
}

func TestParamLayoutRejects(t *testing.T) {
	type big struct{ A, B, C, D, E, F, G, H, I TensorMap }
	type many struct {
		A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15,
		A16, A17, A18, A19, A20, A21, A22, A23, A24, A25, A26, A27, A28, A29, A30, A31, A32,
		A33, A34, A35, A36, A37, A38, A39, A40, A41, A42, A43, A44, A45, A46, A47, A48 int32
	}
	tests := []struct {
		name string
		typ  reflect.Type
		want string
	}{
		{"bool", reflect.TypeFor[struct{ On bool }](), "On has type bool"},
		{"string", reflect.TypeFor[struct{ Name string }](), "Name has type string"},
		{"int", reflect.TypeFor[struct{ N int }](), "N has type int"},
		{"float64", reflect.TypeFor[struct{ X float64 }](), "X has type float64"},
		{"pointer", reflect.TypeFor[struct{ P *float32 }](), "P has type *float32"},
		{"unsafe.Pointer", reflect.TypeFor[struct{ P unsafe.Pointer }](), "P has type unsafe.Pointer"},
		{"nested", reflect.TypeFor[struct{ D Dim3 }](), "D has type driver.Dim3"},
		{"array", reflect.TypeFor[struct{ A [4]uint64 }](), "A has type [4]uint64"},
		{"too big", reflect.TypeFor[big](), "is 1152 bytes"},
		{"too many", reflect.TypeFor[many](), "has 49 fields"},
		{"blank", reflect.TypeFor[struct {
			A int32
			_ int32
		}](), "blank field 1"},
		{"not a struct", reflect.TypeFor[int32](), "must be a struct"},
		{"pointer to struct", reflect.TypeFor[*decodeParams](), "must be a struct"},
		{"nil", nil, "must be a struct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParamLayout(tt.typ)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLayoutOfCached(t *testing.T) {
	l1 := layoutOf[decodeParams]()
	l2 := layoutOf[decodeParams]()
	require.NoError(t, l1.err)
	assert.Same(t, l1, l2)
	if !raceEnabled {
		allocs := testing.AllocsPerRun(100, func() { _ = layoutOf[decodeParams]() })
		assert.Zero(t, allocs, "cached layout lookup allocates")
	}

	bad := layoutOf[struct{ On bool }]()
	assert.Error(t, bad.err)
	err := Launch(0, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, &struct{ On bool }{})
	assert.ErrorContains(t, err, "On has type bool", "layout errors come before driver loading")
}

func sampleParams() decodeParams {
	return decodeParams{
		Out: 0x7f00_0000_1000, Q: 0x7f00_0000_2000,
		NumHeads: -32, BlockSize: 16, Scale: 0.125,
		Seqs: -5, Stride: 1 << 40, Raw: 0xdead_beef,
	}
}

// readParams decodes what a kernel would see through the pointer array.
func readParams(ptrs *unsafe.Pointer, n int) decodeParams {
	p := unsafe.Slice(ptrs, n)
	bytesAt := func(i, size int) []byte { return unsafe.Slice((*byte)(p[i]), size) }
	le := binary.LittleEndian
	return decodeParams{
		Out:       DevicePtr(le.Uint64(bytesAt(0, 8))),
		Q:         DevicePtr(le.Uint64(bytesAt(1, 8))),
		NumHeads:  int32(le.Uint32(bytesAt(2, 4))),
		BlockSize: le.Uint32(bytesAt(3, 4)),
		Scale:     math.Float32frombits(le.Uint32(bytesAt(4, 4))),
		Seqs:      int64(le.Uint64(bytesAt(5, 8))),
		Stride:    le.Uint64(bytesAt(6, 8)),
		Raw:       uintptr(le.Uint64(bytesAt(7, 8))),
	}
}

func TestFramePack(t *testing.T) {
	l := layoutOf[decodeParams]()
	require.NoError(t, l.err)
	args := sampleParams()
	fr := new(frame)
	fr.pack(unsafe.Pointer(&args), l)
	assert.Equal(t, args, readParams(&fr.ptrs[0], len(l.offsets)))
	base := uintptr(unsafe.Pointer(&fr.storage[0]))
	for i, off := range l.offsets {
		assert.Equal(t, base+off, uintptr(fr.ptrs[i]), "ptrs[%d]", i)
	}

	// A frame reused for another type gets the new bytes.
	type small struct{ A, B uint32 }
	ls := layoutOf[small]()
	require.NoError(t, ls.err)
	fr.pack(unsafe.Pointer(&small{A: 7, B: 9}), ls)
	assert.Equal(t, uint32(7), *(*uint32)(fr.ptrs[0]))
	assert.Equal(t, uint32(9), *(*uint32)(fr.ptrs[1]))
}

// requireNoRace skips allocation checks under the race detector.
func requireNoRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
}

func TestFramePackAllocatesNothing(t *testing.T) {
	requireNoRace(t)
	l := layoutOf[decodeParams]()
	args := sampleParams()
	fr := new(frame)
	allocs := testing.AllocsPerRun(1000, func() { fr.pack(unsafe.Pointer(&args), l) })
	assert.Zero(t, allocs)
}

func TestLaunchWith(t *testing.T) {
	l := layoutOf[decodeParams]()
	args := sampleParams()
	var got decodeParams
	var gotGrid, gotBlock Dim3
	var gotShared uint32
	var gotStream Stream
	fake := func(f Function, gx, gy, gz, bx, by, bz, shared uint32, s Stream, params, extra *unsafe.Pointer) Result {
		got = readParams(params, len(l.offsets))
		gotGrid, gotBlock, gotShared, gotStream = Dim3{gx, gy, gz}, Dim3{bx, by, bz}, shared, s
		if extra != nil {
			return ResultInvalidValue
		}
		return ResultSuccess
	}
	err := launchWith(fake, 1, Dim3{4, 2, 1}, Dim3{128, 1, 1}, 4096, 77, unsafe.Pointer(&args), l)
	require.NoError(t, err)
	assert.Equal(t, args, got)
	assert.Equal(t, Dim3{4, 2, 1}, gotGrid)
	assert.Equal(t, Dim3{128, 1, 1}, gotBlock)
	assert.Equal(t, uint32(4096), gotShared)
	assert.Equal(t, Stream(77), gotStream)

	failing := func(Function, uint32, uint32, uint32, uint32, uint32, uint32, uint32, Stream, *unsafe.Pointer, *unsafe.Pointer) Result {
		return ResultLaunchOutOfResources
	}
	err = launchWith(failing, 1, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, unsafe.Pointer(&args), l)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "cuLaunchKernel", e.Call)
	assert.Equal(t, ResultLaunchOutOfResources, e.Code)
}

func TestLaunchWithAllocatesNothing(t *testing.T) {
	requireNoRace(t)
	l := layoutOf[decodeParams]()
	args := sampleParams()
	var sink uint32
	fake := func(f Function, gx, gy, gz, bx, by, bz, shared uint32, s Stream, params, extra *unsafe.Pointer) Result {
		sink += *(*uint32)(unsafe.Slice(params, 4)[3])
		return ResultSuccess
	}
	var call launchFunc = fake
	allocs := testing.AllocsPerRun(1000, func() {
		_ = launchWith(call, 1, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, 0, unsafe.Pointer(&args), l)
	})
	assert.Zero(t, allocs)
	assert.NotZero(t, sink)
}

func BenchmarkLaunchPack(b *testing.B) {
	l := layoutOf[decodeParams]()
	args := sampleParams()
	fake := func(Function, uint32, uint32, uint32, uint32, uint32, uint32, uint32, Stream, *unsafe.Pointer, *unsafe.Pointer) Result {
		return ResultSuccess
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = launchWith(fake, 1, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, 0, unsafe.Pointer(&args), l)
	}
}
