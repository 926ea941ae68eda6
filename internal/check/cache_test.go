package check

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
)

// groupKinds counts the 8-token groups that the cache kernels move as one
// page run (page_run in kernels_src/cache.cu: all 8 resolved slots valid and
// consecutive from a multiple of 8, block size ≥ 8, a token-minor V layout)
// and the groups they move token by token.
func groupKinds(c AppendShape, slots, remap []int64) (runs, others int) {
	resolved := func(t int) int64 {
		s := slots[t]
		if s >= 0 && remap != nil {
			s = remap[s]
		}
		return s
	}
	for t0 := 0; t0 < c.Tokens; t0 += 8 {
		s0 := resolved(t0)
		run := c.Layout != pagedkv.LayoutFlash && c.BlockSize >= 8 && t0+8 <= c.Tokens && s0 >= 0 && s0%8 == 0
		for j := 1; run && j < 8; j++ {
			run = resolved(t0+j) == s0+int64(j)
		}
		if run {
			runs++
		} else {
			others++
		}
	}
	return runs, others
}

// TestPageRunSlots checks that page-run slots are distinct and in range,
// and that they hold both aligned runs and groups that are not.
func TestPageRunSlots(t *testing.T) {
	g := rand.New(rand.NewPCG(1, 2))
	for _, bs := range []int{1, 4, 8, 16, 64, 256} {
		var runs, others int
		for range 50 {
			n := 1 + g.IntN(600)
			blocks := (n+bs-1)/bs + g.IntN(5)
			slots := PageRunSlots(g, n, blocks, bs)
			require.Len(t, slots, n)
			seen := map[int64]bool{}
			for i, s := range slots {
				if s < 0 {
					continue
				}
				require.Less(t, s, int64(blocks*bs), "slot %d", i)
				require.False(t, seen[s], "slot %d (%d) repeats", i, s)
				seen[s] = true
			}
			r, o := groupKinds(AppendShape{Tokens: n, BlockSize: bs, Layout: pagedkv.LayoutXSplit}, slots, nil)
			runs, others = runs+r, others+o
		}
		if bs >= 8 {
			assert.Positive(t, runs, "bs=%d: no aligned runs", bs)
		}
		assert.Positive(t, others, "bs=%d: every group is a run", bs)
	}
}

// TestPageRemap checks that the page remap is a partial bijection onto the
// slots.
func TestPageRemap(t *testing.T) {
	g := rand.New(rand.NewPCG(3, 4))
	remap := PageRemap(g, 37, 16)
	seen := map[int64]bool{}
	for i, s := range remap {
		if s < 0 {
			continue
		}
		require.Less(t, s, int64(len(remap)))
		require.False(t, seen[s], "entry %d (%d) repeats", i, s)
		seen[s] = true
	}
	assert.Greater(t, len(seen), len(remap)*9/10)
}

// TestRandomAppendShapesCoverBothPaths checks that the random append
// problems of the GPU tests reach the page-run path and the token-by-token
// path of the cache kernels, for each token-minor layout, 16-bit and fp8
// caches, with and without a remap table.
func TestRandomAppendShapesCoverBothPaths(t *testing.T) {
	type kind struct {
		layout pagedkv.CacheLayout
		fp8    bool
		remap  bool
	}
	runs, others := map[kind]int{}, map[kind]int{}
	g := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		c := RandomAppendShape(g)
		slots, remap := c.drawSlots(g)
		k := kind{c.Layout, c.CacheDType == pagedkv.E4M3, c.Remap}
		r, o := groupKinds(c, slots, remap)
		runs[k] += r
		others[k] += o
	}
	for _, l := range []pagedkv.CacheLayout{pagedkv.LayoutXSplit, pagedkv.LayoutShuffle} {
		for _, fp8 := range []bool{false, true} {
			for _, remap := range []bool{false, true} {
				k := kind{l, fp8, remap}
				assert.Positive(t, runs[k], "%+v: no page runs", k)
				assert.Positive(t, others[k], "%+v: no token-by-token groups", k)
			}
		}
	}
}
