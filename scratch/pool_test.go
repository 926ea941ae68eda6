package scratch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

// event is one call the fake allocator saw.
type event struct {
	ptr, stream uintptr
	bytes       int64
}

// fakeAllocator hands out fake device addresses and checks that every free is
// of a live pointer, on the stream it was allocated on, and not currently
// leased. Tests mark leases with lease and unlease.
type fakeAllocator struct {
	t *testing.T

	mu        sync.Mutex
	next      uintptr
	live      map[uintptr]event
	leased    map[uintptr]int
	allocs    []event
	frees     []event
	failAlloc error
	failFree  error
}

func newFake(t *testing.T) *fakeAllocator {
	t.Helper()
	f := &fakeAllocator{t: t, next: 0x7f0000000000, live: map[uintptr]event{}, leased: map[uintptr]int{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for ptr, n := range f.leased {
			assert.Zero(t, n, "pointer %#x still leased at the end", ptr)
		}
	})
	return f
}

func (f *fakeAllocator) AllocAsync(bytes int64, stream uintptr) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAlloc != nil {
		return 0, f.failAlloc
	}
	if bytes <= 0 {
		f.t.Errorf("AllocAsync(%d bytes) on stream %#x", bytes, stream)
	}
	f.next += 0x10000000
	e := event{ptr: f.next, stream: stream, bytes: bytes}
	f.live[e.ptr] = e
	f.allocs = append(f.allocs, e)
	return e.ptr, nil
}

func (f *fakeAllocator) FreeAsync(ptr, stream uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.live[ptr]
	switch {
	case !ok:
		f.t.Errorf("FreeAsync(%#x) of a pointer that is not live", ptr)
	case e.stream != stream && stream != 0: // 0: a retained buffer whose stream was dropped
		f.t.Errorf("FreeAsync(%#x) on stream %#x, allocated on stream %#x", ptr, stream, e.stream)
	case f.leased[ptr] > 0:
		f.t.Errorf("FreeAsync(%#x) while it is leased %d times", ptr, f.leased[ptr])
	}
	if f.failFree != nil {
		return f.failFree
	}
	delete(f.live, ptr)
	f.frees = append(f.frees, event{ptr: ptr, stream: stream, bytes: e.bytes})
	return nil
}

// lease marks l as in use and checks it is live and large enough.
func (f *fakeAllocator) lease(l Lease, floats int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.live[l.Ptr]
	if !ok {
		f.t.Errorf("leased pointer %#x is not live", l.Ptr)
	} else if e.bytes < floats*4 || e.bytes != l.Bytes {
		f.t.Errorf("lease %#x of %d bytes (allocated %d) for %d floats", l.Ptr, l.Bytes, e.bytes, floats)
	}
	f.leased[l.Ptr]++
}

func (f *fakeAllocator) unlease(l Lease) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leased[l.Ptr]--
}

// calls returns copies of the recorded allocations and frees.
func (f *fakeAllocator) calls() (allocs, frees []event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]event(nil), f.allocs...), append([]event(nil), f.frees...)
}

func (f *fakeAllocator) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// acquire acquires and marks a lease, and returns a func that unmarks and
// releases it.
func acquire(t *testing.T, f *fakeAllocator, p *Pool, stream uintptr, floats int64) (Lease, func()) {
	t.Helper()
	l, err := p.Acquire(stream, floats, false)
	require.NoError(t, err)
	f.lease(l, floats)
	return l, func() { f.unlease(l); l.Release() }
}

func TestAcquireGrows(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })

	first, release := acquire(t, f, p, 1, 1000)
	release()
	allocs, frees := f.calls()
	require.Len(t, allocs, 1)
	assert.Equal(t, event{ptr: first.Ptr, stream: 1, bytes: mib}, allocs[0], "rounded up to 1 MiB")
	assert.Empty(t, frees)
	assert.Equal(t, int64(mib), first.Bytes)

	// Up to the buffer's size: no growth.
	same, release := acquire(t, f, p, 1, mib/4)
	release()
	assert.Equal(t, first.Ptr, same.Ptr)
	allocs, _ = f.calls()
	assert.Len(t, allocs, 1)

	// Larger: a new buffer, the old one freed on the same stream.
	grown, release := acquire(t, f, p, 1, mib/4+1)
	release()
	assert.NotEqual(t, first.Ptr, grown.Ptr)
	assert.Equal(t, int64(2*mib), grown.Bytes)
	allocs, frees = f.calls()
	require.Len(t, allocs, 2)
	assert.Equal(t, event{ptr: grown.Ptr, stream: 1, bytes: 2 * mib}, allocs[1])
	assert.Equal(t, []event{{ptr: first.Ptr, stream: 1, bytes: mib}}, frees)
	assert.Equal(t, int64(2*mib), p.Bytes(1))
	assert.Equal(t, int64(2*mib), p.TotalBytes())

	// Smaller again: the large buffer stays.
	small, release := acquire(t, f, p, 1, 10)
	release()
	assert.Equal(t, grown.Ptr, small.Ptr)
}

func TestStreamsDoNotShare(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })

	a, release := acquire(t, f, p, 0xa, 100)
	release() // one lease at a time per goroutine: growing b would wait for a
	b, release := acquire(t, f, p, 0xb, 100)
	release()
	assert.NotEqual(t, a.Ptr, b.Ptr)
	allocs, _ := f.calls()
	require.Len(t, allocs, 2)
	assert.Equal(t, uintptr(0xa), allocs[0].stream)
	assert.Equal(t, uintptr(0xb), allocs[1].stream)
	assert.Equal(t, int64(mib), p.Bytes(0xa))
	assert.Equal(t, int64(mib), p.Bytes(0xb))
	assert.Zero(t, p.Bytes(0xc))
	assert.Equal(t, int64(2*mib), p.TotalBytes())
}

func TestZeroFloats(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	l, err := p.Acquire(1, 0, true)
	require.NoError(t, err)
	assert.Zero(t, l)
	l.Release()
	l.Release() // no lock taken, so any number of releases is harmless
	require.NoError(t, p.Reserve(1, 0))
	allocs, _ := f.calls()
	assert.Empty(t, allocs)

	_, err = p.Acquire(1, -1, false)
	assert.EqualError(t, err, "scratch: stream 0x1: floats=-1 is negative")
	assert.Error(t, p.Reserve(1, -1))
}

func TestLimit(t *testing.T) {
	f := newFake(t)
	p := New(f, 3*mib/2)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })

	// 1.25 MiB rounds to 2 MiB, which the 1.5 MiB limit trims.
	l, release := acquire(t, f, p, 7, 5*mib/16)
	release()
	assert.Equal(t, int64(3*mib/2), l.Bytes)

	// Exactly the limit fits without growing.
	l2, release := acquire(t, f, p, 7, 3*mib/8)
	release()
	assert.Equal(t, l.Ptr, l2.Ptr)

	_, err := p.Acquire(7, 3*mib/8+1, false)
	require.ErrorIs(t, err, ErrOverLimit)
	assert.EqualError(t, err, "scratch: stream 0x7 needs 393217 floats, more than the 1572864-byte limit: "+ErrOverLimit.Error())
	assert.ErrorIs(t, p.Reserve(7, 1<<40), ErrOverLimit)
	_, err = p.Acquire(7, 1<<62, false)
	assert.ErrorIs(t, err, ErrOverLimit, "overflowing byte count")

	allocs, _ := f.calls()
	assert.Len(t, allocs, 1, "nothing allocated over the limit")
	assert.Equal(t, int64(3*mib/2), p.Bytes(7))

	// Without a limit, a byte count that overflows int64 is still over it.
	unlimited := New(f, 0)
	_, err = unlimited.Acquire(1, 1<<62, false)
	assert.ErrorIs(t, err, ErrOverLimit)
}

func TestCapture(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })

	_, err := p.Acquire(3, 1000, true)
	require.ErrorIs(t, err, ErrGrowDuringCapture)
	assert.EqualError(t, err, "scratch: stream 0x3 has 0 bytes and needs 4000: "+ErrGrowDuringCapture.Error())
	allocs, _ := f.calls()
	assert.Empty(t, allocs, "no allocation during capture")

	require.NoError(t, p.Reserve(3, 600_000))
	assert.Equal(t, int64(3*mib), p.Bytes(3))
	require.NoError(t, p.Reserve(3, 1000), "a smaller reserve keeps the buffer")

	l, err := p.Acquire(3, 600_000, true)
	require.NoError(t, err)
	f.lease(l, 600_000)
	f.unlease(l)
	l.Release()

	// More than reserved still fails, and leaves the buffer alone.
	_, err = p.Acquire(3, 3*mib/4+1, true)
	assert.ErrorIs(t, err, ErrGrowDuringCapture)
	allocs, frees := f.calls()
	assert.Len(t, allocs, 1)
	assert.Empty(t, frees)
	assert.Equal(t, l.Ptr, allocs[0].ptr)
}

func TestAllocatorFailures(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	oom := errors.New("CUDA_ERROR_OUT_OF_MEMORY")

	l, release := acquire(t, f, p, 1, 100)
	release()

	f.failAlloc = oom
	_, err := p.Acquire(1, mib, false)
	require.ErrorIs(t, err, oom)
	assert.EqualError(t, err, "scratch: allocate 4194304 bytes on stream 0x1: CUDA_ERROR_OUT_OF_MEMORY")
	assert.Equal(t, int64(mib), p.Bytes(1), "the old buffer stays")
	f.failAlloc = nil

	again, release := acquire(t, f, p, 1, 100)
	release()
	assert.Equal(t, l.Ptr, again.Ptr)

	// A failed free of the old buffer is reported; the new buffer is in place.
	f.failFree = oom
	_, err = p.Acquire(1, mib, false)
	require.ErrorIs(t, err, oom)
	f.failFree = nil
	assert.Equal(t, int64(4*mib), p.Bytes(1))
	grown, release := acquire(t, f, p, 1, mib)
	release()
	assert.NotEqual(t, l.Ptr, grown.Ptr)
}

func TestDropAndClose(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	streams := []uintptr{1, 2, 3, 4}
	for i, s := range streams {
		_, release := acquire(t, f, p, s, int64(i+1)*mib/4)
		release()
	}
	// Grow one so an old buffer is already freed.
	_, release := acquire(t, f, p, 1, mib)
	release()
	require.Equal(t, int64(1+2+3+4+4-1)*mib, p.TotalBytes())

	require.NoError(t, p.Drop(2))
	require.NoError(t, p.Drop(2), "dropping twice does nothing")
	require.NoError(t, p.Drop(99), "dropping an unknown stream does nothing")
	assert.Zero(t, p.Bytes(2))
	assert.Equal(t, int64(1+3+4+4-1)*mib, p.TotalBytes())

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "closing twice does nothing")
	assert.Zero(t, p.TotalBytes())

	allocs, frees := f.calls()
	assert.Zero(t, f.liveCount(), "everything freed")
	assert.Len(t, frees, len(allocs), "each buffer freed exactly once")
	seen := map[uintptr]bool{}
	for _, e := range frees {
		assert.False(t, seen[e.ptr], "%#x freed twice", e.ptr)
		seen[e.ptr] = true
	}

	_, err := p.Acquire(1, 10, false)
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, p.Reserve(1, 10), ErrClosed)
}

func TestCloseReportsFreeErrors(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	for _, s := range []uintptr{1, 2} {
		require.NoError(t, p.Reserve(s, 10))
	}
	f.failFree = errors.New("CUDA_ERROR_ILLEGAL_ADDRESS")
	err := p.Close()
	assert.ErrorIs(t, err, f.failFree)
	assert.ErrorContains(t, err, "stream 0x1")
	assert.ErrorContains(t, err, "stream 0x2")
	assert.Zero(t, p.TotalBytes())
	f.failFree = nil
}

// TestDropWaitsForLeases checks that Drop (like growth and Close) waits for an
// outstanding lease instead of freeing under it.
func TestDropWaitsForLeases(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	l, release := acquire(t, f, p, 5, 100)

	dropped := make(chan error)
	go func() { dropped <- p.Drop(5) }()
	select {
	case err := <-dropped:
		t.Fatalf("Drop returned %v while a lease was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	_, frees := f.calls()
	assert.Empty(t, frees)

	release()
	require.NoError(t, <-dropped)
	_, frees = f.calls()
	assert.Equal(t, []event{{ptr: l.Ptr, stream: 5, bytes: mib}}, frees)
}

// TestConcurrentUse runs 32 goroutines over 8 streams that acquire, grow,
// reserve and drop at random; the fake allocator fails the test if a leased
// pointer is freed, a free lands on the wrong stream, or a lease is too small.
// Run it with -race.
func TestConcurrentUse(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	const (
		workers = 32
		streams = 8
	)
	deadline := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; time.Now().Before(deadline) || i < 50; i++ {
				stream := uintptr(1 + rng.IntN(streams))
				floats := 1 + rng.Int64N(4*mib) // up to 16 MiB
				switch r := rng.IntN(100); {
				case r < 2:
					if err := p.Drop(stream); err != nil {
						t.Error(err)
					}
				case r < 5:
					if err := p.Reserve(stream, floats); err != nil {
						t.Error(err)
					}
				default:
					// Capturing acquires may fail only by needing to grow.
					capturing := r < 15
					l, err := p.Acquire(stream, floats, capturing)
					if err != nil {
						if !capturing || !errors.Is(err, ErrGrowDuringCapture) {
							t.Error(err)
						}
						continue
					}
					f.lease(l, floats)
					runtime.Gosched() // "enqueue kernels"
					f.unlease(l)
					l.Release()
					if capturing {
						// The capture ends: a graph pins what it leased, or
						// it failed and pins nothing.
						if rng.IntN(2) == 0 {
							p.AbortCapture(stream)
						} else if err := p.EndCapture(stream).Release(); err != nil {
							t.Error(err)
						}
					}
				}
			}
		})
	}
	wg.Wait()

	var total int64
	for s := uintptr(1); s <= streams; s++ {
		total += p.Bytes(s)
	}
	assert.Equal(t, total+p.RetainedBytes(), p.TotalBytes())
	assert.Equal(t, int(p.countBuffers()), f.liveCount(), "pool and allocator agree on live buffers")

	require.NoError(t, p.Close())
	allocs, frees := f.calls()
	assert.Zero(t, f.liveCount())
	assert.Len(t, frees, len(allocs))
	t.Logf("%d allocations over the run", len(allocs))
}

func (p *Pool) countBuffers() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.buffers) + len(p.retained)
}

func TestAcquireNoAllocs(t *testing.T) {
	f := newFake(t)
	p := New(f, 64*mib)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	for s := uintptr(1); s <= 4; s++ {
		require.NoError(t, p.Reserve(s, 2*mib))
	}
	allocs := testing.AllocsPerRun(1000, func() {
		for s := uintptr(1); s <= 4; s++ {
			l, err := p.Acquire(s, 2*mib, true)
			if err != nil {
				t.Fatal(err)
			}
			l.Release()
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkAcquireRelease(b *testing.B) {
	p := New(benchAllocator{}, 0)
	if err := p.Reserve(1, mib); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Acquire(1, mib, false)
			if err != nil {
				panic(fmt.Sprint(err))
			}
			l.Release()
		}
	})
}

// benchAllocator hands out one fixed address.
type benchAllocator struct{}

func (benchAllocator) AllocAsync(int64, uintptr) (uintptr, error) { return 0x1000, nil }
func (benchAllocator) FreeAsync(uintptr, uintptr) error           { return nil }

// TestGraphPinsOutliveGrowth is the engine's sequence: capture a graph with a
// small buffer, grow the stream's buffer with a larger eager launch, replay
// the graph. The captured buffer must stay live until the graph's pins are
// released, and only then be freed.
func TestGraphPinsOutliveGrowth(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	const stream = 3
	require.NoError(t, p.Reserve(stream, mib))
	p.BeginCapture(stream)
	l, err := p.Acquire(stream, mib, true)
	require.NoError(t, err)
	captured := l.Ptr
	l.Release()
	pins := p.EndCapture(stream)
	assert.Equal(t, 1, pins.Len())

	// Eager growth after the capture: a new buffer, the old one kept.
	l, err = p.Acquire(stream, 8*mib, false)
	require.NoError(t, err)
	assert.NotEqual(t, captured, l.Ptr)
	l.Release()
	_, frees := f.calls()
	assert.Empty(t, frees, "the captured buffer was freed while its graph lives")
	assert.Equal(t, int64(4*mib), p.RetainedBytes())
	assert.Equal(t, int64(4*mib+32*mib), p.TotalBytes())

	require.NoError(t, pins.Release())
	require.NoError(t, pins.Release(), "releasing twice does nothing")
	_, frees = f.calls()
	require.Len(t, frees, 1)
	assert.Equal(t, event{ptr: captured, stream: stream, bytes: 4 * mib}, frees[0])
	assert.Zero(t, p.RetainedBytes())
	require.NoError(t, p.Close())
	assert.Zero(t, f.liveCount())
}

// TestGraphPinsOutliveDrop: a graph may be replayed on another stream after
// the stream it was captured on is gone; its buffer is freed on the null
// stream when the pins go.
func TestGraphPinsOutliveDrop(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	p.BeginCapture(5)
	require.NoError(t, p.Reserve(5, 100))
	l, err := p.Acquire(5, 100, true)
	require.NoError(t, err)
	l.Release()
	pins := p.EndCapture(5)
	require.NoError(t, p.Drop(5))
	_, frees := f.calls()
	assert.Empty(t, frees)
	require.NoError(t, pins.Release())
	_, frees = f.calls()
	require.Len(t, frees, 1)
	assert.Equal(t, uintptr(0), frees[0].stream)
	require.NoError(t, p.Close())
}

// TestGraphPinsOutliveGrowthAndDrop: a buffer a graph pins, retired by
// growth and then orphaned by Drop, is freed on the null stream (its own
// stream is destroyed), by the pins' release or by Close.
func TestGraphPinsOutliveGrowthAndDrop(t *testing.T) {
	for _, byClose := range []bool{false, true} {
		f := newFake(t)
		p := New(f, 0)
		require.NoError(t, p.Reserve(6, mib))
		p.BeginCapture(6)
		l, err := p.Acquire(6, mib, true)
		require.NoError(t, err)
		old := l.Ptr
		l.Release()
		pins := p.EndCapture(6)
		require.NoError(t, p.Reserve(6, 8*mib)) // retires the pinned buffer
		require.NoError(t, p.Drop(6))
		if byClose {
			require.NoError(t, p.Close())
		} else {
			require.NoError(t, pins.Release())
		}
		// Drop freed the current buffer on its stream, still alive then;
		// the pinned one goes later, on the null stream.
		_, frees := f.calls()
		require.Len(t, frees, 2)
		assert.Equal(t, uintptr(6), frees[0].stream)
		assert.Equal(t, event{ptr: old, stream: 0, bytes: 4 * mib}, frees[1], "the pinned buffer, freed after its stream was destroyed")
		require.NoError(t, p.Close())
		require.NoError(t, pins.Release())
	}
}

// TestCaptureInProgressPins: growth during another goroutine's capture on the
// same stream (which the API forbids, but must not corrupt memory) keeps the
// buffer; aborting the capture frees it.
func TestCaptureInProgressPins(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	require.NoError(t, p.Reserve(2, 10))
	p.BeginCapture(2)
	l, err := p.Acquire(2, 10, true)
	require.NoError(t, err)
	l.Release()
	require.NoError(t, p.Reserve(2, 4*mib))
	_, frees := f.calls()
	assert.Empty(t, frees)
	p.AbortCapture(2)
	_, frees = f.calls()
	assert.Len(t, frees, 1)
	assert.Zero(t, p.RetainedBytes())

	// Close frees pinned buffers too.
	p.BeginCapture(2)
	l, err = p.Acquire(2, 10, true)
	require.NoError(t, err)
	l.Release()
	pins := p.EndCapture(2)
	require.NoError(t, p.Reserve(2, 8*mib))
	require.NoError(t, p.Close())
	assert.Zero(t, f.liveCount())
	require.NoError(t, pins.Release(), "pins released after Close do nothing")
	assert.Zero(t, f.liveCount())
}

// TestExternalCapturePinsForGood: a capture the pool was not told about
// (other code began it on the stream's handle) leaves a graph whose end the
// pool never sees, so the buffer it leased is never freed before Close,
// whatever growth, later captures of the pool's own or Drop do.
func TestExternalCapturePinsForGood(t *testing.T) {
	f := newFake(t)
	p := New(f, 0)
	const stream = 4
	require.NoError(t, p.Reserve(stream, mib))
	l, err := p.Acquire(stream, mib, true) // no BeginCapture: someone else's capture
	require.NoError(t, err)
	external := l.Ptr
	l.Release()

	l, err = p.Acquire(stream, 8*mib, false) // eager growth retires it
	require.NoError(t, err)
	l.Release()
	p.BeginCapture(stream) // a capture of the pool's own, then its abort
	p.AbortCapture(stream)
	p.BeginCapture(stream)
	l, err = p.Acquire(stream, mib, true)
	require.NoError(t, err)
	l.Release()
	pins := p.EndCapture(stream)
	require.NoError(t, pins.Release())
	require.NoError(t, p.Drop(stream))
	_, frees := f.calls()
	for _, e := range frees {
		assert.NotEqual(t, external, e.ptr, "the externally captured buffer was freed")
	}
	assert.Equal(t, int64(4*mib), p.RetainedBytes(), "the external graph's buffer is held")

	// A tracked capture's buffers still go with their pins.
	p2 := New(newFake(t), 0)
	require.NoError(t, p2.Reserve(1, mib))
	p2.BeginCapture(1)
	l, err = p2.Acquire(1, mib, true)
	require.NoError(t, err)
	l.Release()
	pins = p2.EndCapture(1)
	require.NoError(t, p2.Reserve(1, 8*mib))
	assert.Equal(t, int64(4*mib), p2.RetainedBytes())
	require.NoError(t, pins.Release())
	assert.Zero(t, p2.RetainedBytes())
	require.NoError(t, p2.Close())

	require.NoError(t, p.Close())
	assert.Zero(t, f.liveCount(), "Close frees it")
}
