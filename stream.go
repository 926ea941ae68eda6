package pagedkv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/scratch"
)

// faultBytes is the size of a stream's fault record: four uint64 {code, a, b, c}
// (kernels_src/common.cuh).
const faultBytes = 32

// streamRecordBytes is the device memory a Stream owns: its fault record.
const streamRecordBytes = faultBytes

// FaultCode says which device-resident index a FaultError is about (the
// codes kernels_src/common.cuh writes); each constant's comment says what
// the error's A, B and C hold.
type FaultCode int

const (
	// FaultSlotBeyondCache: A the token, B its slot (SlotMapping), C the
	// cache's slots. That token's rows were not written.
	FaultSlotBeyondCache FaultCode = 1
	// FaultRemapBeyondTable: A the token, B its slot, C SlotRemap's
	// entries. That token was not written.
	FaultRemapBeyondTable FaultCode = 2
	// FaultKVLenBeyondTable: A the sequence, B its KV length (for a cache
	// write a token's position + 1; negative: a decode's negative KVLens),
	// C MaxBlocksPerSeq·BlockSize. A decode clamped it; a cache write
	// skipped the tokens beyond.
	FaultKVLenBeyondTable FaultCode = 3
	// FaultBlockBeyondPool: A the sequence, B the block-table entry's
	// index, C the block id. Attention read block 0; a cache write skipped
	// that page's rows.
	FaultBlockBeyondPool FaultCode = 4
	// FaultPositionBeyond: A the token, B its position, C the cos/sin
	// table's rows. That token was not written.
	FaultPositionBeyond FaultCode = 5
	// FaultCuSeqlensInvalid: A the sequence, B CuSeqlensQ[A], C
	// CuSeqlensQ[A+1]. The varlen clamped the bounds (an empty sequence
	// where they decrease).
	FaultCuSeqlensInvalid FaultCode = 6
	// FaultPosOffsetBeyond: A the sequence, B PosOffsets[A], C
	// MaxBlocksPerSeq·BlockSize. The varlen cut the sequence's KV there (a
	// negative offset: used 0).
	FaultPosOffsetBeyond FaultCode = 7
)

// FaultError is a bad device-resident index found by a kernel: the first one
// recorded on a stream since its last check.
type FaultError struct {
	Code    FaultCode
	A, B, C int64 // the code's operands (see FaultCode's constants)
}

// Error says which device-resident index was bad, its value, the bound it
// broke, and what the kernel did instead.
func (e *FaultError) Error() string {
	switch e.Code {
	case FaultSlotBeyondCache:
		return fmt.Sprintf("pagedkv: SlotMapping[%d]=%d is outside the cache of %d slots; that row was not touched", e.A, e.B, e.C)
	case FaultRemapBeyondTable:
		return fmt.Sprintf("pagedkv: token %d has slot %d, outside SlotRemap of %d entries; that token was not written", e.A, e.B, e.C)
	case FaultKVLenBeyondTable:
		// Only a decode records a negative length: a cache write reports a
		// negative position as FaultPositionBeyond.
		if e.B < 0 {
			return fmt.Sprintf("pagedkv: KVLens[%d]=%d is negative; the decode used length 0", e.A, e.B)
		}
		return fmt.Sprintf("pagedkv: KVLens[%d]=%d exceeds MaxBlocksPerSeq·BlockSize=%d (a decode's KV length, or for a cache write a token's position + 1); a decode clamped it, a cache write skipped the tokens beyond", e.A, e.B, e.C)
	case FaultPositionBeyond:
		return fmt.Sprintf("pagedkv: position %d of token %d is outside the cos/sin table of %d rows; that token was not written", e.B, e.A, e.C)
	case FaultCuSeqlensInvalid:
		return fmt.Sprintf("pagedkv: CuSeqlensQ[%d..%d] = %d..%d decreases or leaves 0..NumTokens; the varlen clamped it (an empty sequence where it decreases)", e.A, e.A+1, e.B, e.C)
	case FaultPosOffsetBeyond:
		if e.B < 0 {
			return fmt.Sprintf("pagedkv: PosOffsets[%d]=%d is negative; the varlen used 0", e.A, e.B)
		}
		return fmt.Sprintf("pagedkv: PosOffsets[%d]=%d puts the sequence's KV past MaxBlocksPerSeq·BlockSize=%d; the varlen cut its KV there", e.A, e.B, e.C)
	case FaultBlockBeyondPool:
		// The record holds no room for the pool size, so the text names
		// the bound instead of a number.
		where := "is outside the pool (block ids 0..NumBlocks-1 of that call)"
		if e.C < 0 {
			where = "is negative, not a block id"
		}
		return fmt.Sprintf("pagedkv: BlockTables[%d][%d]=%d %s; a decode read block 0 instead, a cache write skipped that page's rows", e.A, e.B, e.C, where)
	}
	return fmt.Sprintf("pagedkv: unknown device fault code %d (%d, %d, %d)", e.Code, e.A, e.B, e.C)
}

// Stream is a CUDA stream of a Runtime with its own fault record. Ops on one
// stream run in order; ops on different streams may overlap (order them with
// an Event: Record on one, Wait on the other). A Stream may be used from any
// goroutine, but ops enqueued on one stream from several goroutines at once
// run in an unspecified order.
//
// A Stream either owns its CUstream (NewStream; Close destroys it) or wraps
// one that other code owns (WrapStream; Close leaves it alone).
type Stream struct {
	r     *Runtime
	s     driver.Stream
	fault driver.DevicePtr
	// holds counts who keeps fault allocated: the Stream until Close, and
	// each Graph captured on it until the graph's Close.
	holds *faultHolds
	// owned is false for a wrapped CUstream: Close then releases what
	// pagedkv added (fault record, scratch) in stream order and never
	// destroys or waits for the stream.
	owned bool
	// closed is set by Close (and Runtime.Close): every later use is
	// refused before it reaches the driver.
	closed atomic.Bool
}

// LegacyStream is the handle WrapStream takes for the legacy default stream
// (CU_STREAM_LEGACY), the stream a zero cudaStream_t or CUstream means to the
// CUDA APIs. Work on it waits for, and is waited for by, all work on the
// device's blocking streams (those created without the non-blocking flag),
// so it serializes with them; pagedkv's own streams are non-blocking. It
// cannot be captured into a graph.
const LegacyStream uintptr = uintptr(driver.StreamLegacy)

// NewStream creates a non-blocking stream.
func (r *Runtime) NewStream() (*Stream, error) {
	if err := r.live(); err != nil {
		return nil, err
	}
	st := &Stream{r: r, owned: true, holds: newFaultHolds()}
	err := r.do(func() error {
		var err error
		if st.s, err = driver.StreamCreate(driver.StreamNonBlocking); err != nil {
			return err
		}
		if st.fault, err = driver.MemAlloc(streamRecordBytes); err != nil {
			return err
		}
		if err := driver.MemsetD8Async(st.fault, 0, faultBytes, st.s); err != nil {
			return err
		}
		return st.s.Synchronize()
	})
	if err != nil {
		return nil, err
	}
	r.streamMu.Lock()
	r.streams[st] = struct{}{}
	r.streamMu.Unlock()
	return st, nil
}

// WrapStream returns a Stream over handle, a CUstream that other code created
// and owns (an engine's stream, or one of another CUDA library), so that
// pagedkv ops run in order with that code's work on it.
//
// handle must be a live stream of the primary context of r's device: the
// context Runtime uses, and the one the CUDA runtime API (cudaStreamCreate)
// uses, so a cudaStream_t of the same device qualifies; a stream of a context
// made with cuCtxCreate does not. WrapStream checks the context
// (cuStreamGetCtx) and rejects a stream of any other; a value that is not a
// stream at all is undefined behavior in the driver and cannot be detected.
//
// Rejected, as ErrInvalidArgument: 0, the value an unset handle has, which
// the driver would take for the legacy default stream (pass LegacyStream to
// mean that stream); CU_STREAM_PER_THREAD, which names a different stream
// on each OS thread while Go moves goroutines between threads; and a handle
// that a Stream of r already uses (its own, NewStream's, or one wrapped and
// not closed yet): split-K scratch is kept per CUstream, so two Streams over
// one could free each other's scratch. Wrapping a stream that is being
// captured into a graph is an error too: wrap it before BeginCapture.
//
// WrapStream enqueues the zeroing of the Stream's fault record on handle and
// waits for it, so it returns once the work already enqueued on handle has
// finished.
//
// # Ownership
//
// The CUstream stays the caller's: pagedkv never destroys it, and the
// caller must not destroy it before Close (or Runtime.Close) has returned,
// since Close enqueues on it. Close releases only what pagedkv added: the
// fault record and the stream's split-K scratch, freed in stream order
// (after every op already enqueued on it) without waiting for the stream.
// Close graphs captured on the stream first, as for any Stream.
func (r *Runtime) WrapStream(handle uintptr) (*Stream, error) {
	if err := r.live(); err != nil {
		return nil, err
	}
	switch driver.Stream(handle) {
	case 0:
		return nil, errf("WrapStream(0): handle 0 is what an unset handle looks like; to run on the legacy default stream pass pagedkv.LegacyStream (%#x)", LegacyStream)
	case driver.StreamPerThread:
		return nil, errf("WrapStream(%#x): CU_STREAM_PER_THREAD names each OS thread's own default stream, and Go moves goroutines between threads; allowed: a created stream or pagedkv.LegacyStream", handle)
	}
	st := &Stream{r: r, s: driver.Stream(handle), holds: newFaultHolds()}
	err := r.do(func() error {
		ctx, err := st.s.Context()
		if err != nil {
			return fmt.Errorf("pagedkv: WrapStream(%#x): %w", handle, err)
		}
		if ctx != r.ctx {
			return errf("WrapStream(%#x): the stream belongs to context %#x, not to the primary context %#x of device %d that the Runtime uses", handle, uintptr(ctx), uintptr(r.ctx), r.info.Ordinal)
		}
		capturing, err := st.s.IsCapturing()
		if err != nil {
			return err
		}
		if capturing {
			return fmt.Errorf("pagedkv: WrapStream(%#x): the stream is being captured into a graph; wrap it before the capture begins", handle)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.streamMu.Lock()
	for other := range r.streams {
		if other.s == st.s {
			r.streamMu.Unlock()
			return nil, errf("WrapStream(%#x): a Stream of this Runtime already uses that CUstream; use that Stream, or Close it first", handle)
		}
	}
	// Registered before the driver work below, so a concurrent WrapStream of
	// the same handle fails the check above.
	r.streams[st] = struct{}{}
	r.streamMu.Unlock()
	err = r.do(func() error {
		// Pool memory freed in stream order by Close, which must not wait for
		// a stream it does not own. The synchronize makes the allocation and
		// the zeroing complete, so a graph captured on this stream may be
		// replayed on any other.
		var err error
		if st.fault, err = driver.MemAllocAsync(streamRecordBytes, st.s); err != nil {
			return err
		}
		if err := driver.MemsetD8Async(st.fault, 0, faultBytes, st.s); err != nil {
			return err
		}
		return st.s.Synchronize()
	})
	if err != nil {
		r.streamMu.Lock()
		delete(r.streams, st)
		r.streamMu.Unlock()
		if st.fault != 0 {
			err = errors.Join(err, r.do(func() error { return driver.MemFreeAsync(st.fault, st.s) }))
		}
		return nil, fmt.Errorf("pagedkv: WrapStream(%#x): %w", handle, err)
	}
	return st, nil
}

// Handle is the raw CUstream, for interoperation with other CUDA libraries.
// For a wrapped stream it is the handle given to WrapStream; 0 for a nil
// Stream.
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return uintptr(s.s)
}

// use is the first check of every method of s and of every function that
// takes a stream, op: s is an open Stream of an open Runtime.
func (s *Stream) use(op string) error {
	if s == nil {
		return errf("%s: the *Stream is nil; use Runtime.Stream() or a Stream from NewStream or WrapStream", op)
	}
	return s.r.on(op, s)
}

// Synchronize waits until every op enqueued on the stream has finished.
func (s *Stream) Synchronize() error {
	if err := s.use("Stream.Synchronize"); err != nil {
		return err
	}
	return s.r.do(s.s.Synchronize)
}

// Close releases the stream. For a stream from NewStream it waits for the
// stream, frees its fault record and scratch buffers and destroys it. For a
// wrapped stream (WrapStream) it frees the fault record and scratch buffers
// in stream order, after every op already enqueued, without waiting and
// without destroying the CUstream; it is an error while the stream is being
// captured (end the capture first). The Runtime's own stream is closed by
// Runtime.Close. Closing a closed (or nil) Stream does nothing; any other
// use of it afterwards is refused. A Graph captured on the stream keeps its
// fault record allocated until the graph's Close (see Graph).
func (s *Stream) Close() error {
	if s == nil || s.r == nil || s.closed.Load() {
		return nil
	}
	if s == s.r.stream {
		return fmt.Errorf("pagedkv: the Runtime's own stream is closed by Runtime.Close")
	}
	return s.destroy()
}

func (s *Stream) destroy() error {
	if !s.owned {
		return s.release()
	}
	s.r.streamMu.Lock()
	_, ok := s.r.streams[s]
	delete(s.r.streams, s)
	s.r.streamMu.Unlock()
	if !ok {
		return nil
	}
	s.closed.Store(true)
	if err := errors.Join(s.r.scratch.Drop(uintptr(s.s)), s.r.counters.Drop(uintptr(s.s))); err != nil {
		return err
	}
	return s.r.do(func() error {
		if err := s.s.Synchronize(); err != nil {
			return err
		}
		if s.holds.closeStream() {
			if err := driver.MemFree(s.fault); err != nil {
				return err
			}
		}
		return s.s.Destroy()
	})
}

// release is destroy for a wrapped stream: everything in stream order,
// nothing that waits, and the CUstream left to its owner.
func (s *Stream) release() error {
	s.r.streamMu.Lock()
	_, ok := s.r.streams[s]
	s.r.streamMu.Unlock()
	if !ok {
		return nil
	}
	// Frees enqueued during a capture would be captured instead of run.
	capturing, err := s.capturing()
	if err != nil {
		return err
	}
	if capturing {
		return fmt.Errorf("pagedkv: Stream.Close of wrapped stream %#x during graph capture; end the capture first", uintptr(s.s))
	}
	s.r.streamMu.Lock()
	_, ok = s.r.streams[s]
	delete(s.r.streams, s)
	s.r.streamMu.Unlock()
	if !ok {
		return nil
	}
	s.closed.Store(true)
	errs := []error{s.r.scratch.Drop(uintptr(s.s)), s.r.counters.Drop(uintptr(s.s))}
	fault := s.fault
	// Kernels given a null record track no faults (common.cuh): a launch on
	// the Stream after Close, a bug, then cannot write freed memory.
	s.fault = 0
	if fault != 0 && s.holds.closeStream() {
		errs = append(errs, s.r.do(func() error { return driver.MemFreeAsync(fault, s.s) }))
	}
	return errors.Join(errs...)
}

// capturing reports whether the stream is being captured into a graph.
func (s *Stream) capturing() (bool, error) {
	var c bool
	err := s.r.do(func() error {
		var err error
		c, err = s.s.IsCapturing()
		return err
	})
	return c, err
}

// Fault waits for the stream, then returns the first bad device-resident
// index a kernel recorded on it since the last call (a *FaultError), or nil,
// and clears the record.
func (s *Stream) Fault() error {
	if err := s.use("Stream.Fault"); err != nil {
		return err
	}
	var rec [4]uint64
	err := s.r.do(func() error {
		if err := s.s.Synchronize(); err != nil {
			return err
		}
		if err := driver.MemcpyDtoH(unsafe.Pointer(&rec[0]), s.fault, faultBytes); err != nil {
			return err
		}
		if rec[0] == 0 {
			return nil
		}
		// Cleared in stream order: the synchronous memset runs on the
		// legacy stream, which a non-blocking stream's next kernel does
		// not wait for.
		return driver.MemsetD8Async(s.fault, 0, faultBytes, s.s)
	})
	if err != nil {
		return err
	}
	if rec[0] == 0 {
		return nil
	}
	return &FaultError{Code: FaultCode(rec[0]), A: int64(rec[1]), B: int64(rec[2]), C: int64(rec[3])}
}

// afterLaunch applies the CHECK_BOUNDS mode: outside graph capture it waits
// for the stream and returns any recorded fault.
func (s *Stream) afterLaunch(capturing bool) error {
	if !s.r.cfg.CheckBounds || capturing {
		return nil
	}
	return s.Fault()
}

// BeginCapture starts capturing the ops enqueued on s into a graph (relaxed
// mode: goroutines move between OS threads, so thread-local capture modes do
// not fit Go). Reserve first (Runtime.ReserveDecode, ReserveVarlen or
// ReserveSequence for every split-K call the graph will hold, or give each
// its own Workspace): scratch growth during capture is an error
// (scratch.ErrGrowDuringCapture), never an allocation.
//
// To serve every batch size, capture one graph per size, in any order: each
// graph keeps the scratch it captured alive until Graph.Close, so a later
// capture or eager call that grows the stream's scratch never invalidates an
// earlier graph (the old buffer is retired, not freed).
//
// A capture begun by other code on the Stream's handle (cuStreamBeginCapture
// through another binding) is handled too: every op asks the driver whether
// its stream is capturing, plans for the graph and never grows scratch
// during it (reserve first, as here). pagedkv cannot see when such a graph
// is destroyed, so the scratch buffers leased into it stay allocated until
// the Runtime is closed.
func (s *Stream) BeginCapture() error {
	if err := s.use("Stream.BeginCapture"); err != nil {
		return err
	}
	s.r.scratch.BeginCapture(uintptr(s.s))
	s.r.counters.BeginCapture(uintptr(s.s))
	err := s.r.do(func() error { return s.s.BeginCapture(driver.CaptureModeRelaxed) })
	if err != nil {
		s.r.scratch.AbortCapture(uintptr(s.s))
		s.r.counters.AbortCapture(uintptr(s.s))
	}
	return err
}

// Graph is an instantiated CUDA graph captured from a Stream.
//
// # Lifetime
//
// A Graph owns the pool scratch its split-K calls captured: those buffers
// stay allocated, whatever later calls do to the stream's pool, until Close
// (or Runtime.Close, which frees all scratch: close graphs first). The
// graph's kernels use the scratch of the stream it was captured on, so
// replays of it must not overlap other work that uses that stream's scratch:
// replay it on its own stream (in order with that stream's eager ops), or
// on another stream only when nothing else runs on the first; two graphs
// captured on one stream must not be replayed concurrently. Calls given
// their own Workspace have none of these limits beyond the workspace
// itself, which must outlive the graph.
//
// Its kernels record faults (a bad slot, block-table entry or length) in
// the fault record of the stream it was captured on, whichever stream
// replays it: that stream's Fault reports them. Fault waits for that
// stream only, so after a replay on another stream synchronize the
// replaying stream (or order the two by an Event) before asking. The record stays allocated
// until the graph's Close even when the stream is closed first (its Fault
// is then out of reach, and faults of such replays go unreported). A graph
// that other code captured on the Stream's handle, outside BeginCapture and
// EndCapture, writes the record too, but pagedkv cannot see its end: keep
// the Stream open while such a graph may run.
type Graph struct {
	r    *Runtime
	g    driver.Graph
	exec driver.GraphExec
	pins [2]*scratch.Pins // the split-K scratch and counters it captured
	// fault is the fault record of the stream it was captured on, which its
	// kernels write at every replay; holds keeps it allocated until Close.
	fault driver.DevicePtr
	holds *faultHolds
	// closed makes Close idempotent and Launch after Close an error.
	closed atomic.Bool
}

// EndCapture ends the capture begun by BeginCapture and instantiates the graph.
func (s *Stream) EndCapture() (*Graph, error) {
	if err := s.use("Stream.EndCapture"); err != nil {
		return nil, err
	}
	gr := &Graph{r: s.r}
	err := s.r.do(func() error {
		var err error
		if gr.g, err = s.s.EndCapture(); err != nil {
			return err
		}
		gr.exec, err = gr.g.Instantiate()
		if err != nil {
			err = errors.Join(err, gr.g.Destroy())
		}
		return err
	})
	if err != nil {
		s.r.scratch.AbortCapture(uintptr(s.s))
		s.r.counters.AbortCapture(uintptr(s.s))
		return nil, err
	}
	gr.pins = [2]*scratch.Pins{s.r.scratch.EndCapture(uintptr(s.s)), s.r.counters.EndCapture(uintptr(s.s))}
	gr.fault, gr.holds = s.fault, s.holds
	gr.holds.holdGraph()
	return gr, nil
}

// Launch replays the graph on stream s, a Stream of the graph's Runtime.
func (g *Graph) Launch(s *Stream) error {
	if g == nil {
		return errf("Graph.Launch: the *Graph is nil")
	}
	if err := g.r.on("Graph.Launch", s); err != nil {
		return err
	}
	if g.closed.Load() {
		return errf("Graph.Launch: the graph is closed")
	}
	return g.r.do(func() error { return g.exec.Launch(s.s) })
}

// Close destroys the graph. It waits for the device to finish the work
// already enqueued (the graph's replays among it) before the scratch the
// graph pinned may be freed. Closing a closed (or nil) Graph does nothing.
func (g *Graph) Close() error {
	if g == nil || g.closed.Swap(true) {
		return nil
	}
	if g.r.closed.Load() {
		return nil // destroyed with the Runtime's context
	}
	err := g.r.do(func() error {
		if err := g.exec.Destroy(); err != nil {
			return err
		}
		if err := g.g.Destroy(); err != nil {
			return err
		}
		if err := driver.CtxSynchronize(); err != nil {
			return err
		}
		if g.holds.releaseGraph() {
			return driver.MemFree(g.fault)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return errors.Join(g.pins[0].Release(), g.pins[1].Release())
}

// Timer measures device time between two points of a stream with CUDA events.
type Timer struct {
	s          *Stream
	start, end driver.Event
	closed     bool
}

// NewTimer creates the two events of a timer on stream s.
func (s *Stream) NewTimer() (*Timer, error) {
	if err := s.use("Stream.NewTimer"); err != nil {
		return nil, err
	}
	t := &Timer{s: s}
	err := s.r.do(func() error {
		var err error
		if t.start, err = driver.EventCreate(driver.EventDefault); err != nil {
			return err
		}
		t.end, err = driver.EventCreate(driver.EventDefault)
		return err
	})
	return t, err
}

// Start records the start event.
func (t *Timer) Start() error {
	if err := t.use("Timer.Start"); err != nil {
		return err
	}
	return t.s.r.do(func() error { return t.start.Record(t.s.s) })
}

// use checks that t is an open Timer on an open Stream.
func (t *Timer) use(op string) error {
	if t == nil {
		return errf("%s: the *Timer is nil; create one with Stream.NewTimer", op)
	}
	if t.closed {
		return errf("%s: the Timer is closed", op)
	}
	return t.s.use(op)
}

// Stop records the end event, waits for it and returns the milliseconds since Start.
func (t *Timer) Stop() (float32, error) {
	if err := t.use("Timer.Stop"); err != nil {
		return 0, err
	}
	var ms float32
	err := t.s.r.do(func() error {
		if err := t.end.Record(t.s.s); err != nil {
			return err
		}
		if err := t.end.Synchronize(); err != nil {
			return err
		}
		var err error
		ms, err = driver.EventElapsed(t.start, t.end)
		return err
	})
	return ms, err
}

// Close destroys the timer's events. Closing a closed (or nil) Timer does
// nothing. A Timer, unlike an Event, is for one goroutine at a time.
func (t *Timer) Close() error {
	if t == nil || t.closed {
		return nil
	}
	t.closed = true
	if t.s.r.closed.Load() {
		return nil // destroyed with the Runtime's context
	}
	return t.s.r.do(func() error {
		if err := t.start.Destroy(); err != nil {
			return err
		}
		return t.end.Destroy()
	})
}

// Event is a CUDA event of a Runtime: a point in a stream's work that other
// streams and the host can wait for. Stream.Record marks the point,
// Stream.Wait makes another stream's later work wait for it on the device
// (the host does not block), and Synchronize blocks the host until it. An
// Event may be recorded again; Wait and Synchronize use the most recent
// Record before them. Events are created with CU_EVENT_DISABLE_TIMING,
// which makes them cheaper to record and wait on; time with Stream.NewTimer.
//
// # Graph capture
//
// Recording on a stream that is being captured (Stream.BeginCapture) is
// allowed and records a point of the graph instead: another stream that
// Waits on it joins the capture (fork), and everything it enqueues
// afterwards is captured, not run, until the stream that began the capture
// Waits on an event recorded on the joined stream (join), which it must do
// before EndCapture. Such an event cannot be synchronized on
// (CUDA_ERROR_CAPTURED_EVENT) until it is recorded again outside a capture.
// A captured graph pins the split-K scratch of the stream that began the
// capture only: give split-K calls enqueued on a joined stream their own
// Workspace.
//
// An Event is safe for concurrent use by multiple goroutines; Close must be
// the last call. A cleanup destroys it if it becomes unreachable first.
type Event struct {
	r       *Runtime
	mu      sync.RWMutex // read-held by every use, write-held by Close
	e       driver.Event // 0 once closed
	cleanup runtime.Cleanup
}

// NewEvent creates an event (CU_EVENT_DISABLE_TIMING). Close it when done.
func (r *Runtime) NewEvent() (*Event, error) {
	if err := r.live(); err != nil {
		return nil, err
	}
	ev := &Event{r: r}
	err := r.do(func() error {
		var err error
		ev.e, err = driver.EventCreate(driver.EventDisableTiming)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pagedkv: creating an event on %s: %w", r.info.Name, err)
	}
	ev.cleanup = runtime.AddCleanup(ev, driverCleanup.run, driverCleanup{r, ev.e.Destroy})
	return ev, nil
}

// Close destroys the event without waiting for it: a Wait already enqueued
// on it still holds, and the driver releases the event once its recorded
// work is done. It is safe to call more than once.
func (e *Event) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e == 0 {
		return nil
	}
	h := e.e
	e.e = 0
	e.cleanup.Stop()
	if e.r.closed.Load() {
		return nil // destroyed with the Runtime's context
	}
	return e.r.do(h.Destroy)
}

// Synchronize blocks until the work of the event's most recent Record has
// finished (at once if it was never recorded).
func (e *Event) Synchronize() error {
	if e == nil {
		return errf("Event.Synchronize: the event is nil")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.e == 0 {
		return errf("Event.Synchronize: the event is closed")
	}
	if err := e.r.live(); err != nil {
		return err
	}
	return e.r.do(e.e.Synchronize)
}

// Record marks in e the work enqueued on s so far (cuEventRecord): e
// completes when s has finished it. e must belong to a Runtime of s's
// device. See Event for recording during graph capture.
func (s *Stream) Record(e *Event) error {
	if err := s.use("Stream.Record"); err != nil {
		return err
	}
	if e == nil {
		return errf("Stream.Record(nil): the event is nil")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.e == 0 {
		return errf("Stream.Record: the event is closed")
	}
	if e.r.closed.Load() {
		return errf("Stream.Record: the event's Runtime is closed")
	}
	if e.r.ctx != s.r.ctx {
		return errf("Stream.Record: the event belongs to device %d and the stream to device %d; record an event of the stream's own device", e.r.info.Ordinal, s.r.info.Ordinal)
	}
	return s.r.do(func() error { return e.e.Record(s.s) })
}

// Wait makes every op enqueued on s after this call wait until e completes
// (cuStreamWaitEvent): until the work of e's most recent Record before this
// call has finished. It returns at once; the wait happens on the device. An
// event never recorded is already complete. e may belong to a Runtime of
// another device. See Event for waiting during graph capture.
func (s *Stream) Wait(e *Event) error {
	if err := s.use("Stream.Wait"); err != nil {
		return err
	}
	if e == nil {
		return errf("Stream.Wait(nil): the event is nil")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.e == 0 {
		return errf("Stream.Wait: the event is closed")
	}
	if e.r.closed.Load() {
		return errf("Stream.Wait: the event's Runtime is closed")
	}
	return s.r.do(func() error { return s.s.WaitEvent(e.e) })
}

// faultHolds counts the holders of a stream's fault record: the Stream until
// its Close, and each Graph captured on it (BeginCapture, EndCapture) until
// the graph's Close, since the graph's kernels write the record at every
// replay, on whatever stream. The last holder to let go frees it.
type faultHolds struct {
	mu     sync.Mutex
	stream bool // the Stream has not closed
	graphs int
}

func newFaultHolds() *faultHolds { return &faultHolds{stream: true} }

// holdGraph adds a graph's hold.
func (h *faultHolds) holdGraph() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.graphs++
	h.mu.Unlock()
}

// closeStream drops the Stream's hold and reports whether the record is
// now to be freed (no graph holds it). A nil h (a Stream built without
// one) has only the Stream's hold.
func (h *faultHolds) closeStream() bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stream = false
	return h.graphs == 0
}

// releaseGraph drops a graph's hold and reports whether the record is now
// to be freed (the Stream has closed and no other graph holds it).
func (h *faultHolds) releaseGraph() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.graphs--
	return h.graphs == 0 && !h.stream
}
