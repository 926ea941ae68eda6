package tests

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// varlenProblem draws a varlen problem on s whose memory is freed when the
// test ends.
func varlenProblem(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c check.VarlenShape) *check.VarlenProblem {
	t.Helper()
	p, err := check.NewVarlenProblem(r, s, g, c)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
	return p
}

// assertSameLSE checks two LSE vectors of paths that must agree closely.
func assertSameLSE(t *testing.T, want, got []float32, msg string) {
	t.Helper()
	for i := range want {
		if !assert.InDelta(t, want[i], got[i], 1e-4*max(1, math.Abs(float64(want[i]))), "LSE[%d] %s", i, msg) {
			return
		}
	}
}

// TestVarlenMatchesReference runs random mixed batches (q_len 1…300 with
// some 1s, KV up to ~2300, shuffled page tables, every head dim, groups
// 1..16, block sizes 1..256, f16/bf16, fp8 caches, causal and not) against
// float64, single-pass (SPLIT_K_ATTN=0) and with a forced split count
// (PlanVarlenWith, VarlenWithPlan), and checks that the
// two paths agree more tightly than either agrees with float64.
func TestVarlenMatchesReference(t *testing.T) {
	auto := open(t, config.Options{})
	single := open(t, config.Options{SplitKAttn: ptr(config.SplitOff)})
	g := rng(t)
	shapes := []check.VarlenShape{
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 200, MaxKV: 700, Causal: true},
		{Seqs: 2, QHeads: 16, KVHeads: 1, HeadDim: 64, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 70, MaxKV: 300, Causal: true},
		{Seqs: 4, QHeads: 6, KVHeads: 2, HeadDim: 256, BlockSize: 256, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 90, MaxKV: 1100, Causal: true},
		{Seqs: 5, QHeads: 5, KVHeads: 5, HeadDim: 128, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 40, MaxKV: 256, Causal: false},
		{Seqs: 1, QHeads: 8, KVHeads: 8, HeadDim: 64, BlockSize: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 512, MaxKV: 512, Causal: true},
		{Seqs: 6, QHeads: 12, KVHeads: 4, HeadDim: 128, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 1, MaxKV: 900, Causal: true},
		// The x-split and shuffle layouts (K piece-major, V transposed in
		// shared memory): both kernels of each head dim, blocks of 8 to 256.
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 200, MaxKV: 700, Causal: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 200, MaxKV: 700, Causal: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 6, QHeads: 12, KVHeads: 4, HeadDim: 128, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 1, MaxKV: 900, Causal: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 5, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 8, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 9, MaxKV: 611, Causal: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 256, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 100, MaxKV: 1500, Causal: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 4, QHeads: 16, KVHeads: 16, HeadDim: 64, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 150, MaxKV: 603, Causal: false, Layout: pagedkv.LayoutShuffle},
		{Seqs: 2, QHeads: 48, KVHeads: 3, HeadDim: 256, BlockSize: 64, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 37, MaxKV: 999, Causal: true, Layout: pagedkv.LayoutShuffle},
		// fp8 caches in those layouts (blocks of 16 or more): widened into
		// a flash K tile and a transposed V tile.
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 200, MaxKV: 700, Causal: true, Layout: pagedkv.LayoutXSplit},
		{Seqs: 5, QHeads: 12, KVHeads: 4, HeadDim: 64, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 1, MaxKV: 900, Causal: true, Layout: pagedkv.LayoutShuffle},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 128, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 90, MaxKV: 1111, Causal: false, Layout: pagedkv.LayoutXSplit},
		{Seqs: 4, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 9, MaxKV: 777, Causal: true, Layout: pagedkv.LayoutShuffle},
		// The HND layout (the flash loaders over head-major pages): the
		// 128-row, _k64 and _r64 kernels, 16-bit and fp8 caches, blocks of
		// 1 to 256, a head dim between the powers of two.
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 300, MaxKV: 900, Causal: true, Layout: pagedkv.LayoutHND},
		{Seqs: 2, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 70, MaxKV: 300, Causal: true, Layout: pagedkv.LayoutHND},
		{Seqs: 4, QHeads: 6, KVHeads: 2, HeadDim: 256, BlockSize: 256, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 90, MaxKV: 1100, Causal: true, Layout: pagedkv.LayoutHND},
		{Seqs: 6, QHeads: 12, KVHeads: 4, HeadDim: 128, BlockSize: 8, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 1, MaxKV: 900, Causal: true, Layout: pagedkv.LayoutHND},
		{Seqs: 3, QHeads: 15, KVHeads: 3, HeadDim: 80, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 120, MaxKV: 700, Causal: false, Layout: pagedkv.LayoutHND},
	}
	for range 12 {
		shapes = append(shapes, check.RandomVarlenShape(g))
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			p := varlenProblem(t, auto, auto.Stream(), g, c)
			plan, err := auto.PlanVarlen(auto.Stream(), &p.Args)
			require.NoError(t, err)
			t.Logf("auto plan: %s, grid %v, %d splits (%s)", plan.Kernel, plan.Grid, plan.Splits, plan.Reason)
			out, lse, err := p.Run(auto, auto.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse))
			o1, l1, err := p.Run(single, single.Stream())
			require.NoError(t, err)
			require.NoError(t, p.Check(o1, l1), "single-pass")
			// Five splits (fewer where the KV has fewer tiles), through the
			// plan-and-launch pair an engine uses to force a count.
			k := dispatch.DefaultKnobs()
			k.ForcedSplits = 5
			plan5, err := auto.PlanVarlenWith(&p.Args, k)
			require.NoError(t, err)
			o5, l5, err := p.RunWithPlan(auto, auto.Stream(), plan5)
			require.NoError(t, err)
			require.NoError(t, p.Check(o5, l5), "%d splits", plan5.Splits)
			assert.LessOrEqual(t, ref.RelL2(o5, o1), check.Tolerance(c.DType)/2, "split-K (%d) vs single-pass", plan5.Splits)
			assertSameLSE(t, l1, l5, "split-K vs single-pass")

			// Without LSE (single-pass and split-K, whose merge writes it),
			// the outputs are the same.
			withLSE := p.Args.LSE
			p.Args.LSE = pagedkv.Buffer{}
			t.Cleanup(func() { p.Args.LSE = withLSE })
			o0, _, err := p.RunWithPlan(auto, auto.Stream(), plan5)
			require.NoError(t, err)
			assert.Equal(t, o5, o0, "split-K without LSE")
			o0, _, err = p.Run(single, single.Stream())
			require.NoError(t, err)
			assert.Equal(t, o1, o0, "single-pass without LSE")
		})
	}
}

// TestVarlenLayoutsAgree writes the same tokens into caches of every layout
// (Gather of a flash cache's every slot, then Append of those rows into an
// x-split and a shuffle cache) and checks that Varlen (single-pass, split-K,
// and the decode that runs a batch's leading one-token sequences) sees the
// same cache in each: the outputs agree far more tightly than any of them
// agrees with float64.
func TestVarlenLayoutsAgree(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for _, c := range []check.VarlenShape{
		{Seqs: 4, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 180, MaxKV: 900, Causal: true},
		{Seqs: 7, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 3, MaxKV: 1333, Causal: true},
		{Seqs: 2, QHeads: 4, KVHeads: 2, HeadDim: 256, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 77, MaxKV: 500, Causal: false},
		{Seqs: 4, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 150, MaxKV: 800, Causal: true},
		{Seqs: 6, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 5, MaxKV: 1400, Causal: true},
	} {
		t.Run(c.String(), func(t *testing.T) {
			p := varlenProblem(t, r, s, g, c)
			a := p.Args
			assertLayoutsAgree(t, r, s, p, a.KCache, a.VCache, a.NumBlocks, a.BlockSize, c.KVHeads, c.HeadDim, c.CacheDType,
				check.Tolerance(c.DType)/64, func(want, got []float64) { logDisagreement(t, p, want, got) })
		})
	}
}

// TestVarlenKeysAgree runs the 128-row head-dim-128 kernels over 16-bit
// caches with 32-key tiles and with their 64-key twins (Knobs.VarlenKeys),
// in every layout, single-pass and split-K: each matches float64, and the
// two tilings agree more tightly than either agrees with it. Query lengths
// are fixed so that the 128-row kernels run; KV lengths end anywhere in a
// 64-key tile (the twin computes only the first half of a last tile whose
// second half lies past the KV's end). On a device where two of the
// twin's blocks fit an SM, the planner's own plan takes the twin.
func TestVarlenKeysAgree(t *testing.T) {
	r := open(t, config.Options{VarlenWGMMA: ptr(config.SplitOff)}) // the mma.sync kernels' choice
	g := rng(t)
	s := r.Stream()
	for _, c := range []struct {
		shape   check.VarlenShape
		cu, pos []int32
	}{
		{check.VarlenShape{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 200, MaxKV: 1001, Causal: true},
			[]int32{0, 200, 277, 278, 407}, []int32{0, 500, 1000, 33}},
		{check.VarlenShape{Seqs: 2, QHeads: 8, KVHeads: 4, HeadDim: 128, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 300, MaxKV: 2064, Causal: true, Layout: pagedkv.LayoutXSplit},
			[]int32{0, 300, 364}, []int32{17, 2000}},
		{check.VarlenShape{Seqs: 3, QHeads: 16, KVHeads: 2, HeadDim: 128, BlockSize: 64, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 250, MaxKV: 740, Causal: false, Layout: pagedkv.LayoutShuffle},
			[]int32{0, 100, 140, 390}, []int32{0, 700, 5}},
		{check.VarlenShape{Seqs: 1, QHeads: 4, KVHeads: 4, HeadDim: 128, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 333, MaxKV: 1333, Causal: true},
			[]int32{0, 333}, []int32{1000}},
	} {
		t.Run(c.shape.String(), func(t *testing.T) {
			p, err := check.NewVarlenProblemWith(r, s, g, c.shape, c.cu, c.pos)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
			wantOut, wantLSE := p.Reference()
			auto, err := r.PlanVarlen(s, &p.Args)
			require.NoError(t, err)
			var outs [2][2][]float64
			var lses [2][2][]float32
			for ki, keys := range []int{32, 64} {
				for si, splits := range []int{1, 3} {
					k := dispatch.DefaultKnobs()
					k.VarlenKeys, k.ForcedSplits = keys, splits
					plan, err := p.PlanWith(r, k)
					require.NoError(t, err)
					kernel := plan.Kernel
					if plain, ok := dispatch.VarlenClusterPlain(kernel); ok {
						kernel = plain // its splits merge on chip
					}
					_, twin := dispatch.VarlenK64KernelName(kernel)
					require.Equal(t, keys == 32, twin, "%d keys: %s", keys, plan.Kernel)
					if keys == 64 && r.Occupancy(plan.Kernel) >= 2 && splits == 1 {
						assert.Equal(t, plan.Kernel, auto.Kernel, "the planner takes the twin where two blocks fit an SM")
					}
					out, lse, err := p.RunWithPlan(r, s, plan)
					require.NoError(t, err)
					require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "%s, %d splits", plan.Kernel, plan.Splits)
					outs[ki][si], lses[ki][si] = out, lse
				}
			}
			assertPathsAgree(t, p, outs, lses, "64 vs 32 keys")
		})
	}
}

// TestVarlenWGMMAAgree runs varlens that the wgmma kernels take on a
// device that has them (head dims 64 and 128, caches of the queries' type in
// the flash and HND layouts; ragged batches of long and one-token
// sequences, pages of 1 to 256) with Knobs.VarlenWGMMA on and off,
// single-pass and split-K: each matches float64, and the two paths agree
// more tightly than either agrees with it. Without the wgmma modules (not
// compute capability 9.0) both runs take the mma.sync kernels.
func TestVarlenWGMMAAgree(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	wg := r.Facts().WGMMA
	for _, c := range []struct {
		shape   check.VarlenShape
		cu, pos []int32
	}{
		{check.VarlenShape{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 200, MaxKV: 1001, Causal: true},
			[]int32{0, 200, 277, 278, 407}, []int32{0, 500, 1000, 33}},
		{check.VarlenShape{Seqs: 3, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 150, MaxKV: 700, Causal: true, Layout: pagedkv.LayoutHND},
			[]int32{0, 150, 151, 260}, []int32{7, 699, 300}},
		{check.VarlenShape{Seqs: 2, QHeads: 12, KVHeads: 4, HeadDim: 128, BlockSize: 256, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 333, MaxKV: 1333, Causal: false},
			[]int32{0, 333, 400}, []int32{1000, 5}},
		{check.VarlenShape{Seqs: 5, QHeads: 8, KVHeads: 8, HeadDim: 128, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 70, MaxKV: 900, Causal: true, Layout: pagedkv.LayoutHND},
			[]int32{0, 1, 2, 72, 73, 143}, []int32{899, 17, 830, 0, 64}},
	} {
		// No modifiers; soft-cap and ALiBi alone (each its own code in the
		// _mods kernels); a window that ends inside a page, soft-cap, sinks
		// and ALiBi together (a window needs causal).
		mods := []modsCase{{}, {softCap: 30}, {alibi: true}, {softCap: 30, sinks: true, alibi: true}}
		if c.shape.Causal {
			mods[3].window = 37 + g.IntN(200)
		}
		for _, m := range mods {
			t.Run(c.shape.String()+" "+m.String(), func(t *testing.T) {
				p, err := check.NewVarlenProblemWith(r, s, g, c.shape, c.cu, c.pos)
				require.NoError(t, err)
				t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
				require.NoError(t, p.SetMods(s, g, m.window, m.softCap, m.sinks, m.alibi))
				wantOut, wantLSE := p.Reference()
				var outs [2][2][]float64
				var lses [2][2][]float32
				for wi, on := range []bool{false, true} {
					for si, splits := range []int{1, 3} {
						k := dispatch.DefaultKnobs()
						k.VarlenWGMMA, k.ForcedSplits = dispatch.SplitOff, splits
						if on {
							k.VarlenWGMMA = dispatch.SplitOn
						}
						plan, err := p.PlanWith(r, k)
						require.NoError(t, err)
						require.Equal(t, on && wg, dispatch.VarlenWGKernel(plan.Kernel), "%s", plan.Kernel)
						out, lse, err := p.RunWithPlan(r, s, plan)
						require.NoError(t, err)
						require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "%s, %d splits", plan.Kernel, plan.Splits)
						outs[wi][si], lses[wi][si] = out, lse
					}
				}
				assertPathsAgree(t, p, outs, lses, "wgmma vs mma.sync")
			})
		}
	}
}

// assertPathsAgree asserts that two kernel paths' outputs and LSEs of p
// (outs[0] and outs[1], for each of two split counts) agree, logging how
// they differ where they do not.
func assertPathsAgree(t *testing.T, p *check.VarlenProblem, outs [2][2][]float64, lses [2][2][]float32, what string) {
	t.Helper()
	for si := range 2 {
		if !assert.LessOrEqual(t, ref.RelL2(outs[1][si], outs[0][si]), check.Tolerance(p.Shape.DType)/2, what) {
			logDisagreement(t, p, outs[0][si], outs[1][si])
		}
		assertSameLSE(t, lses[0][si], lses[1][si], what)
	}
}

// logDisagreement logs how two varlen outputs of p that should agree
// differ: each one's error against float64 and the element where they
// differ most.
func logDisagreement(t *testing.T, p *check.VarlenProblem, a, b []float64) {
	t.Helper()
	wantOut, _ := p.Reference()
	c := p.Shape
	worst := 0
	for i := range a {
		if math.Abs(a[i]-b[i]) > math.Abs(a[worst]-b[worst]) {
			worst = i
		}
	}
	row := worst / c.HeadDim
	t.Logf("against float64: %.3g and %.3g; most apart at token %d head %d dim %d: %g and %g (float64 %g)",
		ref.RelL2(a, wantOut), ref.RelL2(b, wantOut), row/c.QHeads, row%c.QHeads, worst%c.HeadDim, a[worst], b[worst], wantOut[worst])
}

// TestVarlenEqualsDecode checks that one query token per sequence through
// varlen (q_len 1 at position kv_len−1) gives what Decode gives for the same
// cache: with the host's lengths Varlen runs the batch as that decode,
// without them as one varlen launch.
func TestVarlenEqualsDecode(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for _, c := range []check.DecodeShape{
		{Seqs: 7, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 80, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1200},
		{Seqs: 3, QHeads: 4, KVHeads: 4, HeadDim: 64, BlockSize: 4, MaxBlocksPerSeq: 200, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 700},
	} {
		t.Run(c.String(), func(t *testing.T) {
			d := decodeProblem(t, r, s, g, c)
			lens := make([]int32, c.Seqs)
			for i := range lens {
				lens[i] = int32(1 + g.IntN(c.MaxLen))
			}
			require.NoError(t, d.SetLens(s, lens))
			want, wantLSE, err := d.Run(r, s)
			require.NoError(t, err)

			cu := make([]int32, c.Seqs+1)
			pos := make([]int32, c.Seqs)
			for i := range c.Seqs {
				cu[i+1] = int32(i + 1)
				pos[i] = lens[i] - 1
			}
			a := pagedkv.VarlenArgs{
				Q: d.Args.Q, KCache: d.Args.KCache, VCache: d.Args.VCache, BlockTables: d.Args.BlockTables,
				NumSeqs: c.Seqs, NumTokens: c.Seqs, NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim,
				BlockSize: c.BlockSize, NumBlocks: d.Args.NumBlocks, MaxBlocksPerSeq: c.MaxBlocksPerSeq, MaxKVLen: d.Args.MaxKVLen,
				QTokenStride: d.Args.QTokenStride, Causal: true, HostCuSeqlensQ: cu, HostPosOffsets: pos,
				DType: c.DType, CacheDType: c.CacheDType, KScale: d.Args.KScale, VScale: d.Args.VScale,
			}
			arena := check.NewArena(r)
			t.Cleanup(func() { assert.NoError(t, arena.Free()) })
			var set check.Setter
			set.To(&a.CuSeqlensQ)(check.Upload(arena, s, cu, 4))
			set.To(&a.PosOffsets)(check.Upload(arena, s, pos, 4))
			set.To(&a.Out)(arena.Alloc(int64(c.Seqs * c.QHeads * c.HeadDim * c.DType.Size())))
			set.To(&a.LSE)(arena.Alloc(int64(c.Seqs * c.QHeads * 4)))
			require.NoError(t, set.Err)
			// With the host's lengths the batch runs as the decode; without,
			// as one varlen launch.
			plan, err := r.PlanVarlen(s, &a)
			require.NoError(t, err)
			assert.Equal(t, c.Seqs, plan.DecodePrefix, "%s", plan)
			assert.Empty(t, plan.Kernel, "%s", plan)
			for _, host := range []bool{true, false} {
				if !host {
					a.HostCuSeqlensQ, a.HostPosOffsets = nil, nil
				}
				require.NoError(t, s.Fill32(a.Out, check.NaNPattern(c.DType)))
				require.NoError(t, r.Varlen(s, &a))
				raw := make([]byte, c.Seqs*c.QHeads*c.HeadDim*c.DType.Size())
				lse := make([]float32, c.Seqs*c.QHeads)
				require.NoError(t, pagedkv.Download(s, raw, a.Out))
				require.NoError(t, pagedkv.Download(s, lse, a.LSE))
				got := ref.DecodeSlice(ref.DType(c.DType), raw)
				assert.LessOrEqual(t, ref.RelL2(got, want), check.Tolerance(c.DType)/2, "varlen vs decode, host lengths %v", host)
				assertSameLSE(t, wantLSE, lse, "varlen vs decode")
			}
		})
	}
}

// TestVarlenGraphReplay captures a varlen planned for a KV capacity and a
// token budget, then replays it with other lengths (fewer tokens, shorter
// and longer KV, all within the capture's bounds): every replay matches
// float64. The split-K graphs (small queries over long KV: one 16-token
// chunk, ragged verify steps, with and without score modifiers) split each
// row tile by the KV range it meets at replay, so their spare splits exit
// and the merge skips them; those replays match too.
func TestVarlenGraphReplay(t *testing.T) {
	const capacity = 4096
	r := open(t, config.Options{KVCapacity: ptr(capacity)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	for _, tc := range []struct {
		c    check.VarlenShape
		mods bool
	}{
		{c: check.VarlenShape{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 300, MaxKV: capacity, Causal: true}},
		{c: check.VarlenShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 8, MaxKV: capacity, Causal: true}},
		{c: check.VarlenShape{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 16, MaxKV: capacity, Causal: true}},
		{c: check.VarlenShape{Seqs: 6, QHeads: 16, KVHeads: 4, HeadDim: 96, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 5, MaxKV: capacity, Causal: true}},
		{c: check.VarlenShape{Seqs: 2, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 16, MaxKV: capacity, Causal: true}, mods: true},
	} {
		c := tc.c
		name := c.String()
		if tc.mods {
			name += "_softcap_sinks_alibi"
		}
		t.Run(name, func(t *testing.T) {
			p := varlenProblem(t, r, s, g, c)
			if tc.mods {
				require.NoError(t, p.SetMods(s, g, 0, 30, true, true))
			}
			// The capture's bounds: its drawn token count and sequence count.
			budget := p.Args.NumTokens
			p.Args.HostCuSeqlensQ, p.Args.HostPosOffsets = nil, nil
			plan, err := r.PlanVarlenGraph(&p.Args)
			require.NoError(t, err)
			t.Logf("graph plan: %s", plan.String())
			if plan.Splits > 1 {
				// The split-K scratch, NaN before every replay: a merge that
				// read a split the replay left without tiles would show.
				ws, err := p.Arena.Alloc(plan.WorkspaceBytes())
				require.NoError(t, err)
				p.Args.Workspace = ws
			}
			require.NoError(t, r.ReserveVarlen(s, &p.Args))
			graph := captureVarlen(t, r, s, &p.Args)
			t.Cleanup(func() { require.NoError(t, graph.Close()) })
			replayVarlenAt(t, s, g, p, graph, c, budget, []int{capacity, 64, 700, 1500}, func() {
				if !p.Args.Workspace.IsZero() {
					require.NoError(t, s.Fill32(p.Args.Workspace, check.NaNPattern(0)))
				}
			})
		})
	}
}

// TestVarlenGraphAfterGrowth captures a split-K varlen on the stream's
// scratch, grows that scratch with a larger eager split-K varlen of a
// ragged batch, then replays the graph at other lengths: the graph keeps the
// scratch it captured, every replay matches float64, and the larger varlen
// runs again after the graph is closed. Run it under compute-sanitizer
// memcheck.
func TestVarlenGraphAfterGrowth(t *testing.T) {
	const capacity = 4096
	r := open(t, config.Options{KVCapacity: ptr(capacity)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	shape := check.VarlenShape{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16,
		CacheDType: pagedkv.BF16, MaxQLen: 16, MaxKV: capacity, Causal: true}
	small := varlenProblem(t, r, s, g, shape)
	small.Args.HostCuSeqlensQ, small.Args.HostPosOffsets = nil, nil
	bigShape := shape
	bigShape.Seqs, bigShape.MaxQLen = 12, 12
	big := varlenProblem(t, r, s, g, bigShape)
	runBig := func(msg string) {
		t.Helper()
		plan, err := r.PlanVarlen(s, &big.Args)
		require.NoError(t, err)
		require.Greater(t, plan.Splits, 1, "the larger varlen splits: %s", plan.String())
		out, lse, err := big.Run(r, s)
		require.NoError(t, err, msg)
		require.NoError(t, big.Check(out, lse), msg)
	}
	plan, err := r.PlanVarlenGraph(&small.Args)
	require.NoError(t, err)
	require.Greater(t, plan.Splits, 1, "the graph splits: %s", plan.String())
	require.NoError(t, r.ReserveVarlen(s, &small.Args))
	graph := captureVarlen(t, r, s, &small.Args)
	runBig("growing the scratch")
	for _, maxKV := range []int{capacity, 600, 2000} {
		c := shape
		c.MaxKV, c.MaxQLen = maxKV, small.Args.NumTokens // the capture's token budget
		cu, pos := check.VarlenLens(g, c)
		require.NoError(t, small.SetLens(s, cu, pos))
		require.NoError(t, small.Poison(s))
		require.NoError(t, graph.Launch(s))
		out, lse, err := small.Fetch(s)
		require.NoError(t, err)
		require.NoError(t, small.Check(out, lse), "replay over KV up to %d after growth", maxKV)
		runBig("between replays")
	}
	require.NoError(t, graph.Close())
	runBig("after the graph released its scratch")
}

// TestVarlenFaults checks that bad device-resident lengths and block ids
// are reported through the stream's fault record and never read outside
// the buffers (compute-sanitizer runs this test).
func TestVarlenFaults(t *testing.T) {
	r := open(t, config.Options{CheckBounds: ptr(true)})
	g := rng(t)
	s := r.Stream()
	c := check.VarlenShape{Seqs: 3, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 20, MaxKV: 60, Causal: true}
	p := varlenProblem(t, r, s, g, c)
	mbps := p.Args.MaxBlocksPerSeq

	bad := append([]int32(nil), p.Tables...)
	bad[1*mbps] = int32(p.Args.NumBlocks + 1000)
	require.NoError(t, pagedkv.Upload(s, p.Args.BlockTables, bad))
	err := r.Varlen(s, &p.Args)
	var fe *pagedkv.FaultError
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Contains(t, fe.Error(), "BlockTables[1][0]")
	require.NoError(t, pagedkv.Upload(s, p.Args.BlockTables, p.Tables))

	pos := []int32{0, int32(mbps * c.BlockSize), 0}
	require.NoError(t, pagedkv.Upload(s, p.Args.PosOffsets, pos))
	err = r.Varlen(s, &p.Args)
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Contains(t, fe.Error(), "PosOffsets[1]")
	require.NoError(t, pagedkv.Upload(s, p.Args.PosOffsets, p.PosOffsets))

	// Without the host's lengths: a batch of one-token sequences would
	// run as a decode, which reads no CuSeqlensQ.
	p.Args.HostCuSeqlensQ, p.Args.HostPosOffsets = nil, nil
	cu := append([]int32(nil), p.CuSeqlensQ...)
	cu[1], cu[2] = cu[2], cu[1] // decreasing where they were distinct
	if cu[1] == cu[2] {
		cu[2] = cu[1] - 1
	}
	require.NoError(t, pagedkv.Upload(s, p.Args.CuSeqlensQ, cu))
	err = r.Varlen(s, &p.Args)
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Contains(t, fe.Error(), "CuSeqlensQ")
}

// TestVarlenPlans checks the planner's split-K choice on the device: a small
// query over long KV splits; a long prefill does not; SPLIT_K_ATTN=0 wins.
func TestVarlenPlans(t *testing.T) {
	r := open(t, config.Options{})
	off := open(t, config.Options{SplitKAttn: ptr(config.SplitOff)})
	g := rng(t)
	// Fixed lengths (random ones may make both KVs too short to split, or
	// the prefill's queries too short to fill the GPU): 16 query tokens
	// each over 8192 and 6000 KV positions, then 4 prompts of 2048.
	small, err := check.NewVarlenProblemWith(r, r.Stream(), g, check.VarlenShape{Seqs: 2, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 16, MaxKV: 8192, Causal: true},
		[]int32{0, 16, 32}, []int32{8192 - 16, 6000 - 16})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, small.Arena.Free()) })
	plan, err := r.PlanVarlen(r.Stream(), &small.Args)
	require.NoError(t, err)
	assert.Greater(t, plan.Splits, 1, "small query over long KV: %s", plan.Reason)
	plan, err = off.PlanVarlen(off.Stream(), &small.Args)
	require.NoError(t, err)
	assert.Equal(t, 1, plan.Splits)
	assert.Equal(t, dispatch.ReasonSplitKOff, plan.Reason)
	big, err := check.NewVarlenProblemWith(r, r.Stream(), g, check.VarlenShape{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 2048, MaxKV: 2048, Causal: true},
		[]int32{0, 2048, 4096, 6144, 8192}, []int32{0, 0, 0, 0})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, big.Arena.Free()) })
	plan, err = r.PlanVarlen(r.Stream(), &big.Args)
	require.NoError(t, err)
	assert.Equal(t, 1, plan.Splits, "long prefill: %s", plan.Reason)
}

// replaySequence runs p through SequenceAttention captured into a CUDA
// graph for the whole table's capacity (the varlen path plans for the
// lengths it captures: KVCapacity plays no part) and replays it once.
func replaySequence(t *testing.T, r *pagedkv.Runtime, s *pagedkv.Stream, p *check.VarlenProblem) ([]float64, []float32, error) {
	t.Helper()
	return p.RunSequenceVia(s, func(a *pagedkv.SequenceArgs) error {
		a.KVCapacity = a.MaxBlocksPerSeq * a.BlockSize
		require.NoError(t, r.ReserveSequence(s, a))
		require.NoError(t, s.BeginCapture())
		err := r.SequenceAttention(s, a)
		graph, endErr := s.EndCapture()
		require.NoError(t, err)
		require.NoError(t, endErr)
		defer func() { assert.NoError(t, graph.Close()) }()
		if err := graph.Launch(s); err != nil {
			return err
		}
		return s.Synchronize()
	})
}

// TestSequenceAttention checks the single-sequence dispatcher: several
// query tokens of one sequence run as a causal varlen whose output comes out
// head-major [heads, q_len, head_dim] and matches float64; one token per
// sequence runs the batched decode and matches Decode; a batch of several
// sequences with several tokens each is an error naming Varlen. The varlen
// path's lengths are launch parameters: a graph that captures the call
// replays it right, single-pass and split-K (a few tokens over a long KV).
func TestSequenceAttention(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for _, c := range []check.VarlenShape{
		{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 300, MaxKV: 1000, Causal: true},
		{Seqs: 1, QHeads: 6, KVHeads: 3, HeadDim: 64, BlockSize: 4, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 40, MaxKV: 2000, Causal: true},
		{Seqs: 1, QHeads: 16, KVHeads: 2, HeadDim: 256, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 6, MaxKV: 7000, Causal: true},
	} {
		t.Run(c.String(), func(t *testing.T) {
			qLen := 2 + g.IntN(c.MaxQLen-1)
			kv := qLen + g.IntN(c.MaxKV-qLen+1)
			p, err := check.NewVarlenProblemWith(r, s, g, c, []int32{0, int32(qLen)}, []int32{int32(kv - qLen)})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
			out, lse, err := p.RunSequence(r, s)
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse))

			out, lse, err = replaySequence(t, r, s, p)
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse), "graph replay")

			a := p.SequenceArgs(pagedkv.Buffer{})
			bad := a
			bad.NumSeqs, bad.HostKVLens = 2, []int32{int32(kv), int32(kv)}
			assert.ErrorContains(t, r.SequenceAttention(s, &bad), "Runtime.Varlen")
			bad = a
			bad.HostKVLens = []int32{int32(qLen - 1)}
			assert.ErrorContains(t, r.SequenceAttention(s, &bad), "HostKVLens[0]")
		})
	}
	t.Run("decode", func(t *testing.T) {
		c := check.DecodeShape{Seqs: 5, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 40, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 600}
		d := decodeProblem(t, r, s, g, c)
		lens := check.RandomLens(g, c.Seqs, c.MaxLen, c.BlockSize)
		for i := range lens {
			lens[i] = max(lens[i], 1)
		}
		require.NoError(t, d.SetLens(s, lens))
		want, wantLSE, err := d.Run(r, s)
		require.NoError(t, err)
		a := pagedkv.SequenceArgs{
			Q: d.Args.Q, KCache: d.Args.KCache, VCache: d.Args.VCache, BlockTables: d.Args.BlockTables,
			KVLens: d.Args.KVLens, Out: d.Args.Out, LSE: d.Args.LSE, NumSeqs: c.Seqs, QLen: 1, HostKVLens: lens,
			NumQHeads: c.QHeads, NumKVHeads: c.KVHeads, HeadDim: c.HeadDim, BlockSize: c.BlockSize,
			NumBlocks: d.Args.NumBlocks, MaxBlocksPerSeq: c.MaxBlocksPerSeq, QTokenStride: d.Args.QTokenStride,
			DType: c.DType, CacheDType: c.CacheDType,
		}
		require.NoError(t, d.Poison(s))
		require.NoError(t, r.SequenceAttention(s, &a))
		got, lse, err := d.Fetch(s)
		require.NoError(t, err)
		// The dispatcher hands Decode the host lengths, so its plan may
		// balance the ragged batch where the plain call did not.
		assert.LessOrEqual(t, ref.RelL2(got, want), check.Tolerance(c.DType)/2, "SequenceAttention with QLen 1 is Decode")
		assertSameLSE(t, wantLSE, lse, "SequenceAttention vs Decode")
	})
}

// TestVarlenWorkspace runs a split-K varlen in the engine's own workspace
// (sized by the plan, no pool) eagerly and captured into a graph, and checks
// both against float64; a workspace one byte short is an error, not a
// launch.
func TestVarlenWorkspace(t *testing.T) {
	const capacity = 4096
	r := open(t, config.Options{KVCapacity: ptr(capacity)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	c := check.VarlenShape{Seqs: 3, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 8, MaxKV: capacity, Causal: true}
	p := varlenProblem(t, r, s, g, c)
	graphPlan, err := r.PlanVarlenGraph(&p.Args)
	require.NoError(t, err)
	eagerPlan, err := r.PlanVarlen(s, &p.Args)
	require.NoError(t, err)
	require.Greater(t, graphPlan.Splits, 1, "a few query tokens over a long KV split: %s", graphPlan.Reason)
	bytes := max(graphPlan.WorkspaceBytes(), eagerPlan.WorkspaceBytes())
	ws, err := p.Arena.Alloc(bytes)
	require.NoError(t, err)
	p.Args.Workspace = ws

	out, lse, err := p.Run(r, s)
	require.NoError(t, err)
	require.NoError(t, p.Check(out, lse), "eager, %d splits in the workspace", eagerPlan.Splits)

	graph := captureVarlen(t, r, s, &p.Args, "in the workspace")
	t.Cleanup(func() { require.NoError(t, graph.Close()) })
	// Other lengths within the capture's token budget.
	replay := c
	replay.MaxQLen = min(c.MaxQLen, p.Args.NumTokens/c.Seqs)
	cu, pos := check.VarlenLens(g, replay)
	require.NoError(t, p.SetLens(s, cu, pos))
	require.NoError(t, p.Poison(s))
	require.NoError(t, graph.Launch(s))
	out, lse, err = p.Fetch(s)
	require.NoError(t, err)
	require.NoError(t, p.Check(out, lse), "graph replay, %d splits in the workspace", graphPlan.Splits)

	// The graph's plan eagerly, in a workspace one byte short (the eager
	// plan of short drawn lengths may be single-pass and need none).
	p.Args.Workspace.Bytes = graphPlan.WorkspaceBytes() - 1
	err = r.VarlenWithPlan(s, &p.Args, graphPlan)
	assert.ErrorIs(t, err, pagedkv.ErrInvalidArgument)
	assert.ErrorContains(t, err, "VarlenArgs.Workspace has")
}

// TestVarlenMixedFaults checks that a mixed batch Varlen runs as a decode
// and a varlen (Plan.DecodePrefix) records bad device values as one launch
// would: naming the batch's sequence and array, not the part's view.
func TestVarlenMixedFaults(t *testing.T) {
	r := open(t, config.Options{CheckBounds: ptr(true)})
	g := rng(t)
	s := r.Stream()
	const decodes, chunks, chunk = 40, 3, 200
	c := check.VarlenShape{Seqs: decodes + chunks, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: chunk, MaxKV: 1500, Causal: true}
	cu := make([]int32, c.Seqs+1)
	pos := make([]int32, c.Seqs)
	for i := range c.Seqs {
		q := 1
		if i >= decodes {
			q = chunk
		}
		cu[i+1] = cu[i] + int32(q)
		pos[i] = int32(g.IntN(c.MaxKV - q + 1))
	}
	p, err := check.NewVarlenProblemWith(r, s, g, c, cu, pos)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
	plan, err := r.PlanVarlen(s, &p.Args)
	require.NoError(t, err)
	require.Equal(t, decodes, plan.DecodePrefix, "the batch must split for this test: %s", plan)
	mbps := p.Args.MaxBlocksPerSeq
	var fe *pagedkv.FaultError

	// A block id outside the pool in the second chunk's table (sequence
	// decodes+1 of the batch, 1 of the varlen part).
	bad := append([]int32(nil), p.Tables...)
	bad[(decodes+1)*mbps] = int32(p.Args.NumBlocks + 1000)
	require.NoError(t, pagedkv.Upload(s, p.Args.BlockTables, bad))
	err = r.Varlen(s, &p.Args)
	require.True(t, errors.As(err, &fe), "want a FaultError, got %v", err)
	assert.Contains(t, fe.Error(), fmt.Sprintf("BlockTables[%d][0]", decodes+1))
	require.NoError(t, pagedkv.Upload(s, p.Args.BlockTables, p.Tables))

	// A negative offset on the device for a decode row, and one past the
	// table for a chunk: each names PosOffsets[s] of the batch.
	for _, at := range []struct {
		seq int
		val int32
	}{{3, -1}, {decodes + 2, int32(mbps * c.BlockSize)}} {
		dev := append([]int32(nil), p.PosOffsets...)
		dev[at.seq] = at.val
		require.NoError(t, pagedkv.Upload(s, p.Args.PosOffsets, dev))
		err = r.Varlen(s, &p.Args)
		require.True(t, errors.As(err, &fe), "want a FaultError for PosOffsets[%d]=%d, got %v", at.seq, at.val, err)
		assert.Contains(t, fe.Error(), fmt.Sprintf("PosOffsets[%d]=%d", at.seq, at.val))
		require.NoError(t, pagedkv.Upload(s, p.Args.PosOffsets, p.PosOffsets))
	}
}

// TestVarlenMixedBatch runs mixed batches whose leading one-token
// sequences make the batch take the 64-row kernel while the chunks after
// them alone take the 128-row one: Varlen runs them as a decode of the
// prefix and a varlen of the rest (Plan.DecodePrefix). Against float64,
// and against the same batch as one launch (PlanVarlenWith, which never
// splits), with and without LSE, fp8 caches, both masks, a decode row after
// the chunks (not part of the prefix), and the forms that must not split
// (no host lengths, head-major Out).
func TestVarlenMixedBatch(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for _, c := range []struct {
		shape         check.VarlenShape
		decodes, tail int // leading one-token sequences; one-token sequences after the chunks
		chunk         int // query tokens per chunk
		chunks        int
		noLSE         bool
		longChunks    bool // the chunks' KV reaches MaxKV (else random)
	}{
		{shape: check.VarlenShape{QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxKV: 1500, Causal: true}, decodes: 40, chunk: 200, chunks: 3},
		{shape: check.VarlenShape{QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxKV: 700, Causal: true}, decodes: 70, chunk: 90, chunks: 2, tail: 3},
		{shape: check.VarlenShape{QHeads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 64, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxKV: 2100, Causal: false}, decodes: 25, chunk: 150, chunks: 2, noLSE: true},
		{shape: check.VarlenShape{QHeads: 12, KVHeads: 3, HeadDim: 64, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxKV: 5000, Causal: true}, decodes: 33, chunk: 64, chunks: 4},
		// Verify steps of 16 tokens over long KV: the rest runs split-K, so
		// its merge reads the batch's bounds less the rest's base too.
		{shape: check.VarlenShape{QHeads: 32, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxKV: 6000, Causal: true}, decodes: 30, chunk: 16, chunks: 2, longChunks: true},
	} {
		shape := c.shape
		shape.Seqs = c.decodes + c.chunks + c.tail
		shape.MaxQLen = c.chunk
		t.Run(shape.String(), func(t *testing.T) {
			cu := make([]int32, shape.Seqs+1)
			pos := make([]int32, shape.Seqs)
			for i := range shape.Seqs {
				q := 1
				if i >= c.decodes && i < c.decodes+c.chunks {
					q = c.chunk
				}
				cu[i+1] = cu[i] + int32(q)
				pos[i] = int32(g.IntN(shape.MaxKV - q + 1))
				if c.longChunks && q > 1 {
					pos[i] = int32(shape.MaxKV - q)
				}
			}
			p, err := check.NewVarlenProblemWith(r, s, g, shape, cu, pos)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
			if c.noLSE {
				p.Args.LSE = pagedkv.Buffer{}
			}
			plan, err := r.PlanVarlen(s, &p.Args)
			require.NoError(t, err)
			require.Equal(t, c.decodes, plan.DecodePrefix, "the leading one-token sequences run as a decode: %s", plan)
			t.Logf("plan: %s", plan)
			if c.longChunks {
				require.Greater(t, plan.Splits, 1, "the verify steps run split-K: %s", plan)
			}
			want, wantLSE := p.Reference()
			out, lse, err := p.Run(r, s)
			require.NoError(t, err)
			require.NoError(t, p.CheckReference(out, lse, want, wantLSE), "decode + varlen")

			one, err := r.PlanVarlenWith(&p.Args, dispatch.DefaultKnobs())
			require.NoError(t, err)
			require.Zero(t, one.DecodePrefix)
			o1, l1, err := p.RunWithPlan(r, s, one)
			require.NoError(t, err)
			require.NoError(t, p.CheckReference(o1, l1, want, wantLSE), "one launch")
			assert.LessOrEqual(t, ref.RelL2(out, o1), check.Tolerance(shape.DType)/2, "decode + varlen vs one launch")
			if !c.noLSE {
				assertSameLSE(t, l1, lse, "decode + varlen vs one launch")
			}

			err = r.VarlenWithPlan(s, &p.Args, plan)
			assert.ErrorIs(t, err, pagedkv.ErrInvalidArgument)
			assert.ErrorContains(t, err, "Plan.DecodePrefix")

			// Without the host's lengths, or with head-major Out, one launch.
			a := p.Args
			a.HostCuSeqlensQ, a.HostPosOffsets = nil, nil
			plan, err = r.PlanVarlen(s, &a)
			require.NoError(t, err)
			assert.Zero(t, plan.DecodePrefix, "no host lengths")
			a = p.Args
			a.OutTokenStride, a.OutHeadStride = shape.HeadDim, p.Args.NumTokens*shape.HeadDim
			plan, err = r.PlanVarlen(s, &a)
			require.NoError(t, err)
			assert.Zero(t, plan.DecodePrefix, "head-major Out")
		})
	}
}

// TestVarlenClusters runs split-K varlens whose splits of each row tile form
// a thread-block cluster and merge on chip (the _cluster kernels, sm_90)
// against float64 and against the same split count merged in global memory
// (VARLEN_CLUSTERS off): forced counts 2..8 (clusters where the device
// holds them all at once), the planner's own, ragged batches whose short
// sequences leave splits of a cluster without tiles, one sequence's chunk
// (SequenceAttention, head-major Out), without LSE, and a graph replayed
// at other lengths.
func TestVarlenClusters(t *testing.T) {
	// The cluster twins are mma.sync kernels.
	off := ptr(config.SplitOff)
	r := open(t, config.Options{VarlenWGMMA: off})
	if !r.Facts().Clusters {
		t.Skip("the GPU has no thread-block clusters (compute capability 9.0 and newer)")
	}
	global := open(t, config.Options{VarlenClusters: ptr(false), VarlenWGMMA: off})
	g := rng(t)
	s := r.Stream()
	// Ragged lengths, long enough to split: short sequences leave splits
	// of their clusters without tiles.
	shapes := []struct {
		shape   check.VarlenShape
		cu, pos []int32
	}{
		{check.VarlenShape{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 16, MaxKV: 2048, Causal: true},
			[]int32{0, 16}, []int32{2032}},
		{check.VarlenShape{Seqs: 8, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 5, MaxKV: 3584, Causal: true},
			[]int32{0, 5, 10, 15, 20, 25, 30, 35, 40}, []int32{3579, 100, 2000, 0, 3000, 1500, 700, 3579}},
		{check.VarlenShape{Seqs: 3, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 40, MaxKV: 1900, Causal: true},
			[]int32{0, 40, 41, 70}, []int32{1860, 1899, 500}},
		{check.VarlenShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 30, MaxKV: 1300, Causal: false},
			[]int32{0, 30, 47}, []int32{1270, 900}},
		{check.VarlenShape{Seqs: 5, QHeads: 12, KVHeads: 4, HeadDim: 128, BlockSize: 64, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 100, MaxKV: 2500, Causal: true},
			[]int32{0, 100, 101, 150, 230, 231}, []int32{2400, 2499, 10, 1000, 2000}},
	}
	for _, sc := range shapes {
		c := sc.shape
		t.Run(c.String(), func(t *testing.T) {
			p, err := check.NewVarlenProblemWith(r, s, g, c, sc.cu, sc.pos)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
			want, wantLSE := p.Reference()
			clusters := 0
			for _, splits := range []int{0, 2, 3, 5, 8} {
				k := dispatch.DefaultKnobs()
				k.ForcedSplits = splits
				k.VarlenKeys = 32 // the 128-row kernels of head dim 128 have twins; their _k64 ones do not
				plan, err := r.PlanVarlenWith(&p.Args, k)
				require.NoError(t, err)
				if plan.Cluster == 0 {
					t.Logf("no clusters: %s", plan)
					continue
				}
				clusters++
				out, lse, err := p.RunWithPlan(r, s, plan)
				require.NoError(t, err)
				require.NoError(t, p.CheckReference(out, lse, want, wantLSE), "%s", plan)
				k.Clusters = false
				gplan, err := global.PlanVarlenWith(&p.Args, k)
				require.NoError(t, err)
				require.Zero(t, gplan.Cluster)
				require.Equal(t, plan.Splits, gplan.Splits)
				o2, l2, err := p.RunWithPlan(global, global.Stream(), gplan)
				require.NoError(t, err)
				assert.LessOrEqual(t, ref.RelL2(o2, out), check.Tolerance(c.DType)/16, "on chip vs global merge, %d splits", plan.Splits)
				assertSameLSE(t, l2, lse, "on chip vs global merge")
				withLSE := p.Args.LSE
				p.Args.LSE = pagedkv.Buffer{}
				o0, _, err := p.RunWithPlan(r, s, plan)
				p.Args.LSE = withLSE
				require.NoError(t, err)
				assert.Equal(t, out, o0, "without LSE")
			}
			require.Positive(t, clusters, "some split counts run as clusters")
		})
	}
	t.Run("SequenceAttention", func(t *testing.T) {
		c := shapes[0].shape
		for _, kv := range []int{512} { // one chunk over 512 positions: ×4
			c.MaxKV = kv
			p, err := check.NewVarlenProblemWith(r, s, g, c, []int32{0, 16}, []int32{int32(kv - 16)})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
			plan, err := r.PlanVarlen(s, &p.Args)
			require.NoError(t, err)
			require.Positive(t, plan.Cluster, "one chunk over %d splits in a cluster: %s", kv, plan)
			out, lse, err := p.RunSequence(r, s)
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse), "kv %d", kv)
		}
	})
	t.Run("graph", func(t *testing.T) {
		const capacity = 512 // ×4: clusters
		rg := open(t, config.Options{KVCapacity: ptr(capacity)})
		sg, err := rg.NewStream()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, sg.Close()) })
		c := check.VarlenShape{Seqs: 4, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16,
			MaxQLen: 6, MaxKV: capacity, Causal: true}
		p := varlenProblem(t, rg, sg, g, c)
		budget := p.Args.NumTokens // the capture's token bound
		p.Args.HostCuSeqlensQ, p.Args.HostPosOffsets = nil, nil
		plan, err := rg.PlanVarlenGraph(&p.Args)
		require.NoError(t, err)
		require.Positive(t, plan.Cluster, "%s", plan)
		require.NoError(t, rg.ReserveVarlen(sg, &p.Args))
		graph := captureVarlen(t, rg, sg, &p.Args)
		t.Cleanup(func() { require.NoError(t, graph.Close()) })
		replayVarlenAt(t, sg, g, p, graph, c, budget, []int{capacity, 64, 300, 450}, nil)
	})
}
