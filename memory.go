package pagedkv

import (
	"fmt"
	"runtime"
	"sync"
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
// cleanup frees it if it becomes unreachable first.
type Memory struct {
	Buffer
	r       *Runtime
	once    sync.Once
	cleanup runtime.Cleanup // frees the memory if Free is never called
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
	m.cleanup = runtime.AddCleanup(m, func(c memCleanup) { c.free() }, memCleanup{r, p})
	return m, nil
}

type memCleanup struct {
	r *Runtime
	p driver.DevicePtr
}

func (c memCleanup) free() {
	if c.r.closed.Load() {
		return
	}
	_ = c.r.do(func() error { return driver.MemFree(c.p) })
}

// Free releases the memory after the device has finished every operation
// already enqueued (cuMemFree synchronizes). It is safe to call more than once.
func (m *Memory) Free() error {
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
func Upload[T any](s *Stream, dst Buffer, src []T) error {
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
// after every op already enqueued on s, and waits for it.
func Download[T any](s *Stream, dst []T, src Buffer) error {
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
	if b.Bytes == 0 {
		return nil
	}
	return s.r.do(func() error { return driver.MemsetD8Async(b.Ptr, v, uint64(b.Bytes), s.s) })
}

// Fill32 sets every 4-byte word of b to v on stream s (asynchronously); b's
// size must be a multiple of 4. Tests use it to poison outputs with NaN.
func (s *Stream) Fill32(b Buffer, v uint32) error {
	if b.Bytes%4 != 0 || b.Bytes < 0 {
		return errf("Fill32 needs a multiple of 4 bytes, got %d", b.Bytes)
	}
	if b.Bytes == 0 {
		return nil
	}
	return s.r.do(func() error { return driver.MemsetD32Async(b.Ptr, v, uint64(b.Bytes/4), s.s) })
}

// Copy copies src into dst on stream s (asynchronously); sizes must match.
func (s *Stream) Copy(dst, src Buffer) error {
	if dst.Bytes != src.Bytes || src.Bytes < 0 {
		return errf("Copy of %d bytes into %d bytes", src.Bytes, dst.Bytes)
	}
	return s.r.do(func() error { return driver.MemcpyDtoDAsync(dst.Ptr, src.Ptr, uint64(src.Bytes), s.s) })
}
