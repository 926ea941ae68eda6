package tests

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

func ropeProblem(t *testing.T, r *pagedkv.Runtime, g *rand.Rand, c check.RopeShape) *check.RopeProblem {
	t.Helper()
	p, err := check.NewRopeProblem(r, r.Stream(), g, c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Arena.Free()) })
	return p
}

func TestRopeCacheMatchesReference(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	shapes := []check.RopeShape{
		{Tokens: 64, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 6, DType: pagedkv.F16, CacheDType: pagedkv.F16, NeoX: true, HalfRot: true},
		{Tokens: 50, KVOnly: 7, QHeads: 8, KVHeads: 8, HeadDim: 64, BlockSize: 8, NumBlocks: 9, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Offsets: true, Zeros: true, PadToken: 8},
		{Tokens: 33, QHeads: 16, KVHeads: 2, HeadDim: 256, BlockSize: 32, NumBlocks: 3, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutShuffle, NeoX: true, Remap: true},
		{Tokens: 40, KVOnly: 3, QHeads: 4, KVHeads: 1, HeadDim: 128, BlockSize: 16, NumBlocks: 4, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutXSplit, HalfRot: true},
		{Tokens: 300, KVOnly: 20, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 24, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutHND, NeoX: true, PageRuns: true, HostSlots: true},
		{Tokens: 45, QHeads: 12, KVHeads: 3, HeadDim: 96, BlockSize: 8, NumBlocks: 9, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutHND, Remap: true},
	}
	for range 8 {
		shapes = append(shapes, check.RandomRopeShape(g))
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			p := ropeProblem(t, r, g, c)
			require.NoError(t, p.RunAndCheck(r, r.Stream()))
		})
	}
}

// TestRopeCacheValuesLaunch covers RopeCache's V launch into the x-split and
// shuffle layouts (dispatch.RopeValuesMinTokens, HostSlotMapping): prefill
// slots in page runs through the shared-memory tiles (16-bit caches, head
// dims that are powers of two) and the lane-pair path (fp8, head dim 96),
// pages of 8, 16 and 32 rows, KV-only tokens, remapped pages, host slots
// that show runs and host slots that do not (one launch), and scattered
// slots without host slots (two launches).
func TestRopeCacheValuesLaunch(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	shapes := []check.RopeShape{
		{Tokens: 300, KVOnly: 20, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 48, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, NeoX: true, HalfRot: true, PageRuns: true},
		{Tokens: 256, QHeads: 16, KVHeads: 4, HeadDim: 64, BlockSize: 32, NumBlocks: 24, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutShuffle, Offsets: true, PageRuns: true, HostSlots: true},
		{Tokens: 200, KVOnly: 5, QHeads: 4, KVHeads: 4, HeadDim: 256, BlockSize: 16, NumBlocks: 32, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutXSplit, NeoX: true, PageRuns: true, Remap: true},
		{Tokens: 160, QHeads: 8, KVHeads: 1, HeadDim: 96, BlockSize: 8, NumBlocks: 48, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, Layout: pagedkv.LayoutXSplit, NeoX: true, PageRuns: true, HostSlots: true, Zeros: true},
		{Tokens: 150, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 20, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutShuffle, HalfRot: true},
		{Tokens: 40, KVOnly: 120, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 24, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, Layout: pagedkv.LayoutShuffle, NeoX: true, PageRuns: true, HostSlots: true, PadToken: 8},
		{Tokens: 130, QHeads: 4, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 20, DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: pagedkv.LayoutXSplit, NeoX: true, HostSlots: true},
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			p := ropeProblem(t, r, g, c)
			require.NoError(t, p.RunAndCheck(r, r.Stream()))
		})
	}
}

// TestRopeCacheHeadDims covers the head dims that are not powers of two in
// both styles and table widths: those whose halves are whole 16-byte pieces
// (80, 96, 112, 192) and those whose halves are not (24, 120), through
// every layout and f16, bf16 and fp8 caches where the layout allows them.
func TestRopeCacheHeadDims(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	layouts := []pagedkv.CacheLayout{pagedkv.LayoutFlash, pagedkv.LayoutXSplit, pagedkv.LayoutShuffle, pagedkv.LayoutHND}
	i := 0
	for _, d := range []int{24, 80, 96, 112, 120, 192} {
		for _, neox := range []bool{true, false} {
			for _, halfRot := range []bool{true, false} {
				c := check.RopeShape{Tokens: 37, KVOnly: 3, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 16, NumBlocks: 4,
					DType: []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[i%2], NeoX: neox, HalfRot: halfRot,
					Layout: layouts[i/2%4], Zeros: i%2 == 0, Offsets: i%3 == 0}
				c.CacheDType = c.DType
				if i%3 == 2 && (!c.Layout.Laid() || d%16 == 0) {
					c.CacheDType = pagedkv.E4M3
				}
				i++
				t.Run(c.String(), func(t *testing.T) {
					p := ropeProblem(t, r, g, c)
					require.NoError(t, p.RunAndCheck(r, r.Stream()))
				})
			}
		}
	}
}

// TestRopeCachePositionFault checks that a position outside the cos/sin
// table is reported and that token is not written.
func TestRopeCachePositionFault(t *testing.T) {
	r := open(t, config.Options{CheckBounds: ptr(true)})
	g := rng(t)
	p := ropeProblem(t, r, g, check.RopeShape{Tokens: 4, QHeads: 4, KVHeads: 2, HeadDim: 64, BlockSize: 16, NumBlocks: 2,
		DType: pagedkv.F16, CacheDType: pagedkv.F16, NeoX: true})
	s := r.Stream()
	require.NoError(t, pagedkv.Upload(s, p.Args.Positions, []int64{1, 2, 1 << 40, 3}))
	err := r.RopeCache(s, &p.Args)
	var fe *pagedkv.FaultError
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Equal(t, int64(2), fe.A)
	assert.Contains(t, fe.Error(), "outside the cos/sin table")
}

// TestRopeValuesSkipPositionFault checks that with V in a launch of its own
// (x-split and shuffle layouts, page-run slots) a token whose position is
// outside the cos/sin table has neither its K nor its V written, and every
// other token both.
func TestRopeValuesSkipPositionFault(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	for _, layout := range []pagedkv.CacheLayout{pagedkv.LayoutXSplit, pagedkv.LayoutShuffle} {
		c := check.RopeShape{Tokens: 192, KVOnly: 8, QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 30,
			DType: pagedkv.F16, CacheDType: pagedkv.F16, Layout: layout, NeoX: true, PageRuns: true}
		t.Run(c.String(), func(t *testing.T) {
			p := ropeProblem(t, r, g, c)
			s := r.Stream()
			bad := 1 + g.IntN(c.Tokens-1)
			for p.SlotMapping[bad] < 0 {
				bad = (bad + 1) % c.Tokens
			}
			positions := make([]int64, c.Tokens)
			copy(positions, p.Positions)
			positions[bad] = -5
			require.NoError(t, pagedkv.Upload(s, p.Args.Positions, positions))
			require.NoError(t, r.RopeCache(s, &p.Args))
			var fe *pagedkv.FaultError
			require.True(t, errors.As(s.Fault(), &fe), "want a FaultError")
			assert.Equal(t, int64(bad), fe.A)
			require.NoError(t, p.CheckCachesSkipping(s, bad))
		})
	}
}
