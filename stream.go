package pagedkv

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/scratch"
)

// faultBytes is the size of a stream's fault record: four uint64 {code, a, b, c}
// (kernels_src/common.cuh).
const faultBytes = 32

// Fault codes, as kernels_src/common.cuh writes them.
const (
	faultSlotBeyondCache  = 1
	faultRemapBeyondTable = 2
	faultKVLenBeyondTable = 3
	faultBlockBeyondPool  = 4
	faultPositionBeyond   = 5
)

// FaultError is a bad device-resident index found by a kernel: the first one
// recorded on a stream since its last check.
type FaultError struct {
	Code    int
	A, B, C int64 // the code's operands, as kernels_src/common.cuh lists them
}

// Error says which device-resident index was bad, its value, the bound it
// broke, and what the kernel did instead.
func (e *FaultError) Error() string {
	switch e.Code {
	case faultSlotBeyondCache:
		return fmt.Sprintf("pagedkv: SlotMapping[%d]=%d (or Slots[%d] of a gather) is outside the cache of %d slots; that row was not touched", e.A, e.B, e.A, e.C)
	case faultRemapBeyondTable:
		return fmt.Sprintf("pagedkv: token %d has slot %d, outside SlotRemap of %d entries; that token was not written", e.A, e.B, e.C)
	case faultKVLenBeyondTable:
		// Only a decode records a negative length: a cache write reports a
		// negative position as faultPositionBeyond.
		if e.B < 0 {
			return fmt.Sprintf("pagedkv: KVLens[%d]=%d is negative; the decode used length 0", e.A, e.B)
		}
		return fmt.Sprintf("pagedkv: KVLens[%d]=%d exceeds MaxBlocksPerSeq·BlockSize=%d (a decode's KV length, or for a cache write a token's position + 1); a decode clamped it, a cache write skipped the tokens beyond", e.A, e.B, e.C)
	case faultPositionBeyond:
		return fmt.Sprintf("pagedkv: position %d of token %d is outside the cos/sin table of %d rows; that token was not written", e.B, e.A, e.C)
	case faultBlockBeyondPool:
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
// stream run in order; ops on different streams may overlap. A Stream may be
// used from any goroutine, but ops enqueued on one stream from several
// goroutines at once run in an unspecified order.
type Stream struct {
	r     *Runtime
	s     driver.Stream
	fault driver.DevicePtr
}

// NewStream creates a non-blocking stream.
func (r *Runtime) NewStream() (*Stream, error) {
	if err := r.live(); err != nil {
		return nil, err
	}
	st := &Stream{r: r}
	err := r.do(func() error {
		var err error
		if st.s, err = driver.StreamCreate(driver.StreamNonBlocking); err != nil {
			return err
		}
		if st.fault, err = driver.MemAlloc(faultBytes); err != nil {
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

// Handle is the raw CUstream, for interoperation with other CUDA libraries.
func (s *Stream) Handle() uintptr { return uintptr(s.s) }

// Synchronize waits until every op enqueued on the stream has finished.
func (s *Stream) Synchronize() error { return s.r.do(s.s.Synchronize) }

// Close waits for the stream, frees its scratch buffers and destroys it. The
// Runtime's own stream is closed by Runtime.Close.
func (s *Stream) Close() error {
	if s == s.r.stream {
		return fmt.Errorf("pagedkv: the Runtime's own stream is closed by Runtime.Close")
	}
	return s.destroy()
}

func (s *Stream) destroy() error {
	s.r.streamMu.Lock()
	_, ok := s.r.streams[s]
	delete(s.r.streams, s)
	s.r.streamMu.Unlock()
	if !ok {
		return nil
	}
	if err := errors.Join(s.r.scratch.Drop(uintptr(s.s)), s.r.counters.Drop(uintptr(s.s))); err != nil {
		return err
	}
	return s.r.do(func() error {
		if err := s.s.Synchronize(); err != nil {
			return err
		}
		if err := driver.MemFree(s.fault); err != nil {
			return err
		}
		return s.s.Destroy()
	})
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
		return driver.MemsetD8(s.fault, 0, faultBytes)
	})
	if err != nil {
		return err
	}
	if rec[0] == 0 {
		return nil
	}
	return &FaultError{Code: int(rec[0]), A: int64(rec[1]), B: int64(rec[2]), C: int64(rec[3])}
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
// not fit Go). Reserve first (Runtime.ReserveDecode for every decode shape the
// graph will hold, or give each decode its own DecodeArgs.Workspace): scratch
// growth during capture is an error, never an allocation.
//
// To serve every batch size, capture one graph per size, in any order: each
// graph keeps the scratch it captured alive until Graph.Close, so a later
// capture or eager call that grows the stream's scratch never invalidates an
// earlier graph (the old buffer is retired, not freed).
func (s *Stream) BeginCapture() error {
	s.r.scratch.BeginCapture(uintptr(s.s))
	s.r.counters.BeginCapture(uintptr(s.s))
	return s.r.do(func() error { return s.s.BeginCapture(driver.CaptureModeRelaxed) })
}

// Graph is an instantiated CUDA graph captured from a Stream.
//
// # Lifetime
//
// A Graph owns the pool scratch its split-K decodes captured: those buffers
// stay allocated, whatever later calls do to the stream's pool, until Close
// (or Runtime.Close, which frees all scratch: close graphs first). The
// graph's kernels use the scratch of the stream it was captured on, so
// replays of it must not overlap other work that uses that stream's scratch:
// replay it on its own stream (in order with that stream's eager ops), or
// on another stream only when nothing else runs on the first; two graphs
// captured on one stream must not be replayed concurrently. Decodes given
// their own DecodeArgs.Workspace have none of these limits beyond the
// workspace itself, which must outlive the graph.
type Graph struct {
	r    *Runtime
	g    driver.Graph
	exec driver.GraphExec
	pins [2]*scratch.Pins // the split-K scratch and counters it captured
}

// EndCapture ends the capture begun by BeginCapture and instantiates the graph.
func (s *Stream) EndCapture() (*Graph, error) {
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
	return gr, nil
}

// Launch replays the graph on stream s.
func (g *Graph) Launch(s *Stream) error { return g.r.do(func() error { return g.exec.Launch(s.s) }) }

// Close destroys the graph. It waits for the device to finish the work
// already enqueued (the graph's replays among it) before the scratch the
// graph pinned may be freed.
func (g *Graph) Close() error {
	err := g.r.do(func() error {
		if err := g.exec.Destroy(); err != nil {
			return err
		}
		if err := g.g.Destroy(); err != nil {
			return err
		}
		return driver.CtxSynchronize()
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
}

// NewTimer creates the two events of a timer on stream s.
func (s *Stream) NewTimer() (*Timer, error) {
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
func (t *Timer) Start() error { return t.s.r.do(func() error { return t.start.Record(t.s.s) }) }

// Stop records the end event, waits for it and returns the milliseconds since Start.
func (t *Timer) Stop() (float32, error) {
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

// Close destroys the timer's events.
func (t *Timer) Close() error {
	return t.s.r.do(func() error {
		if err := t.start.Destroy(); err != nil {
			return err
		}
		return t.end.Destroy()
	})
}
