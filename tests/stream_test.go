package tests

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// engineStream creates a non-blocking CUstream the way an engine would,
// outside pagedkv: with the driver API, in the primary context of device
// ordinal, which is the one context every Runtime of that device (and the
// CUDA runtime API) uses. It is destroyed at the end of the test, after the
// cleanups registered later (a wrapping Stream's Close among them).
func engineStream(t *testing.T, ordinal int) (driver.Context, driver.Stream) {
	t.Helper()
	dev, err := driver.DeviceGet(ordinal)
	require.NoError(t, err)
	ctx, err := dev.PrimaryCtxRetain()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.PrimaryCtxRelease()) })
	var s driver.Stream
	require.NoError(t, ctx.Do(func() error {
		var err error
		s, err = driver.StreamCreate(driver.StreamNonBlocking)
		return err
	}))
	t.Cleanup(func() { require.NoError(t, ctx.Do(s.Destroy)) })
	return ctx, s
}

// newStream returns a stream of r closed at the end of the test.
func newStream(t *testing.T, r *pagedkv.Runtime) *pagedkv.Stream {
	t.Helper()
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// newEvent returns an event of r closed at the end of the test.
func newEvent(t *testing.T, r *pagedkv.Runtime) *pagedkv.Event {
	t.Helper()
	e, err := r.NewEvent()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// allocHost returns page-locked host memory freed at the end of the test.
func allocHost(t *testing.T, r *pagedkv.Runtime, n int64) *pagedkv.HostMemory {
	t.Helper()
	h, err := r.AllocHost(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Free()) })
	return h
}

// allocDevice returns device memory freed at the end of the test.
func allocDevice(t *testing.T, r *pagedkv.Runtime, n int64) pagedkv.Buffer {
	t.Helper()
	m, err := r.Alloc(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Free()) })
	return m.Buffer
}

// smallDecode is a decode shape whose few (sequence, KV head) pairs leave
// most of the GPU idle, so the planner splits it (split-K scratch in use).
var smallDecode = check.DecodeShape{Seqs: 4, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1000}

// TestWrapStream runs a decode on a stream the engine owns, then checks that
// Close leaves that stream working.
func TestWrapStream(t *testing.T) {
	r := open(t, config.Options{})
	ctx, raw := engineStream(t, r.Info().Ordinal)
	ws, err := r.WrapStream(uintptr(raw))
	require.NoError(t, err)
	assert.Equal(t, uintptr(raw), ws.Handle())

	// One Stream per CUstream and Runtime; 0 is not a stream.
	for _, h := range []uintptr{uintptr(raw), r.Stream().Handle(), 0} {
		_, err := r.WrapStream(h)
		assert.ErrorIs(t, err, pagedkv.ErrInvalidArgument, "WrapStream(%#x)", h)
	}

	g := rng(t)
	p := decodeProblem(t, r, ws, g, smallDecode)
	plan, err := r.PlanDecode(ws, &p.Args)
	require.NoError(t, err)
	t.Logf("plan: %s, %d splits", plan.Kernel, plan.Splits)
	out, lse, err := p.Run(r, ws)
	require.NoError(t, err)
	require.NoError(t, p.Check(out, lse))

	// Close releases pagedkv's part only: the engine's stream still works,
	// and may be wrapped again.
	require.NoError(t, ws.Close())
	require.NoError(t, ws.Close(), "a second Close does nothing")
	require.NoError(t, ctx.Do(raw.Synchronize))
	again, err := r.WrapStream(uintptr(raw))
	require.NoError(t, err)
	out, lse, err = p.Run(r, again)
	require.NoError(t, err)
	require.NoError(t, p.Check(out, lse))
	require.NoError(t, again.Close())
	require.NoError(t, ctx.Do(raw.Synchronize))
}

// TestWrapLegacyStream runs a decode on the legacy default stream.
func TestWrapLegacyStream(t *testing.T) {
	r := open(t, config.Options{})
	ls, err := r.WrapStream(pagedkv.LegacyStream)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ls.Close()) })
	p := decodeProblem(t, r, ls, rng(t), smallDecode)
	out, lse, err := p.Run(r, ls)
	require.NoError(t, err)
	require.NoError(t, p.Check(out, lse))
}

// TestWrapStreamOfAnotherDevice: a stream of device 1's context is not one
// a Runtime of device 0 may use.
func TestWrapStreamOfAnotherDevice(t *testing.T) {
	r := open(t, config.Options{})
	n, err := driver.DeviceCount()
	require.NoError(t, err)
	if n < 2 {
		t.Skip("needs two devices")
	}
	_, raw := engineStream(t, 1)
	_, err = r.WrapStream(uintptr(raw))
	require.Error(t, err)
	assert.ErrorIs(t, err, pagedkv.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "belongs to context")
}

// TestEventOrdersStreams decodes on one stream and downloads the result on
// another, ordered by an event alone; the host waits on a second event.
// Outputs are poisoned on the device and in host memory before every round,
// so a copy that ran too early, or a round that read the previous round's
// data, fails.
func TestEventOrdersStreams(t *testing.T) {
	r := open(t, config.Options{})
	compute, copier := newStream(t, r), newStream(t, r)
	decoded, copied := newEvent(t, r), newEvent(t, r)
	c := check.DecodeShape{Seqs: 8, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 128, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 2000}
	p := decodeProblem(t, r, compute, rng(t), c)

	outBytes := c.Seqs * c.QHeads * c.HeadDim * c.DType.Size() // a multiple of 4
	lseCount := c.Seqs * c.QHeads
	host := allocHost(t, r, int64(outBytes+4*lseCount))
	hostOut := host.Bytes()[:outBytes]
	words, err := pagedkv.HostSlice[float32](host)
	require.NoError(t, err)
	hostLSE := words[outBytes/4 : outBytes/4+lseCount]

	for round := range 3 {
		for i := range hostOut {
			hostOut[i] = 0xFF // NaN in bf16
		}
		for i := range hostLSE {
			hostLSE[i] = float32(math.NaN())
		}
		require.NoError(t, p.Poison(compute))
		require.NoError(t, r.Decode(compute, &p.Args))
		require.NoError(t, compute.Record(decoded))
		require.NoError(t, copier.Wait(decoded))
		require.NoError(t, pagedkv.DownloadAsync(copier, hostOut, p.Args.Out))
		require.NoError(t, pagedkv.DownloadAsync(copier, hostLSE, p.Args.LSE))
		require.NoError(t, copier.Record(copied))
		require.NoError(t, copied.Synchronize())

		out := ref.DecodeSlice(ref.DType(c.DType), slices.Clone(hostOut))
		require.NoError(t, p.Check(out, slices.Clone(hostLSE)), "round %d", round)
	}
	require.NoError(t, compute.Fault())
}

// TestAsyncCopies checks UploadAsync and DownloadAsync against the
// synchronous copies: raw bytes through device memory and back, and a decode
// whose query went host → device asynchronously and whose output came back
// the same way.
func TestAsyncCopies(t *testing.T) {
	r := open(t, config.Options{})
	s := newStream(t, r)
	g := rng(t)

	t.Run("bytes", func(t *testing.T) {
		const n = 1<<20 + 3
		host := allocHost(t, r, 2*n)
		src, dst := host.Bytes()[:n], host.Bytes()[n:]
		for i := range src {
			src[i] = byte(g.Uint32())
			dst[i] = ^src[i]
		}
		dev := allocDevice(t, r, n)
		require.NoError(t, pagedkv.UploadAsync(s, dev, src))
		require.NoError(t, pagedkv.DownloadAsync(s, dst, dev))
		require.NoError(t, s.Synchronize())
		require.True(t, bytes.Equal(src, dst), "bytes differ after the round trip")

		// The synchronous download of the same buffer agrees.
		back := make([]byte, n)
		require.NoError(t, pagedkv.Download(s, back, dev))
		require.True(t, bytes.Equal(src, back))

		// Typed sub-slices at an offset: words 5..104 to the start of dev.
		words, err := pagedkv.HostSlice[uint32](host)
		require.NoError(t, err)
		require.NoError(t, pagedkv.UploadAsync(s, dev, words[5:105]))
		got := make([]uint32, 100)
		require.NoError(t, pagedkv.DownloadAsync(s, words[200:300], dev))
		require.NoError(t, s.Synchronize())
		copy(got, words[200:300])
		assert.Equal(t, words[5:105], got)
	})

	t.Run("decode", func(t *testing.T) {
		c := smallDecode
		c.DType, c.CacheDType = pagedkv.BF16, pagedkv.BF16
		p := decodeProblem(t, r, s, g, c)
		syncOut, syncLSE, err := p.Run(r, s)
		require.NoError(t, err)
		require.NoError(t, p.Check(syncOut, syncLSE))

		qBytes := int(p.Args.Q.Bytes)
		outBytes := c.Seqs * c.QHeads * c.HeadDim * c.DType.Size()
		lseBytes := 4 * c.Seqs * c.QHeads
		host := allocHost(t, r, int64(qBytes+outBytes+lseBytes))
		all := host.Bytes()
		hostQ, hostOut, hostLSE := all[:qBytes], all[qBytes:qBytes+outBytes], all[qBytes+outBytes:]

		// The query goes to the host and back into a new buffer, in stream
		// order; the decode reads that buffer.
		q2 := allocDevice(t, r, p.Args.Q.Bytes)
		require.NoError(t, pagedkv.DownloadAsync(s, hostQ, p.Args.Q))
		require.NoError(t, pagedkv.UploadAsync(s, q2, hostQ))
		args := p.Args
		args.Q = q2
		require.NoError(t, p.Poison(s))
		require.NoError(t, r.Decode(s, &args))
		require.NoError(t, pagedkv.DownloadAsync(s, hostOut, args.Out))
		require.NoError(t, pagedkv.DownloadAsync(s, hostLSE, args.LSE))
		require.NoError(t, s.Synchronize())
		require.NoError(t, s.Fault())

		out := ref.DecodeSlice(ref.DType(c.DType), slices.Clone(hostOut))
		lse := make([]float32, c.Seqs*c.QHeads)
		for i := range lse {
			lse[i] = math.Float32frombits(uint32(hostLSE[4*i]) | uint32(hostLSE[4*i+1])<<8 | uint32(hostLSE[4*i+2])<<16 | uint32(hostLSE[4*i+3])<<24)
		}
		require.NoError(t, p.Check(out, lse))
		assert.LessOrEqual(t, ref.RelL2(out, syncOut), check.Tolerance(c.DType)/2, "async path vs synchronous path")
	})
}

// TestEventsInGraphCapture forks a second stream into a capture with an
// event and joins it back with another, then replays the graph.
func TestEventsInGraphCapture(t *testing.T) {
	r := open(t, config.Options{})
	origin, side := newStream(t, r), newStream(t, r)
	forked, joined := newEvent(t, r), newEvent(t, r)
	const n = 4096
	x, y := allocDevice(t, r, n), allocDevice(t, r, n)
	require.NoError(t, origin.Fill(x, 0))
	require.NoError(t, origin.Fill(y, 0))
	require.NoError(t, origin.Synchronize())

	require.NoError(t, origin.BeginCapture())
	err := func() error {
		if err := origin.Fill(x, 0x5a); err != nil {
			return err
		}
		if err := origin.Record(forked); err != nil {
			return err
		}
		if err := side.Wait(forked); err != nil { // side joins the capture
			return err
		}
		if err := side.Copy(y, x); err != nil {
			return err
		}
		if err := side.Record(joined); err != nil {
			return err
		}
		return origin.Wait(joined) // and is joined back before EndCapture
	}()
	graph, endErr := origin.EndCapture()
	require.NoError(t, err)
	require.NoError(t, endErr)
	t.Cleanup(func() { require.NoError(t, graph.Close()) })

	captured := make([]byte, n)
	require.NoError(t, pagedkv.Download(origin, captured, y))
	require.Equal(t, make([]byte, n), captured, "capture ran nothing")

	require.NoError(t, graph.Launch(origin))
	require.NoError(t, pagedkv.Download(origin, captured, y))
	require.Equal(t, bytes.Repeat([]byte{0x5a}, n), captured, "the replay ran the side stream's copy")

	// Outside a capture the events work as before.
	require.NoError(t, side.Record(joined))
	require.NoError(t, joined.Synchronize())
}

// TestAsyncUploadInGraph: a captured UploadAsync reads its host memory when
// the graph replays, not when it was captured.
func TestAsyncUploadInGraph(t *testing.T) {
	r := open(t, config.Options{})
	s := newStream(t, r)
	const n = 4096
	host := allocHost(t, r, n)
	dev := allocDevice(t, r, n)
	src := host.Bytes()
	for i := range src {
		src[i] = 1
	}
	require.NoError(t, s.BeginCapture())
	err := pagedkv.UploadAsync(s, dev, src)
	graph, endErr := s.EndCapture()
	require.NoError(t, err)
	require.NoError(t, endErr)
	t.Cleanup(func() { require.NoError(t, graph.Close()) })

	for _, v := range []byte{2, 3} {
		for i := range src {
			src[i] = v
		}
		require.NoError(t, graph.Launch(s))
		got := make([]byte, n)
		require.NoError(t, pagedkv.Download(s, got, dev))
		require.Equal(t, bytes.Repeat([]byte{v}, n), got)
	}
}

// TestGraphOutlivesItsStream: a graph whose capture stream is closed first
// replays on another stream, its Append still writing a fault (a slot past
// the cache) into the capture stream's fault record, which the graph keeps
// allocated until its Close (compute-sanitizer memcheck reports a write to
// a freed record).
func TestGraphOutlivesItsStream(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	a := arena(t, r)
	rs := r.Stream()
	capture, err := r.NewStream()
	require.NoError(t, err)
	const bs, blocks = 4, 2
	cacheBytes := int64(blocks * bs * faultHeads * faultDim * 2)
	kc, err := a.Alloc(cacheBytes)
	require.NoError(t, err)
	vc, err := a.Alloc(cacheBytes)
	require.NoError(t, err)
	args, _ := faultingAppend(t, a, rs, g, kc, vc, pagedkv.LayoutFlash, bs, blocks)
	require.NoError(t, rs.Synchronize())
	require.NoError(t, capture.BeginCapture())
	appendErr := r.Append(capture, args)
	graph, err := capture.EndCapture()
	require.NoError(t, appendErr)
	require.NoError(t, err)
	require.NoError(t, capture.Close())
	for range 3 {
		require.NoError(t, graph.Launch(rs))
	}
	require.NoError(t, rs.Synchronize())
	require.NoError(t, rs.Fault(), "the graph's faults go to its capture stream's record")
	require.NoError(t, graph.Close())
}
