package pagedkv

import (
	"cmp"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/pagedkv/pagedkv/driver"
)

// Buffer is a view of device memory: a device pointer and how many bytes
// behind it the view may touch. Ops check every buffer against the bytes the
// shapes say they will read or write. Buffers from other libraries can be
// passed as Buffer{Ptr: p, Bytes: n}. The zero Buffer means "not given".
type Buffer struct {
	Ptr   driver.DevicePtr
	Bytes int64
}

// IsZero reports whether b is the zero Buffer (an optional argument left out).
func (b Buffer) IsZero() bool { return b.Ptr == 0 && b.Bytes == 0 }

// Slice returns the view [off, off+n) of b: it needs 0 ≤ off, 0 ≤ n and
// off+n ≤ b.Bytes (computed without overflow), so a view never reaches
// outside its parent.
func (b Buffer) Slice(off, n int64) (Buffer, error) {
	if off < 0 || n < 0 || b.Bytes < 0 || off > b.Bytes || n > b.Bytes-off {
		return Buffer{}, errf("Buffer.Slice(%d, %d) is outside a buffer of %d bytes; allowed: off ≥ 0, n ≥ 0, off+n ≤ %d", off, n, b.Bytes, max(b.Bytes, 0))
	}
	if uint64(b.Ptr)+uint64(off) < uint64(b.Ptr) {
		return Buffer{}, errf("Buffer.Slice(%d, %d) of a buffer at %#x runs past the end of the address space", off, n, uintptr(b.Ptr))
	}
	return Buffer{Ptr: b.Ptr + driver.DevicePtr(off), Bytes: n}, nil
}

// Memory is device memory allocated by a Runtime. Free it with Free; a
// cleanup frees it if it becomes unreachable first. Its Buffer, and views
// taken from it (Slice), do not keep it reachable: hold the *Memory for as
// long as any op, graph or view may use the memory, or the cleanup may free
// it under them (cuMemFree, at a time the garbage collector picks).
type Memory struct {
	Buffer
	r       *Runtime
	once    sync.Once
	cleanup runtime.Cleanup // frees the memory if Free is never called
}

// IsZero reports whether m holds no memory (a nil Memory does not).
func (m *Memory) IsZero() bool { return m == nil || m.Buffer.IsZero() }

// Slice returns the view [off, off+n) of m's memory (see Buffer.Slice).
func (m *Memory) Slice(off, n int64) (Buffer, error) {
	if m == nil {
		return Buffer{}, errf("Memory.Slice(%d, %d): the *Memory is nil", off, n)
	}
	return m.Buffer.Slice(off, n)
}

// Alloc allocates bytes of device memory (uninitialized).
func (r *Runtime) Alloc(bytes int64) (*Memory, error) {
	if err := r.live(); err != nil {
		return nil, err
	}
	if bytes <= 0 {
		return nil, errf("Alloc(%d): size must be positive", bytes)
	}
	var p driver.DevicePtr
	err := r.do(func() error {
		var err error
		p, err = driver.MemAlloc(uint64(bytes))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pagedkv: allocating %d bytes on %s: %w", bytes, r.info.Name, err)
	}
	m := &Memory{Buffer: Buffer{Ptr: p, Bytes: bytes}, r: r}
	m.cleanup = runtime.AddCleanup(m, driverCleanup.run, driverCleanup{r, func() error { return driver.MemFree(p) }})
	return m, nil
}

// Free releases the memory after the device has finished every operation
// already enqueued (cuMemFree synchronizes). It is safe to call more than
// once, and on a nil Memory (it does nothing). After Runtime.Close it does
// nothing: the memory goes with the Runtime's context only when no other
// code retains that primary context, so free memory before Close.
func (m *Memory) Free() error {
	if m == nil || m.r == nil {
		return nil
	}
	var err error
	m.once.Do(func() {
		m.cleanup.Stop()
		if m.r.closed.Load() {
			return
		}
		err = m.r.do(func() error { return driver.MemFree(m.Ptr) })
	})
	return err
}

// Upload copies src into the start of dst in the order of stream s and waits
// for the copy (and everything enqueued on s before it) to finish.
// UploadAsync does not wait.
func Upload[T any](s *Stream, dst Buffer, src []T) error {
	if err := s.use("Upload"); err != nil {
		return err
	}
	n := int64(len(src)) * int64(unsafe.Sizeof(*new(T)))
	if n == 0 {
		return nil
	}
	if n > dst.Bytes {
		return errf("Upload of %d bytes into a buffer of %d bytes", n, dst.Bytes)
	}
	defer runtime.KeepAlive(src)
	return s.r.do(func() error {
		if err := driver.MemcpyHtoDAsync(dst.Ptr, unsafe.Pointer(&src[0]), uint64(n), s.s); err != nil {
			return err
		}
		return s.s.Synchronize()
	})
}

// Download copies the start of src into dst in the order of stream s, so
// after every op already enqueued on s, and waits for it. DownloadAsync does
// not wait.
func Download[T any](s *Stream, dst []T, src Buffer) error {
	if err := s.use("Download"); err != nil {
		return err
	}
	n := int64(len(dst)) * int64(unsafe.Sizeof(*new(T)))
	if n == 0 {
		return nil
	}
	if n > src.Bytes {
		return errf("Download of %d bytes from a buffer of %d bytes", n, src.Bytes)
	}
	defer runtime.KeepAlive(dst)
	return s.r.do(func() error {
		if err := driver.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src.Ptr, uint64(n), s.s); err != nil {
			return err
		}
		return s.s.Synchronize()
	})
}

// Fill sets every byte of b to v on stream s (asynchronously).
func (s *Stream) Fill(b Buffer, v byte) error {
	if b.Bytes < 0 {
		return errf("Fill of a buffer of %d bytes; allowed: a size ≥ 0", b.Bytes)
	}
	if err := s.use("Stream.Fill"); err != nil || b.Bytes == 0 {
		return err
	}
	return s.r.do(func() error { return driver.MemsetD8Async(b.Ptr, v, uint64(b.Bytes), s.s) })
}

// Fill32 sets every 4-byte word of b to v on stream s (asynchronously); b's
// size must be a multiple of 4. Tests use it to poison outputs with NaN.
func (s *Stream) Fill32(b Buffer, v uint32) error {
	if b.Bytes%4 != 0 || b.Bytes < 0 {
		return errf("Fill32 needs a multiple of 4 bytes, got %d", b.Bytes)
	}
	if err := s.use("Stream.Fill32"); err != nil || b.Bytes == 0 {
		return err
	}
	return s.r.do(func() error { return driver.MemsetD32Async(b.Ptr, v, uint64(b.Bytes/4), s.s) })
}

// Copy copies src into dst on stream s (asynchronously); sizes must match.
func (s *Stream) Copy(dst, src Buffer) error {
	if dst.Bytes != src.Bytes || src.Bytes < 0 {
		return errf("Copy of %d bytes into %d bytes", src.Bytes, dst.Bytes)
	}
	if err := s.use("Stream.Copy"); err != nil {
		return err
	}
	return s.r.do(func() error { return driver.MemcpyDtoDAsync(dst.Ptr, src.Ptr, uint64(src.Bytes), s.s) })
}

// HostMemory is page-locked ("pinned") host memory that a Runtime allocated
// with cuMemAllocHost. It lives outside the Go heap, and the device copies to
// and from it by DMA, which is what lets UploadAsync and DownloadAsync return
// before their copies are done: they accept only host memory of this kind.
//
// # Memory
//
// Bytes and HostSlice return views of the memory. The Go garbage collector
// neither moves nor frees it, and a view does not keep the HostMemory
// reachable: the memory lives until Free, and there is no cleanup that frees
// it when the HostMemory becomes unreachable (it would free memory that
// views or enqueued copies still use). Views must not be used after Free.
// Store only values without Go pointers in it: the collector does not scan
// it, so a pointer kept there would not keep its target alive. Page-locked
// memory is taken from what the operating system can page: allocate a few
// staging buffers and reuse them.
//
// A HostMemory is safe for concurrent use by multiple goroutines; reads and
// writes of its bytes follow Go's usual rules, where an enqueued copy reads
// (upload) or writes (download) them until its stream has passed it.
type HostMemory struct {
	r     *Runtime
	ptr   unsafe.Pointer
	bytes int64
	freed atomic.Bool
	once  sync.Once
}

// AllocHost allocates bytes of page-locked host memory (uninitialized) for
// the asynchronous copies of streams of r's device. Free it with Free, before
// Runtime.Close.
func (r *Runtime) AllocHost(bytes int64) (*HostMemory, error) {
	if err := r.live(); err != nil {
		return nil, err
	}
	if bytes <= 0 || uint64(bytes) > math.MaxInt {
		return nil, errf("AllocHost(%d): size must be positive and at most %d", bytes, math.MaxInt)
	}
	var p unsafe.Pointer
	err := r.do(func() error {
		var err error
		p, err = driver.MemAllocHost(uint64(bytes))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pagedkv: allocating %d bytes of page-locked host memory for %s: %w", bytes, r.info.Name, err)
	}
	h := &HostMemory{r: r, ptr: p, bytes: bytes}
	hostAllocs.add(h)
	return h, nil
}

// Bytes returns the memory as a byte slice, or nil once it is freed (or for
// a nil HostMemory).
func (h *HostMemory) Bytes() []byte {
	if h == nil || h.freed.Load() {
		return nil
	}
	return unsafe.Slice((*byte)(h.ptr), h.bytes)
}

// HostSlice returns h's memory as a []T of as many whole elements as fit.
// T must be a type without Go pointers (numbers, arrays and structs of
// them), of non-zero size.
func HostSlice[T any](h *HostMemory) ([]T, error) {
	t := reflect.TypeFor[T]()
	if t.Size() == 0 {
		return nil, errf("HostSlice[%v]: the element type has size 0", t)
	}
	if hasPointers(t) {
		return nil, errf("HostSlice[%v]: the element type holds Go pointers, which host memory cannot keep alive; allowed: numbers, and arrays and structs of them", t)
	}
	if h == nil || h.freed.Load() {
		return nil, errf("HostSlice[%v]: the HostMemory is nil or freed", t)
	}
	// cuMemAllocHost returns page-aligned memory, aligned for any T.
	return unsafe.Slice((*T)(h.ptr), uintptr(h.bytes)/t.Size()), nil
}

// hasPointers reports whether values of t hold Go pointers.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true // pointers, slices, strings, maps, channels, funcs, interfaces
}

// Free waits for every op enqueued on r's device context (cuCtxSynchronize,
// as Graph.Close does), so no copy still uses the memory, then frees it; do
// not call it while a stream of that device is being captured, or while a
// graph whose copies use the memory may still be replayed. It is safe to
// call more than once. After Runtime.Close it only forgets the memory, which
// went with the context or stays allocated until the context goes. On a nil
// HostMemory it does nothing.
func (h *HostMemory) Free() error {
	if h == nil || h.r == nil {
		return nil
	}
	var err error
	h.once.Do(func() {
		// Removed first, under the write lock: a copy that found h has
		// been enqueued (and the synchronize below waits for it), and no
		// copy can find it afterwards.
		hostAllocs.remove(h)
		h.freed.Store(true)
		if h.r.closed.Load() {
			return
		}
		err = h.r.do(func() error {
			if err := driver.CtxSynchronize(); err != nil {
				return err
			}
			return driver.MemFreeHost(h.ptr)
		})
	})
	return err
}

// hostAllocs is every live HostMemory, so that the asynchronous copies can
// check that a slice lies inside one.
var hostAllocs hostRegistry

// hostRegistry holds HostMemory ranges sorted by address, never
// overlapping. Copies hold the read lock from the lookup until their copy is
// enqueued; Free takes the write lock to remove a range.
type hostRegistry struct {
	mu     sync.RWMutex
	ranges []*HostMemory
}

// add records h. A range it overlaps must belong to memory that the driver
// has already freed (with a context that Runtime.Close released, since Free
// removes its own), so it is dropped.
func (g *hostRegistry) add(h *HostMemory) {
	g.mu.Lock()
	defer g.mu.Unlock()
	start, end := uintptr(h.ptr), uintptr(h.ptr)+uintptr(h.bytes)
	kept := g.ranges[:0]
	for _, o := range g.ranges {
		if lo, hi := uintptr(o.ptr), uintptr(o.ptr)+uintptr(o.bytes); hi <= start || lo >= end {
			kept = append(kept, o)
		}
	}
	i, _ := slices.BinarySearchFunc(kept, start, func(o *HostMemory, p uintptr) int { return cmp.Compare(uintptr(o.ptr), p) })
	g.ranges = slices.Insert(kept, i, h)
}

func (g *hostRegistry) remove(h *HostMemory) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ranges = slices.DeleteFunc(g.ranges, func(o *HostMemory) bool { return o == h })
}

// find returns the HostMemory that holds all n > 0 bytes at p, or nil. The
// caller holds g.mu for reading.
func (g *hostRegistry) find(p uintptr, n int64) *HostMemory {
	// The last range that starts at or before p is the only candidate.
	i, found := slices.BinarySearchFunc(g.ranges, p, func(o *HostMemory, p uintptr) int { return cmp.Compare(uintptr(o.ptr), p) })
	if !found {
		i--
	}
	if i < 0 {
		return nil
	}
	h := g.ranges[i]
	if off := p - uintptr(h.ptr); n > h.bytes || off > uintptr(h.bytes-n) {
		return nil
	}
	return h
}

// hostSpan checks that the n bytes at p, argument arg of op, lie in one
// HostMemory that a stream of s's context may use. The caller holds
// hostAllocs.mu for reading until its copy is enqueued.
func hostSpan(op, arg string, s *Stream, p unsafe.Pointer, n int64) error {
	h := hostAllocs.find(uintptr(p), n)
	if h == nil {
		return errf("%s: %s (%d bytes at %#x) does not lie inside one HostMemory; asynchronous copies need page-locked memory from Runtime.AllocHost (use %s for Go memory)",
			op, arg, n, uintptr(p), strings.TrimSuffix(op, "Async"))
	}
	if h.r.ctx != s.r.ctx {
		return errf("%s: %s is host memory of a Runtime of device %d and the stream belongs to device %d; allowed: host memory allocated by a Runtime of the stream's device (HostMemory.Free waits for that device only)",
			op, arg, h.r.info.Ordinal, s.r.info.Ordinal)
	}
	if h.r.closed.Load() {
		return errf("%s: %s is host memory of a closed Runtime", op, arg)
	}
	return nil
}

// copyBytes returns the bytes of n values of T, checked against limit, the
// bytes of the device buffer the copy touches.
func copyBytes[T any](op, arg, bufArg string, n int, limit int64) (int64, error) {
	bytes, ok := mul64(int64(n), int64(unsafe.Sizeof(*new(T))))
	if !ok || bytes > limit {
		return 0, errf("%s: %s is %d values × %d bytes, more than the %d bytes of %s", op, arg, n, unsafe.Sizeof(*new(T)), limit, bufArg)
	}
	return bytes, nil
}

// UploadAsync enqueues the copy of src into the start of dst on stream s
// (cuMemcpyHtoDAsync) and returns without waiting for it. src must lie
// inside a HostMemory allocated by a Runtime of s's device (HostSlice or
// HostMemory.Bytes, or a sub-slice): the driver reads it after the call
// returns, which Go's rules allow only for memory outside the Go heap (Go
// memory is freed once unreachable, and goroutine stacks move), and it reads
// page-locked memory directly, without staging. Use Upload for a Go slice.
//
// The copy reads src when s reaches it: do not modify src, or Free its
// HostMemory, until s has passed the copy — after s.Synchronize, or after
// an Event recorded on s after the copy has completed (Event.Synchronize);
// work on another stream that Waits on that event sees the uploaded data.
// Enqueued during graph capture, the copy is captured instead: each replay
// reads src then, so its HostMemory must outlive the graph.
func UploadAsync[T any](s *Stream, dst Buffer, src []T) error {
	if err := s.use("UploadAsync"); err != nil {
		return err
	}
	n, err := copyBytes[T]("UploadAsync", "src", "dst", len(src), dst.Bytes)
	if err != nil || n == 0 {
		return err
	}
	p := unsafe.Pointer(unsafe.SliceData(src))
	hostAllocs.mu.RLock()
	defer hostAllocs.mu.RUnlock()
	if err := hostSpan("UploadAsync", "src", s, p, n); err != nil {
		return err
	}
	return s.r.do(func() error { return driver.MemcpyHtoDAsync(dst.Ptr, p, uint64(n), s.s) })
}

// DownloadAsync enqueues the copy of the start of src into dst on stream s
// (cuMemcpyDtoHAsync), after every op already enqueued on s, and returns
// without waiting for it. dst must lie inside a HostMemory allocated by a
// Runtime of s's device (HostSlice or HostMemory.Bytes, or a sub-slice): the
// driver writes it after the call returns, which Go's rules allow only for
// memory outside the Go heap, and it writes page-locked memory directly,
// without staging. Use Download for a Go slice.
//
// dst holds the data only once s has passed the copy: do not read or write
// dst, or Free its HostMemory, before s.Synchronize, or before an Event
// recorded on s after the copy has completed (Event.Synchronize). Enqueued
// during graph capture, the copy is captured instead: each replay writes dst
// then, so its HostMemory must outlive the graph.
func DownloadAsync[T any](s *Stream, dst []T, src Buffer) error {
	if err := s.use("DownloadAsync"); err != nil {
		return err
	}
	n, err := copyBytes[T]("DownloadAsync", "dst", "src", len(dst), src.Bytes)
	if err != nil || n == 0 {
		return err
	}
	p := unsafe.Pointer(unsafe.SliceData(dst))
	hostAllocs.mu.RLock()
	defer hostAllocs.mu.RUnlock()
	if err := hostSpan("DownloadAsync", "dst", s, p, n); err != nil {
		return err
	}
	return s.r.do(func() error { return driver.MemcpyDtoHAsync(p, src.Ptr, uint64(n), s.s) })
}
