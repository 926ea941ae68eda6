package driver

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"unsafe"
)

const (
	// maxParamBytes bounds the size of a kernel parameter struct: room for
	// a kernel's scalars and pointers beside tensor maps of 128 bytes each
	// (CUDA's own limit is 4 KiB).
	maxParamBytes = 1024
	// maxParams bounds the number of kernel parameters.
	maxParams = 48
)

// ParamField describes one kernel parameter of a Go parameter struct: its
// field name, its offset in the struct, its size in bytes, and whether it is
// a floating-point value (.f32 in PTX) rather than an integer or pointer.
type ParamField struct {
	Name         string
	Offset, Size uintptr
	Float        bool
}

// paramLayout is the cached, checked layout of a parameter struct type.
type paramLayout struct {
	size    uintptr
	offsets []uintptr
	fields  []ParamField
	err     error
}

// layouts caches *paramLayout by reflect.Type.
var layouts sync.Map

// layoutOf returns the layout of T, computing it once per type. After the
// first call for a type it does not allocate.
func layoutOf[T any]() *paramLayout {
	t := reflect.TypeFor[T]()
	if l, ok := layouts.Load(t); ok {
		return l.(*paramLayout)
	}
	l, _ := layouts.LoadOrStore(t, computeLayout(t))
	return l.(*paramLayout)
}

// ParamLayout checks that t is usable as a kernel parameter struct for
// Launch and returns its fields in PTX parameter order. A parameter struct
// is a struct whose fields, in order, are the kernel's parameters; each
// field's kind must be uintptr (DevicePtr included), int32, uint32, float32,
// int64 or uint64 (named types of those kinds are fine), or the field must
// be a TensorMap (one 128-byte parameter). The struct may hold at most 48
// fields and 1024 bytes. Go lays such fields out at their natural
// alignment, as C does, so Offset is also where the bytes land in the
// parameter buffer (a kernel's 64-byte-aligned tensor-map parameter is
// copied by the driver, so the Go field's alignment does not matter).
func ParamLayout(t reflect.Type) ([]ParamField, error) {
	l := computeLayout(t)
	if l.err != nil {
		return nil, l.err
	}
	return append([]ParamField(nil), l.fields...), nil
}

func computeLayout(t reflect.Type) *paramLayout {
	if t == nil || t.Kind() != reflect.Struct {
		return &paramLayout{err: fmt.Errorf("cuda: kernel parameters must be a struct, got %v", t)}
	}
	if t.NumField() > maxParams {
		return &paramLayout{err: fmt.Errorf("cuda: kernel parameter struct %v has %d fields, at most %d are supported",
			t, t.NumField(), maxParams)}
	}
	if t.Size() > maxParamBytes {
		return &paramLayout{err: fmt.Errorf("cuda: kernel parameter struct %v is %d bytes, at most %d are supported",
			t, t.Size(), maxParamBytes)}
	}
	l := &paramLayout{size: t.Size()}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "_" {
			return &paramLayout{err: fmt.Errorf("cuda: kernel parameter struct %v: blank field %d; every field is a kernel parameter, padding is not allowed",
				t, i)}
		}
		var float bool
		switch f.Type.Kind() {
		case reflect.Uintptr, reflect.Int32, reflect.Uint32, reflect.Int64, reflect.Uint64:
		case reflect.Float32:
			float = true
		default:
			// A TensorMap is one 128-byte parameter (a __grid_constant__
			// CUtensorMap); the driver copies it by its size.
			if f.Type != reflect.TypeFor[TensorMap]() {
				return &paramLayout{err: fmt.Errorf("cuda: kernel parameter %v.%s has type %v; want DevicePtr, uintptr, int32, uint32, float32, int64, uint64 or TensorMap",
					t, f.Name, f.Type)}
			}
		}
		l.offsets = append(l.offsets, f.Offset)
		l.fields = append(l.fields, ParamField{Name: f.Name, Offset: f.Offset, Size: f.Type.Size(), Float: float})
	}
	return l
}

// frame is the reusable argument buffer of one launch: the parameter bytes
// and the array of their addresses that cuLaunchKernel reads, and for
// LaunchCluster the CUlaunchConfig and cluster attribute cuLaunchKernelEx
// reads.
type frame struct {
	storage [maxParamBytes / 8]uint64 // 8-aligned parameter bytes
	ptrs    [maxParams]unsafe.Pointer // ptrs[i] = &storage[offset_i]
	config  launchConfig              // LaunchCluster only; config.attrs = &attr
	attr    launchAttribute
	pin     runtime.Pinner
}

var frames = sync.Pool{New: func() any { return new(frame) }}

// pack copies the parameter struct at args (l.size bytes, l checked) into
// the frame and points ptrs at each parameter. It does not allocate.
func (fr *frame) pack(args unsafe.Pointer, l *paramLayout) {
	base := unsafe.Pointer(&fr.storage[0])
	copy(unsafe.Slice((*byte)(base), l.size), unsafe.Slice((*byte)(args), l.size))
	for i, off := range l.offsets {
		fr.ptrs[i] = unsafe.Add(base, off)
	}
}

// Launch enqueues kernel f on stream s with the given grid, block and
// dynamic shared memory size; *args holds the kernel parameters. Call it
// inside Context.Do.
//
// T is a flat parameter struct: its fields, in order, are the kernel's
// parameters in PTX order, each of kind uintptr (DevicePtr), int32, uint32,
// float32, int64 or uint64 (see ParamLayout). The layout is checked once per
// type and cached; a struct that does not qualify is an error, never a
// launch.
//
// # Memory
//
// Launch copies *args into a pooled argument frame before calling the
// driver, and the driver copies the parameters again before cuLaunchKernel
// returns, so *args may be reused or changed as soon as Launch returns. The
// frame (parameter bytes plus their addresses) is pinned with a
// runtime.Pinner for the duration of the call and returned to its pool
// afterwards, so a steady-state launch allocates nothing. Device pointers in
// *args are plain numbers to Go: the device memory they name must stay
// allocated until the kernel has run, which the caller ensures (free in
// stream order, or after synchronizing). Go pointers must never be kernel
// parameters, which the kind check enforces.
//
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html
func Launch[T any](f Function, grid, block Dim3, sharedBytes uint32, s Stream, args *T) error {
	l := layoutOf[T]()
	if l.err != nil {
		return l.err
	}
	if args == nil {
		return argError("Launch: nil parameter struct")
	}
	if err := Init(); err != nil {
		return err
	}
	return launchWith(cuLaunchKernel, f, grid, block, sharedBytes, s, unsafe.Pointer(args), l)
}

// launchWith packs and launches through call (cuLaunchKernel, or a fake in
// tests).
func launchWith(call launchFunc, f Function, grid, block Dim3, sharedBytes uint32, s Stream,
	args unsafe.Pointer, l *paramLayout) error {
	fr := frames.Get().(*frame)
	fr.pack(args, l)
	fr.pin.Pin(fr)
	r := call(f, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, sharedBytes, s, &fr.ptrs[0], nil)
	fr.pin.Unpin()
	frames.Put(fr)
	return check("cuLaunchKernel", r)
}
