// Package tests holds the integration tests that need an NVIDIA GPU. Each
// test skips with one line when there is no driver or no device.
package tests

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// open returns a Runtime on device 0 with opts applied, or skips the test
// when this machine has no usable GPU.
func open(t testing.TB, opts config.Options) *pagedkv.Runtime {
	t.Helper()
	return openDevice(t, 0, opts)
}

func openDevice(t testing.TB, device int, opts config.Options) *pagedkv.Runtime {
	t.Helper()
	r, err := pagedkv.Open(pagedkv.Options{Device: device, Config: opts})
	if errors.Is(err, pagedkv.ErrNoDriver) || errors.Is(err, pagedkv.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

// rng returns a generator seeded from PAGEDKV_TEST_SEED or at random, and
// logs the seed so that a failure can be replayed.
func rng(t testing.TB) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv(config.EnvTestSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "PAGEDKV_TEST_SEED")
		seed = v
	}
	t.Logf("seed %d (set PAGEDKV_TEST_SEED to replay)", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// arena returns an arena freed at the end of the test.
func arena(t testing.TB, r *pagedkv.Runtime) *check.Arena {
	t.Helper()
	a := check.NewArena(r)
	t.Cleanup(func() { require.NoError(t, a.Free()) })
	return a
}

// decodeProblem builds a decode problem freed at the end of the test.
func decodeProblem(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c check.DecodeShape) *check.DecodeProblem {
	t.Helper()
	p, err := check.NewDecodeProblem(r, s, g, c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Arena.Free()) })
	return p
}

// attnProblem is a decode or varlen problem of internal/check.
type attnProblem interface {
	Run(*pagedkv.Runtime, *pagedkv.Stream) ([]float64, []float32, error)
	Check(out []float64, lse []float32) error
	RunPlannedWith(*pagedkv.Runtime, *pagedkv.Stream, dispatch.Knobs) ([]float64, int, error)
	UseCaches(k, v pagedkv.Buffer, l pagedkv.CacheLayout)
}

// assertLayoutsAgree is the layout-agreement check: p runs over its flash
// caches k and v (and must match float64 there), then over each layout's
// copy of them (relayout), with
// the planner's plan and with 3 forced splits each time, and every output
// must agree with the flash one within tol (the LSE too, and the forced
// plan's split count). diff, when not nil, explains a disagreement. p is
// left on k and v.
func assertLayoutsAgree(t *testing.T, r *pagedkv.Runtime, s *pagedkv.Stream, p attnProblem, k, v pagedkv.Buffer,
	numBlocks, blockSize, kvHeads, headDim int, cache pagedkv.DType, tol float64, diff func(want, got []float64)) {
	t.Helper()
	knobs := dispatch.DefaultKnobs()
	knobs.ForcedSplits = 3
	split := func() ([]float64, int) {
		out, splits, err := p.RunPlannedWith(r, s, knobs)
		require.NoError(t, err)
		return out, splits
	}
	want, wantLSE, err := p.Run(r, s)
	require.NoError(t, err)
	require.NoError(t, p.Check(want, wantLSE))
	wantSplit, splits := split()
	arena := check.NewArena(r)
	t.Cleanup(func() { assert.NoError(t, arena.Free()) })
	laid := relayout(t, r, s, arena, k, v, numBlocks, blockSize, kvHeads, headDim, cache)
	defer p.UseCaches(k, v, pagedkv.LayoutFlash)
	for _, layout := range otherLayouts {
		p.UseCaches(laid[layout][0], laid[layout][1], layout)
		got, lse, err := p.Run(r, s)
		require.NoError(t, err)
		if !assert.LessOrEqual(t, ref.RelL2(got, want), tol, "%v against flash", layout) && diff != nil {
			diff(want, got)
		}
		assertSameLSE(t, wantLSE, lse, layout.String()+" against flash")
		gotSplit, n := split()
		require.Equal(t, splits, n, "%v: forced split count", layout)
		assert.LessOrEqual(t, ref.RelL2(gotSplit, wantSplit), tol, "%v against flash, %d splits", layout, splits)
	}
}

// otherLayouts are the cache layouts other than flash.
var otherLayouts = []pagedkv.CacheLayout{pagedkv.LayoutXSplit, pagedkv.LayoutShuffle, pagedkv.LayoutHND}

// relayout writes every slot of the flash caches k and v (numBlocks pages
// of blockSize tokens, kvHeads × headDim elements of cache each) into new
// caches of each of otherLayouts on arena: a Gather of every slot, then an
// Append of those rows. Append takes 16-bit rows, so e4m3 rows are widened
// on the host (exact in f16) and appended with scale 1, which writes the
// same bytes back. It returns each layout's (K, V).
func relayout(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, arena *check.Arena, k, v pagedkv.Buffer,
	numBlocks, blockSize, kvHeads, headDim int, cache pagedkv.DType) map[pagedkv.CacheLayout][2]pagedkv.Buffer {
	t.Helper()
	slots := make([]int64, numBlocks*blockSize)
	for i := range slots {
		slots[i] = int64(i)
	}
	elems := len(slots) * kvHeads * headDim
	gather := pagedkv.GatherArgs{
		KCache: k, VCache: v, NumTokens: len(slots), NumKVHeads: kvHeads,
		HeadDim: headDim, BlockSize: blockSize, NumBlocks: numBlocks, CacheDType: cache,
	}
	var set check.Setter
	set.To(&gather.SlotMapping)(check.Upload(arena, s, slots, 8))
	set.To(&gather.KOut)(arena.Alloc(int64(elems * cache.Size())))
	set.To(&gather.VOut)(arena.Alloc(int64(elems * cache.Size())))
	require.NoError(t, set.Err)
	require.NoError(t, r.Gather(s, &gather))
	app := pagedkv.AppendArgs{
		K: gather.KOut, V: gather.VOut, SlotMapping: gather.SlotMapping,
		NumTokens: len(slots), NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize,
		NumBlocks: numBlocks, DType: cache, CacheDType: cache,
	}
	if cache == pagedkv.E4M3 {
		app.DType, app.KScale, app.VScale = pagedkv.F16, 1, 1
		set.To(&app.K)(widenE4M3(arena, s, gather.KOut, elems))
		set.To(&app.V)(widenE4M3(arena, s, gather.VOut, elems))
	}
	laid := map[pagedkv.CacheLayout][2]pagedkv.Buffer{}
	for _, layout := range otherLayouts {
		app.Layout = layout
		set.To(&app.KCache)(arena.Alloc(k.Bytes))
		set.To(&app.VCache)(arena.Alloc(v.Bytes))
		require.NoError(t, set.Err)
		require.NoError(t, r.Append(s, &app))
		laid[layout] = [2]pagedkv.Buffer{app.KCache, app.VCache}
	}
	return laid
}

// widenE4M3 returns a device copy of n e4m3 bytes of src as f16 values
// (every e4m3 value is exact in f16).
func widenE4M3(arena *check.Arena, s *pagedkv.Stream, src pagedkv.Buffer, n int) (pagedkv.Buffer, error) {
	raw := make([]uint8, n)
	if err := pagedkv.Download(s, raw, src); err != nil {
		return pagedkv.Buffer{}, err
	}
	vals := make([]float32, n)
	if err := pagedkv.Float32FromE4M3(vals, raw, 1); err != nil {
		return pagedkv.Buffer{}, err
	}
	half := make([]uint16, n)
	if err := pagedkv.F16FromFloat32(half, vals); err != nil {
		return pagedkv.Buffer{}, err
	}
	return check.Upload(arena, s, half, 2)
}

// download copies n elements of a device buffer back on s.
func download[T any](t testing.TB, s *pagedkv.Stream, b pagedkv.Buffer, n int) []T {
	t.Helper()
	out := make([]T, n)
	require.NoError(t, pagedkv.Download(s, out, b))
	return out
}

func ptr[T any](v T) *T { return &v }

// captureDecode captures one decode of a on s into a graph (reserve first
// unless a has a Workspace); a failed decode or capture fails the test with
// msg. The caller closes the graph.
func captureDecode(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, a *pagedkv.DecodeArgs, msg ...any) *pagedkv.Graph {
	t.Helper()
	require.NoError(t, s.BeginCapture())
	err := r.Decode(s, a)
	graph, endErr := s.EndCapture()
	require.NoError(t, err, msg...)
	require.NoError(t, endErr)
	return graph
}

// replayVarlenAt replays graph, a varlen of p (shape c) captured for at
// most budget tokens, once per KV bound in kvs: fresh random lengths within
// the bound and the budget, outputs poisoned (and before, when not nil,
// run), then the replay checked against float64.
func replayVarlenAt(t *testing.T, s *pagedkv.Stream, g *rand.Rand, p *check.VarlenProblem, graph *pagedkv.Graph,
	c check.VarlenShape, budget int, kvs []int, before func()) {
	t.Helper()
	for _, maxKV := range kvs {
		shape := c
		shape.MaxKV = maxKV
		shape.MaxQLen = min(c.MaxQLen, maxKV, budget/c.Seqs)
		cu, pos := check.VarlenLens(g, shape)
		require.NoError(t, p.SetLens(s, cu, pos))
		require.NoError(t, p.Poison(s))
		if before != nil {
			before()
		}
		require.NoError(t, graph.Launch(s))
		out, lse, err := p.Fetch(s)
		require.NoError(t, err)
		require.NoError(t, p.Check(out, lse), "replay with %d tokens, KV up to %d", cu[c.Seqs], maxKV)
	}
}

// captureVarlen captures one varlen of a on s into a graph (the caller
// reserves first unless a has a Workspace); a failed varlen or capture fails
// the test with msg. The caller closes the graph.
func captureVarlen(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, a *pagedkv.VarlenArgs, msg ...any) *pagedkv.Graph {
	t.Helper()
	require.NoError(t, s.BeginCapture())
	err := r.Varlen(s, a)
	graph, endErr := s.EndCapture()
	require.NoError(t, err, msg...)
	require.NoError(t, endErr)
	return graph
}
