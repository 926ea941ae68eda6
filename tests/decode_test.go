package tests

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
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

func TestDecodeMatchesReference(t *testing.T) {
	auto := open(t, config.Options{})
	single := open(t, config.Options{PagedFlash: ptr(false)})
	// Seven splits: one thread-block cluster per (sequence, KV head) that
	// merges on chip where the device has clusters (sm_90+), and the merge
	// through global memory and counters with clusters off.
	split7 := open(t, config.Options{PagedFlashSplits: ptr(7)})
	global7 := open(t, config.Options{PagedFlashSplits: ptr(7), DecodeClusters: ptr(false)})
	// And up to 64 splits (fewer where the pages run out): the merge spreads
	// a column's splits over several lanes where the heads leave threads
	// idle (global_merge in kernels_src/decode.cuh), and each lane of a
	// head's weights warp takes two splits.
	global64 := open(t, config.Options{PagedFlashSplits: ptr(64), DecodeClusters: ptr(false)})
	g := rng(t)
	shapes := []check.DecodeShape{
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1000},
		{Seqs: 3, QHeads: 16, KVHeads: 1, HeadDim: 64, BlockSize: 1, MaxBlocksPerSeq: 300, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 300},
		{Seqs: 2, QHeads: 6, KVHeads: 2, HeadDim: 256, BlockSize: 256, MaxBlocksPerSeq: 9, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 2100},
		{Seqs: 5, QHeads: 5, KVHeads: 5, HeadDim: 128, BlockSize: 32, MaxBlocksPerSeq: 8, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 256},
		// The x-split and shuffle layouts (V read transposed): narrow and
		// wide kernels, every head dim, block sizes 8 (a tile spans two
		// pages) to 256, lengths that end inside a tile's chunk.
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1000, Layout: pagedkv.LayoutXSplit},
		{Seqs: 3, QHeads: 48, KVHeads: 4, HeadDim: 64, BlockSize: 8, MaxBlocksPerSeq: 100, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 797, Layout: pagedkv.LayoutXSplit},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 256, MaxBlocksPerSeq: 9, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 2100, Layout: pagedkv.LayoutShuffle},
		{Seqs: 6, QHeads: 12, KVHeads: 2, HeadDim: 128, BlockSize: 32, MaxBlocksPerSeq: 20, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 613, Layout: pagedkv.LayoutShuffle},
		{Seqs: 5, QHeads: 16, KVHeads: 16, HeadDim: 64, BlockSize: 16, MaxBlocksPerSeq: 40, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 637, Layout: pagedkv.LayoutXSplit},
		// e4m3 caches in those layouts (blocks of 16 or more; K's tokens
		// land in the order the transposed V's bytes give the mma): narrow
		// (groups ≤ 8) and wide kernels, every head dim.
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 1000, Layout: pagedkv.LayoutXSplit},
		{Seqs: 3, QHeads: 48, KVHeads: 4, HeadDim: 64, BlockSize: 32, MaxBlocksPerSeq: 30, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 901, Layout: pagedkv.LayoutXSplit},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 256, MaxBlocksPerSeq: 9, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 2100, Layout: pagedkv.LayoutShuffle},
		{Seqs: 6, QHeads: 12, KVHeads: 1, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 40, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 613, Layout: pagedkv.LayoutShuffle},
		{Seqs: 5, QHeads: 8, KVHeads: 8, HeadDim: 64, BlockSize: 64, MaxBlocksPerSeq: 12, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 637, Layout: pagedkv.LayoutShuffle},
		{Seqs: 3, QHeads: 64, KVHeads: 4, HeadDim: 256, BlockSize: 16, MaxBlocksPerSeq: 50, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 777, Layout: pagedkv.LayoutXSplit},
		// The HND layout (the flash loaders over head-major pages): narrow
		// and wide kernels, 16-bit and e4m3 caches, blocks of 1 to 256,
		// padded (120) and other head dims.
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1000, Layout: pagedkv.LayoutHND},
		{Seqs: 3, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 1, MaxBlocksPerSeq: 300, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 300, Layout: pagedkv.LayoutHND},
		{Seqs: 2, QHeads: 6, KVHeads: 2, HeadDim: 256, BlockSize: 256, MaxBlocksPerSeq: 9, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 2100, Layout: pagedkv.LayoutHND},
		{Seqs: 5, QHeads: 40, KVHeads: 5, HeadDim: 128, BlockSize: 32, MaxBlocksPerSeq: 30, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 901, Layout: pagedkv.LayoutHND},
		{Seqs: 3, QHeads: 64, KVHeads: 4, HeadDim: 120, BlockSize: 16, MaxBlocksPerSeq: 50, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 777, Layout: pagedkv.LayoutHND},
		{Seqs: 4, QHeads: 12, KVHeads: 3, HeadDim: 96, BlockSize: 8, MaxBlocksPerSeq: 100, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 650, Layout: pagedkv.LayoutHND},
	}
	for range 10 {
		shapes = append(shapes, check.RandomDecodeShape(g))
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, auto, auto.Stream(), g, c)
			plan, err := auto.PlanDecode(auto.Stream(), &p.Args)
			require.NoError(t, err)
			t.Logf("auto plan: %s, %d splits (%s)", plan.Kernel, plan.Splits, plan.Reason)
			out, lse, err := p.Run(auto, auto.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse))
			// Single-pass and a forced split count must each match float64, and
			// agree with each other more tightly.
			o1, l1, err := p.Run(single, single.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(o1, l1))
			for _, r := range []*pagedkv.Runtime{split7, global7, global64} {
				plan, err := r.PlanDecode(r.Stream(), &p.Args)
				require.NoError(t, err)
				o7, l7, err := p.Run(r, r.Stream())
				require.NoError(t, err)
				require.NoError(t, p.Check(o7, l7), "%s, %d splits", plan.Kernel, plan.Splits)
				assert.LessOrEqual(t, ref.RelL2(o7, o1), check.Tolerance(c.DType)/2, "split-K (%s) vs single-pass", plan.Kernel)
				for i := range l1 {
					if !math.IsInf(float64(l1[i]), -1) {
						assert.InDelta(t, l1[i], l7[i], 1e-4*max(1, math.Abs(float64(l1[i]))), "LSE[%d] split-K (%s) vs single-pass", i, plan.Kernel)
					}
				}
			}
		})
	}
}

// TestDecodeLayoutsAgree writes the same tokens into caches of every
// layout (relayout: Gather of a flash cache's every slot, then Append into
// x-split and shuffle caches) and checks that Decode (the planner's plan
// and a forced split count) sees the same cache in each: the outputs agree
// far more tightly than any of them agrees with float64. Narrow and wide
// kernels, 16-bit and e4m3 caches.
func TestDecodeLayoutsAgree(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for _, c := range []check.DecodeShape{
		{Seqs: 5, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 60, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 900},
		{Seqs: 3, QHeads: 24, KVHeads: 2, HeadDim: 64, BlockSize: 8, MaxBlocksPerSeq: 150, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1111},
		{Seqs: 6, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 70, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 1000},
		{Seqs: 2, QHeads: 32, KVHeads: 2, HeadDim: 256, BlockSize: 32, MaxBlocksPerSeq: 30, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 901},
		{Seqs: 4, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 64, MaxBlocksPerSeq: 20, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 1200},
	} {
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, r, s, g, c)
			a := p.Args
			assertLayoutsAgree(t, r, s, p, a.KCache, a.VCache, a.NumBlocks, a.BlockSize, c.KVHeads, c.HeadDim, c.CacheDType,
				check.Tolerance(c.DType)/64, nil)
		})
	}
}

// TestDecodeScale checks an explicit softmax scale.
func TestDecodeScale(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	p := decodeProblem(t, r, r.Stream(), g, check.DecodeShape{Seqs: 3, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxBlocksPerSeq: 20, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 300})
	p.Args.Scale = 0.37
	out, lse, err := p.Run(r, r.Stream())
	require.NoError(t, err)
	require.NoError(t, p.Check(out, lse))
}

// TestDecodeGraphReplay captures one decode planned for KV_CAPACITY and
// replays it with other lengths up to that capacity.
func TestDecodeGraphReplay(t *testing.T) {
	for _, clusters := range []bool{true, false} {
		t.Run(fmt.Sprintf("clusters=%v", clusters), func(t *testing.T) { testDecodeGraphReplay(t, clusters) })
	}
}

func testDecodeGraphReplay(t *testing.T, clusters bool) {
	const capacity = 2048
	r := open(t, config.Options{KVCapacity: ptr(capacity), DecodeClusters: ptr(clusters)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	for _, c := range []check.DecodeShape{
		{Seqs: 2, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: capacity / 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 100},
		{Seqs: 64, QHeads: 8, KVHeads: 8, HeadDim: 64, BlockSize: 32, MaxBlocksPerSeq: capacity / 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 100},
	} {
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, r, s, g, c)
			require.NoError(t, r.ReserveDecode(s, &p.Args))
			graph := captureDecode(t, r, s, &p.Args)
			t.Cleanup(func() { require.NoError(t, graph.Close()) })
			for _, maxLen := range []int{capacity, 1, 700, capacity - 1} {
				require.NoError(t, p.SetLens(s, check.RandomLens(g, c.Seqs, maxLen, c.BlockSize)))
				require.NoError(t, p.Poison(s))
				require.NoError(t, graph.Launch(s))
				out, lse, err := p.Fetch(s)
				require.NoError(t, err)
				require.NoError(t, p.Check(out, lse), "replay with lengths up to %d", maxLen)
				// An eager call planned for the real lengths agrees.
				eager, _, err := p.Run(r, s)
				require.NoError(t, err)
				assert.LessOrEqual(t, ref.RelL2(eager, out), check.Tolerance(c.DType)/2, "graph replay vs eager")
			}
		})
	}
}

// TestDecodeClusterPlans checks which split-K path the runtime picks: one
// thread-block cluster per (sequence, KV head) for 2..8 splits on a device
// with clusters (compute capability 9.0+) unless DECODE_CLUSTERS is off;
// the global-memory merge otherwise. A cluster plan handed to
// DecodeWithPlan runs and matches the reference.
func TestDecodeClusterPlans(t *testing.T) {
	for _, tt := range []struct {
		splits   int
		clusters bool
	}{{4, true}, {8, true}, {16, true}, {4, false}} {
		t.Run(fmt.Sprintf("splits=%d clusters=%v", tt.splits, tt.clusters), func(t *testing.T) {
			r := open(t, config.Options{PagedFlashSplits: ptr(tt.splits), DecodeClusters: ptr(tt.clusters)})
			g := rng(t)
			c := check.DecodeShape{Seqs: 3, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1024}
			p := decodeProblem(t, r, r.Stream(), g, c)
			plan, err := r.PlanDecode(r.Stream(), &p.Args)
			require.NoError(t, err)
			require.Equal(t, tt.splits, plan.Splits)
			want := uint32(0)
			if tt.clusters && tt.splits <= 8 && r.Info().ComputeMajor >= 9 {
				want = uint32(tt.splits)
			}
			assert.Equal(t, want, plan.Cluster, "%s", plan.Kernel)
			out, lse, err := p.RunWithPlan(r, r.Stream(), plan)
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse))
		})
	}
}

// TestDecodeRingDepths runs one decode per ring depth the kernels take (2..4
// stages, as dispatch.DecodeStagesShared sizes them and the device holds),
// single-pass and split, for each cache type, head dims 64 and 128 and both
// the narrow (groups up to 8) and the wide 16-bit kernels: the
// planner picks the depth by grid size (dispatch.OneWaveRingBytes), so small
// test grids alone would leave the deeper rings untested. Each warp streams
// more tiles than any ring holds, so the ring wraps.
func TestDecodeRingDepths(t *testing.T) {
	single := open(t, config.Options{PagedFlash: ptr(false)})
	split := open(t, config.Options{PagedFlashSplits: ptr(3)})
	g := rng(t)
	for _, c := range []check.DecodeShape{
		{Seqs: 3, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1000},
		{Seqs: 2, QHeads: 12, KVHeads: 2, HeadDim: 64, BlockSize: 8, MaxBlocksPerSeq: 150, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1190},
		{Seqs: 2, QHeads: 8, KVHeads: 8, HeadDim: 128, BlockSize: 32, MaxBlocksPerSeq: 40, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 1250},
		{Seqs: 2, QHeads: 24, KVHeads: 2, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 80, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1270}, // group 12: the wide kernel
	} {
		for _, r := range []*pagedkv.Runtime{single, split} {
			p := decodeProblem(t, r, r.Stream(), g, c)
			plan, err := r.PlanDecode(r.Stream(), &p.Args)
			require.NoError(t, err)
			for stages := dispatch.DecodeMinStages; stages <= dispatch.DecodeMaxStages; stages++ {
				n, ok := dispatch.DecodeStagesShared(plan.Kernel, stages)
				require.True(t, ok, plan.Kernel)
				if n > r.Info().MaxSharedPerBlockOptin {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%d splits/%d stages", c, plan.Kernel, plan.Splits, stages), func(t *testing.T) {
					pl := plan
					pl.SharedBytes = uint32(n)
					out, lse, err := p.RunWithPlan(r, r.Stream(), pl)
					require.NoError(t, err)
					require.NoError(t, p.Check(out, lse))
				})
			}
		}
	}
}

// TestDecodeConcurrentStreams runs split-K decodes from 8 goroutines on 8
// streams at once, repeatedly; every output must match the reference.
func TestDecodeConcurrentStreams(t *testing.T) {
	r := open(t, config.Options{PagedFlashSplits: ptr(4)})
	g := rng(t)
	c := check.DecodeShape{Seqs: 8, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 128, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 2048}
	const workers, rounds = 8, 25
	problems := make([]*check.DecodeProblem, workers)
	streams := make([]*pagedkv.Stream, workers)
	for i := range problems {
		s, err := r.NewStream()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		streams[i] = s
		problems[i] = decodeProblem(t, r, s, g, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				out, lse, err := problems[i].Run(r, streams[i])
				if err == nil {
					err = problems[i].Check(out, lse)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", i, round, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDecodeLargePool uses caches of more than 2^31 elements each, with the
// sequences' pages at the top of the pool.
func TestDecodeLargePool(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	a := arena(t, r)
	const numBlocks, bs, kvHeads, dim, qHeads, seqs, pages = 262144, 16, 8, 128, 32, 3, 40
	const pageElems = bs * kvHeads * dim
	cacheBytes := int64(numBlocks) * pageElems * 2
	require.Greater(t, cacheBytes/2, int64(1)<<31)
	kc, err := a.Alloc(cacheBytes)
	require.NoError(t, err)
	vc, err := a.Alloc(cacheBytes)
	require.NoError(t, err)

	// The reference sees a compact pool whose block i is GPU block top[i].
	n := seqs * pages
	top := make([]int32, n)
	for i, p := range g.Perm(n) {
		top[i] = int32(numBlocks - 1 - 3*p)
	}
	kRaw, k := check.RandomTensor(g, pagedkv.F16, n*pageElems, 1)
	vRaw, v := check.RandomTensor(g, pagedkv.F16, n*pageElems, 1)
	for i, b := range top {
		off := int64(b) * pageElems * 2
		kd, err := kc.Slice(off, pageElems*2)
		require.NoError(t, err)
		vd, err := vc.Slice(off, pageElems*2)
		require.NoError(t, err)
		require.NoError(t, pagedkv.Upload(s, kd, kRaw[i*pageElems*2:(i+1)*pageElems*2]))
		require.NoError(t, pagedkv.Upload(s, vd, vRaw[i*pageElems*2:(i+1)*pageElems*2]))
	}
	compact := make([]int32, n)
	for i := range compact {
		compact[i] = int32(i)
	}
	lens := []int32{pages * bs, pages*bs - 7, 1}
	qRaw, q := check.RandomTensor(g, pagedkv.F16, seqs*qHeads*dim, 1)
	qBuf, err := check.Upload(a, s, qRaw, 1)
	require.NoError(t, err)
	tables, err := check.Upload(a, s, top, 4)
	require.NoError(t, err)
	lensBuf, err := check.Upload(a, s, lens, 4)
	require.NoError(t, err)
	out, err := a.Alloc(seqs * qHeads * dim * 2)
	require.NoError(t, err)
	lse, err := a.Alloc(seqs * qHeads * 4)
	require.NoError(t, err)
	p := &check.DecodeProblem{
		Shape: check.DecodeShape{Seqs: seqs, QHeads: qHeads, KVHeads: kvHeads, HeadDim: dim, BlockSize: bs, MaxBlocksPerSeq: pages, NumBlocks: n, DType: pagedkv.F16, CacheDType: pagedkv.F16},
		Args: pagedkv.DecodeArgs{
			Q: qBuf, KCache: kc, VCache: vc, BlockTables: tables, KVLens: lensBuf, Out: out, LSE: lse,
			NumSeqs: seqs, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: dim, BlockSize: bs,
			NumBlocks: numBlocks, MaxBlocksPerSeq: pages, MaxKVLen: pages * bs,
			DType: pagedkv.F16, CacheDType: pagedkv.F16,
		},
		Q: q, K: k, V: v, Tables: compact, Lens: lens,
	}
	got, gotLSE, err := p.Run(r, s)
	require.NoError(t, err)
	require.NoError(t, p.Check(got, gotLSE))
}

// TestDecodeEveryDevice runs decodes on every visible device at the same
// time, one Runtime per device.
func TestDecodeEveryDevice(t *testing.T) {
	open(t, config.Options{}) // skips without a GPU
	n, err := driver.DeviceCount()
	require.NoError(t, err)
	t.Logf("%d device(s)", n)
	c := check.DecodeShape{Seqs: 16, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1024}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for d := range n {
		r := openDevice(t, d, config.Options{})
		p := decodeProblem(t, r, r.Stream(), rand.New(rand.NewPCG(uint64(d), 7)), c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				out, lse, err := p.Run(r, r.Stream())
				if err == nil {
					err = p.Check(out, lse)
				}
				if err != nil {
					errs <- fmt.Errorf("device %d: %w", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDecodeFaults checks that bad device-resident indices are contained
// (nothing outside the cache is read: compute-sanitizer checks that) and
// reported by the checking mode.
func TestDecodeFaults(t *testing.T) {
	r := open(t, config.Options{CheckBounds: ptr(true)})
	g := rng(t)
	s := r.Stream()
	c := check.DecodeShape{Seqs: 3, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxBlocksPerSeq: 4, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 64}
	p := decodeProblem(t, r, s, g, c)

	bad := append([]int32(nil), p.Tables...)
	bad[1*c.MaxBlocksPerSeq+2] = int32(p.Shape.NumBlocks + 1000)
	require.NoError(t, pagedkv.Upload(s, p.Args.BlockTables, bad))
	require.NoError(t, p.SetLens(s, []int32{64, 64, 64}))
	err := r.Decode(s, &p.Args)
	var fe *pagedkv.FaultError
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Contains(t, fe.Error(), "BlockTables[1][2]")

	require.NoError(t, pagedkv.Upload(s, p.Args.BlockTables, p.Tables))
	require.NoError(t, pagedkv.Upload(s, p.Args.KVLens, []int32{5, 1 << 20, 3}))
	err = r.Decode(s, &p.Args)
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Contains(t, fe.Error(), "KVLens[1]=1048576")
}
