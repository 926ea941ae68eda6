package pagedkv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/driver"
)

// The checks below all run before any driver call, so they need no GPU:
// the Runtimes are fakes that never opened a device.

func TestWrapStreamRejectsHandles(t *testing.T) {
	r := &Runtime{streams: map[*Stream]struct{}{}}
	tests := []struct {
		handle uintptr
		want   string
	}{
		{0, "pagedkv: WrapStream(0): handle 0 is what an unset handle looks like; to run on the legacy default stream pass pagedkv.LegacyStream (0x1)"},
		{0x2, "pagedkv: WrapStream(0x2): CU_STREAM_PER_THREAD names each OS thread's own default stream"},
	}
	for _, tt := range tests {
		s, err := r.WrapStream(tt.handle)
		assert.Nil(t, s)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), tt.want)
	}
	assert.Empty(t, r.streams, "nothing registered")

	closed := &Runtime{streams: map[*Stream]struct{}{}}
	closed.closed.Store(true)
	_, err := closed.WrapStream(0x1234)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestLegacyStreamHandle(t *testing.T) {
	assert.Equal(t, uintptr(0x1), LegacyStream, "CU_STREAM_LEGACY in cuda.h")
	assert.Equal(t, driver.Stream(0x2), driver.StreamPerThread, "CU_STREAM_PER_THREAD in cuda.h")
}

// fakeEvent is an open event of r with a made-up handle; Close must not be
// called on it (it would reach the driver).
func fakeEvent(r *Runtime) *Event { return &Event{r: r, e: 0xe1} }

func TestEventArgumentChecks(t *testing.T) {
	dev0 := &Runtime{ctx: 0x100, info: DeviceInfo{Ordinal: 0}}
	dev1 := &Runtime{ctx: 0x200, info: DeviceInfo{Ordinal: 1}}
	closedRT := &Runtime{ctx: 0x100, info: DeviceInfo{Ordinal: 0}}
	closedRT.closed.Store(true)
	s := &Stream{r: dev0, s: 0x5}
	var nilStream *Stream
	closedEvent := &Event{r: dev0} // handle 0: closed

	tests := []struct {
		name string
		err  error
		want string
	}{
		{"record on nil stream", nilStream.Record(fakeEvent(dev0)), "pagedkv: Stream.Record: the *Stream is nil; use Runtime.Stream() or a Stream from NewStream or WrapStream"},
		{"record nil event", s.Record(nil), "pagedkv: Stream.Record(nil): the event is nil"},
		{"record closed event", s.Record(closedEvent), "pagedkv: Stream.Record: the event is closed"},
		{"record event of another device", s.Record(fakeEvent(dev1)), "pagedkv: Stream.Record: the event belongs to device 1 and the stream to device 0; record an event of the stream's own device"},
		{"record event of closed runtime", s.Record(fakeEvent(closedRT)), "pagedkv: Stream.Record: the event's Runtime is closed"},
		{"wait on nil stream", nilStream.Wait(fakeEvent(dev0)), "pagedkv: Stream.Wait: the *Stream is nil; use Runtime.Stream() or a Stream from NewStream or WrapStream"},
		{"wait nil event", s.Wait(nil), "pagedkv: Stream.Wait(nil): the event is nil"},
		{"wait closed event", s.Wait(closedEvent), "pagedkv: Stream.Wait: the event is closed"},
		{"wait event of closed runtime", s.Wait(fakeEvent(closedRT)), "pagedkv: Stream.Wait: the event's Runtime is closed"},
		{"synchronize nil event", (*Event)(nil).Synchronize(), "pagedkv: Event.Synchronize: the event is nil"},
		{"synchronize closed event", closedEvent.Synchronize(), "pagedkv: Event.Synchronize: the event is closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, tt.err)
			assert.ErrorIs(t, tt.err, ErrInvalidArgument)
			assert.Equal(t, tt.want, tt.err.Error())
		})
	}

	// Closing a closed or nil event does nothing.
	assert.NoError(t, closedEvent.Close())
	assert.NoError(t, (*Event)(nil).Close())
	// A live event of a closed Runtime: destroyed with its context.
	ev := fakeEvent(closedRT)
	assert.NoError(t, ev.Close())
	assert.Zero(t, ev.e)
	assert.ErrorIs(t, ev.Synchronize(), ErrInvalidArgument, "closed now")
}

// TestWrappedStreamCloseUnregistered: Close of a wrapped Stream that its
// Runtime no longer lists (closed already) does nothing, with no driver call.
func TestWrappedStreamCloseUnregistered(t *testing.T) {
	r := &Runtime{streams: map[*Stream]struct{}{}}
	s := &Stream{r: r, s: 0x77, fault: 0x1000}
	assert.NoError(t, s.Close())
	assert.Equal(t, driver.DevicePtr(0x1000), s.fault, "untouched")
}

// TestFaultHoldsLastHolderFrees: a stream's fault record is freed by the
// last of the Stream and the graphs captured on it to let go, in any order.
func TestFaultHoldsLastHolderFrees(t *testing.T) {
	h := newFaultHolds()
	assert.True(t, h.closeStream(), "no graph: the Stream's Close frees it")

	h = newFaultHolds()
	h.holdGraph()
	h.holdGraph()
	assert.False(t, h.releaseGraph(), "the Stream still holds it")
	assert.False(t, h.closeStream(), "a graph still holds it")
	assert.True(t, h.releaseGraph(), "the last graph frees it")

	h = newFaultHolds()
	h.holdGraph()
	assert.False(t, h.closeStream())
	assert.True(t, h.releaseGraph())

	var none *faultHolds
	none.holdGraph()
	assert.True(t, none.closeStream(), "a Stream without holds frees its record at Close")
	assert.False(t, none.releaseGraph())
}
