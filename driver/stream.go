package driver

import "sync"

// Streams, events and graphs need a current context: call these inside
// Context.Do.

// StreamCreate creates a stream; flags is StreamDefault or StreamNonBlocking.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func StreamCreate(flags uint32) (Stream, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var s Stream
	if err := check("cuStreamCreate", cuStreamCreate(&s, flags)); err != nil {
		return 0, err
	}
	return s, nil
}

// Destroy destroys the stream once its pending work completes; the call
// itself does not wait.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func (s Stream) Destroy() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuStreamDestroy_v2", cuStreamDestroy(s))
}

// Synchronize blocks until all work enqueued on s has completed.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func (s Stream) Synchronize() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuStreamSynchronize", cuStreamSynchronize(s))
}

// WaitEvent makes all work enqueued on s after this call wait until e
// completes (cuStreamWaitEvent, flags 0), without blocking the host: the
// wait happens on the device. It waits for the work of e's most recent
// Record at the time of the call; a later Record does not change it. e may
// belong to another context or device than s. During stream capture, waiting
// on an event recorded in the capture joins s to that capture. It allocates
// nothing.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func (s Stream) WaitEvent(e Event) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuStreamWaitEvent", cuStreamWaitEvent(s, e, 0))
}

// Context returns the context s was created in (cuStreamGetCtx). For the
// special handles (0, StreamLegacy, StreamPerThread) it is the context
// current on the calling thread, so call it inside Context.Do. s must be a
// live stream or a special handle: the driver's behavior for any other
// value is undefined.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func (s Stream) Context() (Context, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var c Context
	if err := check("cuStreamGetCtx", cuStreamGetCtx(s, &c)); err != nil {
		return 0, err
	}
	return c, nil
}

// BeginCapture starts capturing the work enqueued on s into a graph instead
// of running it. s must not be the legacy default stream. With
// CaptureModeThreadLocal or CaptureModeGlobal, EndCapture must be called on
// the same OS thread: begin and end capture inside one Context.Do.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func (s Stream) BeginCapture(mode CaptureMode) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuStreamBeginCapture_v2", cuStreamBeginCapture(s, mode))
}

// EndCapture ends the capture begun by BeginCapture and returns the
// captured graph, which the caller must Destroy. A capture invalidated by an
// illegal call returns an error matching ErrCapture.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
func (s Stream) EndCapture() (Graph, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var g Graph
	if err := check("cuStreamEndCapture", cuStreamEndCapture(s, &g)); err != nil {
		return 0, err
	}
	return g, nil
}

// IsCapturing reports whether s is capturing. An invalidated capture (one
// that EndCapture will fail) still counts as capturing.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
var statusCells = sync.Pool{New: func() any { return new(int32) }}

func (s Stream) IsCapturing() (bool, error) {
	if err := Init(); err != nil {
		return false, err
	}
	// The status cell is pooled heap memory: rawCall needs heap pointers, and
	// a fresh cell per call would allocate on every decode.
	cell := statusCells.Get().(*int32)
	r := cuStreamIsCapturing(s, cell)
	status := *cell
	statusCells.Put(cell)
	if err := check("cuStreamIsCapturing", r); err != nil {
		return false, err
	}
	return status == captureStatusActive || status == captureStatusInvalidated, nil
}

// Instantiate turns the graph into a launchable GraphExec
// (cuGraphInstantiateWithFlags with no flags). The graph may be destroyed
// afterwards; the GraphExec does not depend on it.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html
func (g Graph) Instantiate() (GraphExec, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var e GraphExec
	if err := check("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags(&e, g, 0)); err != nil {
		return 0, err
	}
	return e, nil
}

// Destroy destroys the graph.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html
func (g Graph) Destroy() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuGraphDestroy", cuGraphDestroy(g))
}

// Launch enqueues the executable graph on s. It allocates nothing.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html
func (e GraphExec) Launch(s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuGraphLaunch", cuGraphLaunch(e, s))
}

// Destroy destroys the executable graph.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html
func (e GraphExec) Destroy() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuGraphExecDestroy", cuGraphExecDestroy(e))
}

// EventCreate creates an event; flags is a combination of EventDefault,
// EventBlockingSync and EventDisableTiming.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html
func EventCreate(flags uint32) (Event, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var e Event
	if err := check("cuEventCreate", cuEventCreate(&e, flags)); err != nil {
		return 0, err
	}
	return e, nil
}

// Record enqueues the event on s; it completes when s reaches it. It
// allocates nothing.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html
func (e Event) Record(s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuEventRecord", cuEventRecord(e, s))
}

// Synchronize blocks until the event has completed.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html
func (e Event) Synchronize() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuEventSynchronize", cuEventSynchronize(e))
}

// Destroy destroys the event.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html
func (e Event) Destroy() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuEventDestroy_v2", cuEventDestroy(e))
}

// EventElapsed returns the time in milliseconds between two completed
// events, both created without EventDisableTiming (resolution about 0.5 µs).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html
func EventElapsed(start, end Event) (float32, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var ms float32
	if err := check("cuEventElapsedTime", cuEventElapsedTime(&ms, start, end)); err != nil {
		return 0, err
	}
	return ms, nil
}
