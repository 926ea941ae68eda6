package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// raggedShapes are serving-like batches for the balanced decode: more than
// 128 sequences (the kernel's partition takes several passes), every cache
// type, narrow and wide groups, pages of 1 to 256 tokens.
func raggedShapes() []check.DecodeShape {
	return []check.DecodeShape{
		{Seqs: 128, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxBlocksPerSeq: 128, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 2048},
		{Seqs: 300, QHeads: 4, KVHeads: 1, HeadDim: 64, BlockSize: 32, MaxBlocksPerSeq: 40, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1270},
		{Seqs: 40, QHeads: 16, KVHeads: 1, HeadDim: 128, BlockSize: 1, MaxBlocksPerSeq: 3000, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 3000},
		{Seqs: 20, QHeads: 6, KVHeads: 2, HeadDim: 256, BlockSize: 256, MaxBlocksPerSeq: 12, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 3000},
		{Seqs: 70, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 160, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 2500},
		{Seqs: 33, QHeads: 24, KVHeads: 2, HeadDim: 128, BlockSize: 64, MaxBlocksPerSeq: 40, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 2500}, // group 12: wide
	}
}

// TestDecodeBalancedMatchesReference runs ragged batches through the
// balanced plan, chosen automatically from HostKVLens, chosen without them,
// and forced by DECODE_BALANCE=1, against float64 and against single-pass.
func TestDecodeBalancedMatchesReference(t *testing.T) {
	auto := open(t, config.Options{})
	on := open(t, config.Options{DecodeBalance: ptr(config.SplitOn)})
	single := open(t, config.Options{PagedFlash: ptr(false)})
	g := rng(t)
	for _, c := range raggedShapes() {
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, auto, auto.Stream(), g, c)
			require.NoError(t, p.SetLens(auto.Stream(), check.RaggedLens(g, c.Seqs, c.MaxLen, c.BlockSize)))
			o1, l1, err := p.Run(single, single.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(o1, l1))

			p.Args.HostKVLens = p.Lens
			for _, r := range []*pagedkv.Runtime{auto, on} {
				plan, err := r.PlanDecode(r.Stream(), &p.Args)
				require.NoError(t, err)
				require.True(t, plan.Balanced(), "%s", plan.String())
				out, lse, err := p.Run(r, r.Stream())
				require.NoError(t, err)
				require.NoError(t, p.Check(out, lse), "%s", plan.String())
				assert.LessOrEqual(t, ref.RelL2(out, o1), check.Tolerance(c.DType)/2, "balanced vs single-pass")
			}
			// Uniform lengths are not ragged: the automatic plan is the usual one.
			p.Args.HostKVLens = make([]int32, c.Seqs)
			for i := range p.Args.HostKVLens {
				p.Args.HostKVLens[i] = int32(p.Args.MaxKVLen)
			}
			plan, err := auto.PlanDecode(auto.Stream(), &p.Args)
			require.NoError(t, err)
			assert.False(t, plan.Balanced(), "%s", plan.String())

			// Without host lengths the eager plan is balanced, as a graph's
			// is: each sequence split from its device length.
			p.Args.HostKVLens = nil
			plan, err = auto.PlanDecode(auto.Stream(), &p.Args)
			require.NoError(t, err)
			require.True(t, plan.Balanced(), "%s", plan.String())
			assert.Equal(t, dispatch.ReasonBalancedNoLens, plan.Reason)
			out, lse, err := p.Run(auto, auto.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse), "%s", plan.String())
		})
	}
}

// TestDecodeBalancedGraphReplay captures balanced decodes with a per-call
// capacity and replays them with ragged, uniform, short and empty lengths.
func TestDecodeBalancedGraphReplay(t *testing.T) {
	r := open(t, config.Options{KVCapacity: ptr(64)}) // each decode states its own
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	for _, c := range raggedShapes()[:5] {
		c.MaxBlocksPerSeq += 7 // capacity beyond the first lengths
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, r, s, g, c)
			p.Args.KVCapacity = c.MaxBlocksPerSeq * c.BlockSize
			plan, err := r.PlanDecodeGraph(&p.Args)
			require.NoError(t, err)
			require.True(t, plan.Balanced(), "%s", plan.String())
			require.NoError(t, r.ReserveDecode(s, &p.Args))
			graph := captureDecode(t, r, s, &p.Args)
			t.Cleanup(func() { require.NoError(t, graph.Close()) })
			capacity := p.Args.KVCapacity
			for _, lens := range [][]int32{
				check.RaggedLens(g, c.Seqs, capacity, c.BlockSize),
				check.RandomLens(g, c.Seqs, capacity, c.BlockSize),
				check.RandomLens(g, c.Seqs, 1, c.BlockSize),
				make([]int32, c.Seqs),
				check.RaggedLens(g, c.Seqs, capacity/3, c.BlockSize),
			} {
				require.NoError(t, p.SetLens(s, lens))
				require.NoError(t, p.Poison(s))
				require.NoError(t, graph.Launch(s))
				out, lse, err := p.Fetch(s)
				require.NoError(t, err)
				require.NoError(t, p.Check(out, lse), "replay with lengths up to %d", p.Args.MaxKVLen)
			}
		})
	}
}

// growthCase is the setup of the graph-after-growth tests: a runtime that
// plans 16 splits for graphs of kv ≤ 2048, a stream of its own, the small
// split-K decode a graph captures (reserved) and a larger eager one forced
// to 64 splits, which grows the stream's scratch.
type growthCase struct {
	r          *pagedkv.Runtime
	s          *pagedkv.Stream
	small, big *check.DecodeProblem
	bigPlan    dispatch.DecodePlan
}

func newGrowthCase(t *testing.T) *growthCase {
	t.Helper()
	r := open(t, config.Options{PagedFlashSplits: ptr(16), KVCapacity: ptr(2048)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	c := check.DecodeShape{Seqs: 8, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 128, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 2048}
	gc := &growthCase{r: r, s: s, small: decodeProblem(t, r, s, g, c)}
	plan, err := r.PlanDecodeGraph(&gc.small.Args)
	require.NoError(t, err)
	require.Equal(t, 16, plan.Splits)
	require.Zero(t, plan.Cluster)
	require.NoError(t, r.ReserveDecode(s, &gc.small.Args))
	c.Seqs = 32
	gc.big = decodeProblem(t, r, s, g, c)
	k := dispatch.DefaultKnobs()
	k.ForcedSplits = 64
	gc.bigPlan, err = r.PlanDecodeWith(&gc.big.Args, k)
	require.NoError(t, err)
	require.Greater(t, gc.bigPlan.ScratchFloats, 2*plan.ScratchFloats)
	return gc
}

// runBig runs the big decode eagerly and checks it.
func (gc *growthCase) runBig(t *testing.T, msg ...any) {
	t.Helper()
	out, lse, err := gc.big.RunWithPlan(gc.r, gc.s, gc.bigPlan)
	require.NoError(t, err)
	require.NoError(t, gc.big.Check(out, lse), msg...)
}

// replays replays the small decode's graph with launch three times, each
// checked, with the big decode run eagerly between replays (it keeps using
// the grown buffer).
func (gc *growthCase) replays(t *testing.T, launch func() error) {
	t.Helper()
	for round := range 3 {
		require.NoError(t, gc.small.Poison(gc.s))
		require.NoError(t, launch())
		out, lse, err := gc.small.Fetch(gc.s)
		require.NoError(t, err)
		require.NoError(t, gc.small.Check(out, lse), "replay %d after growth", round)
		gc.runBig(t)
	}
}

// TestDecodeGraphAfterGrowth is the engine's sequence that would write into
// freed memory if growth freed a graph's scratch: capture a small split-K
// decode, grow the stream's scratch with a larger eager one, then replay
// the graph. Run it under compute-sanitizer memcheck.
func TestDecodeGraphAfterGrowth(t *testing.T) {
	gc := newGrowthCase(t)
	graph := captureDecode(t, gc.r, gc.s, &gc.small.Args)
	gc.runBig(t)
	gc.replays(t, func() error { return graph.Launch(gc.s) })
	require.NoError(t, graph.Close())
	gc.runBig(t, "after the graph released its scratch")
}

// TestDecodeExternalCapture is TestDecodeGraphAfterGrowth for a capture
// begun by other code on the Stream's handle (the driver called directly,
// as another binding would): the decode sees the capture, plans for the
// graph, and its scratch outlives growth, a capture of pagedkv's own on the
// same stream and the closing of that graph, and the closing of the stream
// and the runtime after it. Run it under compute-sanitizer memcheck.
func TestDecodeExternalCapture(t *testing.T) {
	gc := newGrowthCase(t)
	dev, err := driver.DeviceGet(0)
	require.NoError(t, err)
	ctx, err := dev.PrimaryCtxRetain()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.PrimaryCtxRelease()) })
	h := driver.Stream(gc.s.Handle())

	var graph driver.Graph
	var exec driver.GraphExec
	require.NoError(t, ctx.Do(func() error { return h.BeginCapture(driver.CaptureModeRelaxed) }))
	decodeErr := gc.r.Decode(gc.s, &gc.small.Args)
	require.NoError(t, ctx.Do(func() error {
		var err error
		if graph, err = h.EndCapture(); err != nil {
			return err
		}
		exec, err = graph.Instantiate()
		return err
	}))
	require.NoError(t, decodeErr)
	t.Cleanup(func() {
		require.NoError(t, ctx.Do(func() error {
			if err := exec.Destroy(); err != nil {
				return err
			}
			return graph.Destroy()
		}))
	})

	// Growth, then a capture of pagedkv's own on the stream, and its graph
	// closed: none of it may free the external graph's scratch.
	gc.runBig(t)
	require.NoError(t, gc.r.ReserveDecode(gc.s, &gc.big.Args))
	own := captureDecode(t, gc.r, gc.s, &gc.big.Args)
	require.NoError(t, own.Close())
	gc.replays(t, func() error { return ctx.Do(func() error { return exec.Launch(h) }) })
}

// TestDecodeWorkspace gives decodes the engine's own scratch, eager and in a
// graph, for the global-merge and the balanced plans; a workspace too small
// for the plan is an error before any launch.
func TestDecodeWorkspace(t *testing.T) {
	g := rng(t)
	for _, opts := range []config.Options{
		{PagedFlashSplits: ptr(12), KVCapacity: ptr(2048)},
		{DecodeBalance: ptr(config.SplitOn), KVCapacity: ptr(2048)},
	} {
		r := open(t, opts)
		s, err := r.NewStream()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		c := raggedShapes()[0]
		p := decodeProblem(t, r, s, g, c)
		require.NoError(t, p.SetLens(s, check.RaggedLens(g, c.Seqs, c.MaxLen, c.BlockSize)))
		plan, err := r.PlanDecodeGraph(&p.Args)
		require.NoError(t, err)
		eager, err := r.PlanDecode(s, &p.Args)
		require.NoError(t, err)
		need := max(plan.WorkspaceBytes(), eager.WorkspaceBytes())
		require.Positive(t, need)
		t.Run(fmt.Sprintf("%s/%d bytes", plan.Reason, need), func(t *testing.T) {
			ws, err := p.Arena.Alloc(need)
			require.NoError(t, err)
			require.NoError(t, s.Fill(ws, 0))
			p.Args.Workspace = ws

			out, lse, err := p.Run(r, s)
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse), "eager")

			graph := captureDecode(t, r, s, &p.Args, "capture needs no reservation with a workspace")
			t.Cleanup(func() { require.NoError(t, graph.Close()) })
			for range 2 {
				require.NoError(t, p.SetLens(s, check.RaggedLens(g, c.Seqs, c.MaxLen, c.BlockSize)))
				require.NoError(t, p.Poison(s))
				require.NoError(t, graph.Launch(s))
				out, lse, err := p.Fetch(s)
				require.NoError(t, err)
				require.NoError(t, p.Check(out, lse), "replay")
			}

			p.Args.Workspace, err = ws.Slice(0, eager.WorkspaceBytes()-4)
			require.NoError(t, err)
			assert.ErrorContains(t, r.Decode(s, &p.Args), "DecodeArgs.Workspace has")
			p.Args.Workspace = pagedkv.Buffer{}
		})
	}
}

// TestDecodeFP8Narrow checks the narrow fp8 kernels (groups up to 8) against
// float64 and against the wide fp8 kernels, single-pass and split.
func TestDecodeFP8Narrow(t *testing.T) {
	narrow := open(t, config.Options{})
	wide := open(t, config.Options{DecodeNarrow: ptr(false)})
	split := open(t, config.Options{PagedFlashSplits: ptr(5), DecodeClusters: ptr(false)})
	g := rng(t)
	for _, c := range []check.DecodeShape{
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 1000},
		{Seqs: 3, QHeads: 8, KVHeads: 8, HeadDim: 64, BlockSize: 8, MaxBlocksPerSeq: 100, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 777},
		{Seqs: 2, QHeads: 14, KVHeads: 2, HeadDim: 256, BlockSize: 32, MaxBlocksPerSeq: 40, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 1111},
		{Seqs: 5, QHeads: 6, KVHeads: 3, HeadDim: 128, BlockSize: 1, MaxBlocksPerSeq: 600, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 600},
	} {
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, narrow, narrow.Stream(), g, c)
			plan, err := narrow.PlanDecode(narrow.Stream(), &p.Args)
			require.NoError(t, err)
			require.Contains(t, plan.Kernel, "_e4m3_")
			require.Contains(t, plan.Kernel, "_g8")
			on, ln, err := p.Run(narrow, narrow.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(on, ln))
			ow, lw, err := p.Run(wide, wide.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(ow, lw))
			assert.LessOrEqual(t, ref.RelL2(on, ow), check.Tolerance(c.DType)/2, "narrow vs wide fp8")
			os, ls, err := p.Run(split, split.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(os, ls))
		})
	}
}
