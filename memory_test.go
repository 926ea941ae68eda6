package pagedkv

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeHost is a HostMemory of r over Go memory, listed in hostAllocs for the
// test's duration. It never reaches the driver: do not Free it.
func fakeHost(t *testing.T, r *Runtime, buf []byte) *HostMemory {
	t.Helper()
	h := &HostMemory{r: r, ptr: unsafe.Pointer(unsafe.SliceData(buf)), bytes: int64(len(buf))}
	hostAllocs.add(h)
	t.Cleanup(func() { hostAllocs.remove(h) })
	return h
}

func TestHostRegistry(t *testing.T) {
	backing := make([]byte, 1<<12)
	at := func(off, n int) *HostMemory {
		return &HostMemory{ptr: unsafe.Pointer(&backing[off]), bytes: int64(n)}
	}
	addr := func(off int) uintptr { return uintptr(unsafe.Pointer(&backing[off])) }

	var g hostRegistry
	a, b, c := at(0, 100), at(200, 100), at(300, 50) // b and c touch, not overlap
	g.add(b)
	g.add(c)
	g.add(a)
	require.Equal(t, []*HostMemory{a, b, c}, g.ranges, "sorted by address")

	tests := []struct {
		name string
		off  int
		n    int64
		want *HostMemory
	}{
		{"first byte", 0, 1, a},
		{"all of a", 0, 100, a},
		{"last byte of a", 99, 1, a},
		{"one past a", 99, 2, nil},
		{"gap", 150, 10, nil},
		{"inside b", 250, 50, b},
		{"spans b and c", 290, 20, nil},
		{"start of c", 300, 50, c},
		{"past c", 350, 1, nil},
		{"more than c holds", 300, 51, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, g.find(addr(tt.off), tt.n), tt.name)
	}
	assert.Nil(t, g.find(addr(0)-1, 1), "below every range")

	// A new range over stale ones (freed with a released context) replaces them.
	d := at(250, 100)
	g.add(d)
	assert.Equal(t, []*HostMemory{a, d}, g.ranges)
	g.remove(a)
	g.remove(a)
	assert.Equal(t, []*HostMemory{d}, g.ranges)
	assert.Nil(t, g.find(addr(0), 1))
}

func TestHostSlice(t *testing.T) {
	r := &Runtime{ctx: 0x100}
	h := fakeHost(t, r, make([]byte, 4096))

	u16, err := HostSlice[uint16](h)
	require.NoError(t, err)
	assert.Len(t, u16, 2048)
	assert.Equal(t, h.ptr, unsafe.Pointer(&u16[0]))
	vec, err := HostSlice[[3]float32](h)
	require.NoError(t, err)
	assert.Len(t, vec, 4096/12, "whole elements only")
	type pair struct {
		K, V float32
		N    [2]int32
	}
	_, err = HostSlice[pair](h)
	assert.NoError(t, err)
	assert.Len(t, h.Bytes(), 4096)

	for _, tt := range []struct {
		err  error
		want string
	}{
		{sliceErr[*int](h), "pagedkv: HostSlice[*int]: the element type holds Go pointers"},
		{sliceErr[string](h), "pagedkv: HostSlice[string]: the element type holds Go pointers"},
		{sliceErr[struct{ A []byte }](h), "holds Go pointers"},
		{sliceErr[struct{}](h), "pagedkv: HostSlice[struct {}]: the element type has size 0"},
		{sliceErr[uint8](nil), "pagedkv: HostSlice[uint8]: the HostMemory is nil or freed"},
	} {
		require.Error(t, tt.err)
		assert.ErrorIs(t, tt.err, ErrInvalidArgument)
		assert.Contains(t, tt.err.Error(), tt.want)
	}

	freed := &HostMemory{r: r, ptr: h.ptr, bytes: 16}
	freed.freed.Store(true)
	assert.Nil(t, freed.Bytes())
	assert.ErrorIs(t, sliceErr[uint8](freed), ErrInvalidArgument)
}

func sliceErr[T any](h *HostMemory) error {
	_, err := HostSlice[T](h)
	return err
}

func TestHasPointers(t *testing.T) {
	for _, tt := range []struct {
		v    any
		want bool
	}{
		{uint16(0), false},
		{float64(0), false},
		{uintptr(0), false},
		{[4]int8{}, false},
		{struct {
			A float32
			B [2]uint64
		}{}, false},
		{[0]*int{}, false},
		{new(int), true},
		{"", true},
		{[]float32{}, true},
		{map[int]int{}, true},
		{[2]string{}, true},
		{struct{ P unsafe.Pointer }{}, true},
		{struct{ F func() }{}, true},
	} {
		assert.Equal(t, tt.want, hasPointers(reflect.TypeOf(tt.v)), "%T", tt.v)
	}
}

func TestAllocHostChecks(t *testing.T) {
	r := &Runtime{}
	for _, n := range []int64{0, -1} {
		_, err := r.AllocHost(n)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), "size must be positive")
	}
	r.closed.Store(true)
	_, err := r.AllocHost(16)
	assert.ErrorIs(t, err, ErrClosed)
}

// TestAsyncCopyChecks covers what UploadAsync and DownloadAsync reject
// before they reach the driver.
func TestAsyncCopyChecks(t *testing.T) {
	dev0 := &Runtime{ctx: 0x100, info: DeviceInfo{Ordinal: 0}}
	dev1 := &Runtime{ctx: 0x200, info: DeviceInfo{Ordinal: 1}}
	s := &Stream{r: dev0, s: 0x5}
	backing := make([]byte, 4096)
	fakeHost(t, dev0, backing[:2048])
	other := make([]byte, 64)
	fakeHost(t, dev1, other)
	goMem := make([]uint32, 8)
	dst := Buffer{Ptr: 0x1000, Bytes: 64}
	var nilStream *Stream

	tests := []struct {
		name string
		err  error
		want string
	}{
		{"upload on nil stream", UploadAsync(nilStream, dst, backing[:8]), "pagedkv: UploadAsync: the *Stream is nil"},
		{"upload too large", UploadAsync(s, dst, backing[:65]), "pagedkv: UploadAsync: src is 65 values × 1 bytes, more than the 64 bytes of dst"},
		{"upload typed too large", UploadAsync(s, dst, unsafe.Slice((*uint32)(unsafe.Pointer(&backing[0])), 17)), "src is 17 values × 4 bytes, more than the 64 bytes of dst"},
		{"upload from Go memory", UploadAsync(s, dst, goMem), "does not lie inside one HostMemory; asynchronous copies need page-locked memory from Runtime.AllocHost (use Upload for Go memory)"},
		{"upload past the end of host memory", UploadAsync(s, dst, backing[2040:2050]), "pagedkv: UploadAsync: src (10 bytes at"},
		{"upload from another device's host memory", UploadAsync(s, dst, other[:8]), "pagedkv: UploadAsync: src is host memory of a Runtime of device 1 and the stream belongs to device 0"},
		{"download on nil stream", DownloadAsync(nilStream, backing[:8], dst), "pagedkv: DownloadAsync: the *Stream is nil"},
		{"download too large", DownloadAsync(s, backing[:100], dst), "pagedkv: DownloadAsync: dst is 100 values × 1 bytes, more than the 64 bytes of src"},
		{"download into Go memory", DownloadAsync(s, goMem, dst), "(use Download for Go memory)"},
		{"download from a negative-size buffer", DownloadAsync(s, backing[:1], Buffer{Ptr: 0x1000, Bytes: -1}), "more than the -1 bytes of src"},
		{"download into another device's host memory", DownloadAsync(s, other[:8], dst), "pagedkv: DownloadAsync: dst is host memory of a Runtime of device 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, tt.err)
			assert.ErrorIs(t, tt.err, ErrInvalidArgument)
			assert.Contains(t, tt.err.Error(), tt.want)
		})
	}

	// Nothing to copy: no check of the memory, no driver call.
	assert.NoError(t, UploadAsync(s, dst, goMem[:0]))
	assert.NoError(t, DownloadAsync(s, []uint32(nil), dst))

	closed := &Runtime{ctx: 0x100}
	closed.closed.Store(true)
	cs := &Stream{r: closed, s: 0x5}
	assert.ErrorIs(t, UploadAsync(cs, dst, backing[:8]), ErrClosed)
	assert.ErrorIs(t, DownloadAsync(cs, backing[:8], dst), ErrClosed)
}
