package scratch

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
)

// Allocator allocates and frees device memory in stream order. The root
// package implements it with cuMemAllocAsync and cuMemFreeAsync: a free is
// ordered after every kernel already enqueued on the stream, so a buffer may be
// freed as soon as the last launch that uses it has been enqueued.
type Allocator interface {
	AllocAsync(bytes int64, stream uintptr) (uintptr, error)
	FreeAsync(ptr uintptr, stream uintptr) error
}

// Sentinels for errors.Is; the errors the Pool returns wrap them with the
// sizes and the stream.
var (
	// ErrGrowDuringCapture: the stream's buffer is too small and the stream
	// is being captured into a CUDA graph, where allocating is not allowed.
	// Reserve the size before capture.
	ErrGrowDuringCapture = errors.New("scratch: buffer must grow during graph capture")
	// ErrOverLimit: the buffer would exceed the pool's byte limit.
	ErrOverLimit = errors.New("scratch: buffer would exceed the scratch limit")
	// ErrClosed: the pool has been closed.
	ErrClosed = errors.New("scratch: pool is closed")
)

// Granularity is the multiple of bytes buffers are allocated in, so that a
// slowly growing batch does not re-allocate at every step.
const Granularity = 1 << 20

// floatBytes is the size of one f32.
const floatBytes = 4

// Pool holds one f32 scratch buffer per stream, for one device. Two streams
// never share a buffer, so concurrent launches on different streams cannot
// corrupt each other's partials.
//
// A Pool is safe for concurrent use by multiple goroutines. Its read lock
// protects the buffers' lifetimes: a Lease holds it, so while any lease is
// outstanding no buffer is freed or replaced. Growth, Reserve, Drop and Close
// take the write lock, which waits for every lease to be released; a buffer
// they replace or free is freed with FreeAsync on its own stream, so it stays
// valid for every kernel already enqueued there. This relies on the launcher
// using a stream's buffer only in work it enqueues on that same stream.
//
// A goroutine must Release its Lease before it calls any other method of the
// Pool, and must not hold two leases at once: sync.RWMutex read locks are not
// reentrant when a writer is waiting.
//
// # Graphs
//
// A CUDA graph captured on a stream keeps the address of every buffer its
// kernels were given, and replays them for as long as it lives. So a buffer
// leased during a capture (Acquire with capturing set) is pinned: EndCapture
// returns the Pins of the capture, and until they are released (when the
// graph is destroyed) growth and Drop retire the buffer instead of freeing
// it. A retired buffer is freed when its last Pins are released; Close frees
// everything, pinned or not.
//
// A capture the Pool was not told about (Acquire with capturing set on a
// stream between no BeginCapture and EndCapture: other code began it on the
// same CUstream) ends in a graph the Pool never sees destroyed, so a buffer
// leased into it is pinned for good: retired, never freed, until Close.
type Pool struct {
	alloc Allocator
	limit int64 // bytes per buffer; 0 = none

	mu       sync.RWMutex
	buffers  map[uintptr]*buffer  // the current buffer, by stream
	retained map[*buffer]struct{} // retired buffers that pins still hold
	total    int64                // bytes in buffers and retained
	closed   bool

	// capMu guards captured, tracked and every buffer's external, which
	// Acquire writes under the read lock.
	capMu    sync.Mutex
	captured map[uintptr][]*buffer // buffers leased by the capture in progress, by stream
	tracked  map[uintptr]bool      // streams between BeginCapture and EndCapture or AbortCapture
}

// buffer is one stream's allocation.
type buffer struct {
	ptr     uintptr
	bytes   int64
	stream  uintptr
	pins    int  // live Pins (captured graphs) that reference it
	dropped bool // its stream is gone: free it on the null stream
	// external: a capture the Pool was not told about leased it, so a graph
	// it cannot track may use it until Close.
	external bool
}

// New returns an empty pool that allocates with a. limitBytes caps each
// stream's buffer (the planner's ScratchLimitBytes); 0 means no limit.
func New(a Allocator, limitBytes int64) *Pool {
	return &Pool{
		alloc: a, limit: max(limitBytes, 0), buffers: map[uintptr]*buffer{},
		retained: map[*buffer]struct{}{}, captured: map[uintptr][]*buffer{}, tracked: map[uintptr]bool{},
	}
}

// Lease is a stream's scratch buffer, valid until Release. Ptr is the device
// address of at least the requested floats; Bytes is the buffer's whole size.
// A Lease is a value: release it exactly once (releasing a copy counts).
type Lease struct {
	Ptr   uintptr
	Bytes int64
	mu    *sync.RWMutex
}

// Release ends the lease. It is a no-op for the zero Lease.
func (l Lease) Release() {
	if l.mu != nil {
		l.mu.RUnlock()
	}
}

// Acquire returns stream's buffer holding at least floats f32 values, growing
// it if needed, and holds the pool's read lock until the Lease is released:
// hold it while enqueueing the kernels that use the buffer, then release it.
// floats == 0 returns the zero Lease without locking. When capturing is true
// the buffer is never grown: a buffer too small is an error wrapping
// ErrGrowDuringCapture, and the buffer is pinned for the capture (see
// EndCapture). A size over the limit is an error wrapping ErrOverLimit. When
// the buffer already suffices and the stream is not capturing, Acquire
// allocates nothing.
func (p *Pool) Acquire(stream uintptr, floats int64, capturing bool) (Lease, error) {
	if floats == 0 {
		return Lease{}, nil
	}
	need, err := p.bytesFor(stream, floats)
	if err != nil {
		return Lease{}, err
	}
	for {
		p.mu.RLock()
		if p.closed {
			p.mu.RUnlock()
			return Lease{}, fmt.Errorf("scratch: acquire on stream %#x: %w", stream, ErrClosed)
		}
		if b, ok := p.buffers[stream]; ok && b.bytes >= need {
			if capturing {
				p.capMu.Lock()
				if !p.tracked[stream] {
					b.external = true
				} else if l := p.captured[stream]; len(l) == 0 || l[len(l)-1] != b {
					p.captured[stream] = append(l, b)
				}
				p.capMu.Unlock()
			}
			return Lease{Ptr: b.ptr, Bytes: b.bytes, mu: &p.mu}, nil
		}
		p.mu.RUnlock()

		p.mu.Lock()
		err := p.growLocked(stream, need, capturing)
		p.mu.Unlock()
		if err != nil {
			return Lease{}, err
		}
		// Another goroutine may drop or close between the write lock and the
		// read lock; check again.
	}
}

// Reserve grows stream's buffer to hold at least floats f32 values, ahead of
// CUDA-graph capture on that stream; it must not be called while the stream
// is capturing.
func (p *Pool) Reserve(stream uintptr, floats int64) error {
	need, err := p.bytesFor(stream, floats)
	if err != nil || need == 0 {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.growLocked(stream, need, false)
}

// Drop frees stream's buffer in stream order, for when the stream is about to
// be destroyed; a buffer that a captured graph still pins is kept until its
// pins are released, and then freed on the null stream. It waits for
// outstanding leases. Dropping a stream without a buffer does nothing.
func (p *Pool) Drop(stream uintptr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.capMu.Lock()
	delete(p.captured, stream)
	delete(p.tracked, stream)
	p.capMu.Unlock()
	var err error
	if b, ok := p.buffers[stream]; ok {
		delete(p.buffers, stream)
		err = p.retireLocked(b)
	}
	// The stream is gone by the time pins release (or Close frees) any of
	// its buffers still held: those are freed on the null stream.
	for b := range p.retained {
		if b.stream == stream {
			b.dropped = true
		}
	}
	return err
}

// retireLocked frees b, which is no longer any stream's current buffer, or
// keeps it while pins or a capture in progress hold it. p.mu is write-locked.
func (p *Pool) retireLocked(b *buffer) error {
	if b.pins > 0 || p.inCapture(b) {
		p.retained[b] = struct{}{}
		return nil
	}
	delete(p.retained, b)
	p.total -= b.bytes
	stream := b.stream
	if b.dropped {
		stream = 0
	}
	if err := p.alloc.FreeAsync(b.ptr, stream); err != nil {
		return fmt.Errorf("scratch: free %d bytes on stream %#x: %w", b.bytes, stream, err)
	}
	return nil
}

// inCapture reports whether a capture in progress, or one the Pool was not
// told about, leased b.
func (p *Pool) inCapture(b *buffer) bool {
	p.capMu.Lock()
	defer p.capMu.Unlock()
	return b.external || slices.Contains(p.captured[b.stream], b)
}

// Pins are the buffers one captured graph references; Release them when the
// graph is destroyed and none of its launches can still be running. The zero
// Pins hold nothing.
type Pins struct {
	p    *Pool
	bufs []*buffer
}

// Len returns how many buffers the pins hold.
func (ps *Pins) Len() int { return len(ps.bufs) }

// EndCapture ends the pool's part of stream's capture: the buffers leased
// since BeginCapture stay alive until the returned Pins are released, whatever
// later growth or Drop does. Call it when the capture has produced a graph;
// AbortCapture when it has not.
func (p *Pool) EndCapture(stream uintptr) *Pins {
	p.capMu.Lock()
	leased := p.captured[stream]
	delete(p.captured, stream)
	delete(p.tracked, stream)
	p.capMu.Unlock()
	ps := &Pins{p: p}
	if len(leased) == 0 {
		return ps
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range leased {
		if !slices.Contains(ps.bufs, b) {
			ps.bufs = append(ps.bufs, b)
			b.pins++
		}
	}
	return ps
}

// BeginCapture starts tracking the buffers stream leases for a graph,
// forgetting those of any earlier capture that was neither ended nor aborted.
func (p *Pool) BeginCapture(stream uintptr) {
	p.AbortCapture(stream)
	p.capMu.Lock()
	p.tracked[stream] = true
	p.capMu.Unlock()
}

// AbortCapture forgets the buffers leased by stream's capture in progress
// (the capture failed, so no graph references them). A buffer that was
// retired meanwhile and is held by nothing else is freed.
func (p *Pool) AbortCapture(stream uintptr) {
	p.capMu.Lock()
	leased := p.captured[stream]
	delete(p.captured, stream)
	delete(p.tracked, stream)
	p.capMu.Unlock()
	if len(leased) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range leased {
		if _, ok := p.retained[b]; ok && !p.closed {
			_ = p.retireLocked(b) // best effort: nothing to report it to
		}
	}
}

// Release drops the pins; a retired buffer no other pins hold is freed. The
// graph must be destroyed and its launches finished. Releasing twice does
// nothing.
func (ps *Pins) Release() error {
	if ps == nil || ps.p == nil {
		return nil
	}
	p := ps.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, b := range ps.bufs {
		b.pins--
		if _, ok := p.retained[b]; ok && b.pins == 0 && !p.closed {
			errs = append(errs, p.retireLocked(b))
		}
	}
	ps.bufs, ps.p = nil, nil
	return errors.Join(errs...)
}

// Close frees every buffer in its stream's order, pinned ones included (the
// graphs that pin them must not be launched again), and makes later Acquire
// and Reserve calls fail with ErrClosed. It waits for outstanding leases.
// Closing twice does nothing.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for _, stream := range slices.Sorted(maps.Keys(p.buffers)) {
		b := p.buffers[stream]
		if err := p.alloc.FreeAsync(b.ptr, stream); err != nil {
			errs = append(errs, fmt.Errorf("scratch: free %d bytes on stream %#x: %w", b.bytes, stream, err))
		}
	}
	for b := range p.retained {
		stream := b.stream
		if b.dropped {
			stream = 0
		}
		if err := p.alloc.FreeAsync(b.ptr, stream); err != nil {
			errs = append(errs, fmt.Errorf("scratch: free %d retained bytes: %w", b.bytes, err))
		}
	}
	clear(p.buffers)
	clear(p.retained)
	p.total = 0
	return errors.Join(errs...)
}

// Bytes returns the size of stream's current buffer, 0 when it has none.
func (p *Pool) Bytes(stream uintptr) int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if b, ok := p.buffers[stream]; ok {
		return b.bytes
	}
	return 0
}

// RetainedBytes returns the size of the retired buffers that captured graphs
// still pin.
func (p *Pool) RetainedBytes() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var n int64
	for b := range p.retained {
		n += b.bytes
	}
	return n
}

// TotalBytes returns the size of all buffers together, retained ones included.
func (p *Pool) TotalBytes() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.total
}

// bytesFor converts a float count to bytes, checking the sign and the limit.
func (p *Pool) bytesFor(stream uintptr, floats int64) (int64, error) {
	switch {
	case floats < 0:
		return 0, fmt.Errorf("scratch: stream %#x: floats=%d is negative", stream, floats)
	case floats > math.MaxInt64/floatBytes,
		p.limit > 0 && floats*floatBytes > p.limit:
		return 0, fmt.Errorf("scratch: stream %#x needs %d floats, more than the %d-byte limit: %w",
			stream, floats, p.limit, ErrOverLimit)
	}
	return floats * floatBytes, nil
}

// growLocked makes stream's buffer at least need bytes. p.mu is write-locked.
func (p *Pool) growLocked(stream uintptr, need int64, capturing bool) error {
	if p.closed {
		return fmt.Errorf("scratch: grow on stream %#x: %w", stream, ErrClosed)
	}
	old, had := p.buffers[stream]
	var oldBytes int64
	if had {
		oldBytes = old.bytes
	}
	if oldBytes >= need {
		return nil // another goroutine grew it first
	}
	if capturing {
		return fmt.Errorf("scratch: stream %#x has %d bytes and needs %d: %w", stream, oldBytes, need, ErrGrowDuringCapture)
	}
	size := need
	if size <= math.MaxInt64-(Granularity-1) {
		size = (size + Granularity - 1) / Granularity * Granularity
	}
	if p.limit > 0 {
		size = min(size, p.limit) // need ≤ limit was checked
	}
	ptr, err := p.alloc.AllocAsync(size, stream)
	if err != nil {
		return fmt.Errorf("scratch: allocate %d bytes on stream %#x: %w", size, stream, err)
	}
	p.buffers[stream] = &buffer{ptr: ptr, bytes: size, stream: stream}
	p.total += size
	if had {
		// No lease is outstanding (the write lock is held), and the free is
		// ordered after every kernel enqueued on the stream; a buffer a
		// captured graph pins is kept instead.
		if err := p.retireLocked(old); err != nil {
			return fmt.Errorf("scratch: the old buffer: %w", err)
		}
	}
	return nil
}
