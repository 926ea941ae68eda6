package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// moreDims are the head dims between the powers of two: their rows are
// 10, 12, 14 and 24 16-byte chunks, which the kernels' swizzle, loaders,
// ldmatrix offsets and merges handle apart from the power-of-two ones.
var moreDims = []int{80, 96, 112, 192}

// TestHeadDimsDecode runs Decode at every head dim between the powers of
// two against float64: narrow (groups ≤ 8) and wide kernels, every layout
// (120: the flash layout, in tiles of 128 whose padding must add nothing),
// block sizes 1 to 256, single-pass, automatic and forced split-K (7 and
// 64 splits, merged in global memory: these dims have no cluster kernels),
// and with every score modifier at once.
func TestHeadDimsDecode(t *testing.T) {
	runtimes := map[string]*pagedkv.Runtime{
		"auto":    open(t, config.Options{}),
		"single":  open(t, config.Options{PagedFlash: ptr(false)}),
		"split7":  open(t, config.Options{PagedFlashSplits: ptr(7)}),
		"split64": open(t, config.Options{PagedFlashSplits: ptr(64)}),
	}
	auto := runtimes["auto"]
	g := rng(t)
	layouts := []pagedkv.CacheLayout{pagedkv.LayoutFlash, pagedkv.LayoutXSplit, pagedkv.LayoutShuffle}
	for i, d := range append(moreDims, dispatch.PaddedHeadDim) {
		dt := []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[i%2]
		laid := func(l pagedkv.CacheLayout) pagedkv.CacheLayout {
			if d == dispatch.PaddedHeadDim {
				return pagedkv.LayoutFlash
			}
			return l
		}
		shapes := []check.DecodeShape{
			{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: d, BlockSize: 16, MaxBlocksPerSeq: 80, DType: dt, CacheDType: dt, MaxLen: 1200},
			{Seqs: 3, QHeads: 24, KVHeads: 2, HeadDim: d, BlockSize: 1, MaxBlocksPerSeq: 700, DType: dt, CacheDType: dt, MaxLen: 700},
			{Seqs: 5, QHeads: 5, KVHeads: 5, HeadDim: d, BlockSize: 256, MaxBlocksPerSeq: 9, DType: dt, CacheDType: dt, MaxLen: 2100},
			{Seqs: 2, QHeads: 48, KVHeads: 3, HeadDim: d, BlockSize: 8, MaxBlocksPerSeq: 150, DType: dt, CacheDType: dt, MaxLen: 1111, Layout: laid(layouts[1+i%2])},
			{Seqs: 6, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 32, MaxBlocksPerSeq: 40, DType: dt, CacheDType: dt, MaxLen: 1250, Layout: laid(layouts[2-i%2])},
		}
		if check.FP8HeadDim(d) {
			// fp8 caches, f16 and bf16 queries: narrow and wide kernels,
			// each in the flash layout and in x-split or shuffle.
			for j, q := range []pagedkv.DType{pagedkv.F16, pagedkv.BF16} {
				shapes = append(shapes,
					check.DecodeShape{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: d, BlockSize: 16, MaxBlocksPerSeq: 80, DType: q, CacheDType: pagedkv.E4M3, MaxLen: 1200},
					check.DecodeShape{Seqs: 3, QHeads: 36, KVHeads: 3, HeadDim: d, BlockSize: 32, MaxBlocksPerSeq: 40, DType: q, CacheDType: pagedkv.E4M3, MaxLen: 1111},
					check.DecodeShape{Seqs: 3, QHeads: 36, KVHeads: 3, HeadDim: d, BlockSize: 16, MaxBlocksPerSeq: 80, DType: q, CacheDType: pagedkv.E4M3, MaxLen: 1111, Layout: layouts[1+j]},
					check.DecodeShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 64, MaxBlocksPerSeq: 40, DType: q, CacheDType: pagedkv.E4M3, MaxLen: 2500, Layout: layouts[2-j]},
				)
			}
		}
		for _, c := range shapes {
			t.Run(c.String(), func(t *testing.T) {
				p := decodeProblem(t, auto, auto.Stream(), g, c)
				outs := map[string][]float64{}
				for name, r := range runtimes {
					plan, err := r.PlanDecode(r.Stream(), &p.Args)
					require.NoError(t, err, name)
					assert.Zero(t, plan.Cluster, name)
					out, lse, err := p.Run(r, r.Stream())
					require.NoError(t, err, name)
					require.NoError(t, p.Check(out, lse), "%s: %s, %d splits", name, plan.Kernel, plan.Splits)
					outs[name] = out
				}
				for _, name := range []string{"split7", "split64"} {
					assert.LessOrEqual(t, ref.RelL2(outs[name], outs["single"]), check.Tolerance(c.DType)/2, "%s vs single-pass", name)
				}
				// Every modifier at once, window inside a page.
				require.NoError(t, p.SetMods(auto.Stream(), g, 3*c.BlockSize+5, 7, true, true))
				for name, r := range runtimes {
					plan, err := r.PlanDecode(r.Stream(), &p.Args)
					require.NoError(t, err, name)
					assert.Contains(t, plan.Kernel, "_mods", name)
					out, lse, err := p.Run(r, r.Stream())
					require.NoError(t, err, name)
					require.NoError(t, p.Check(out, lse), "mods, %s: %s, %d splits", name, plan.Kernel, plan.Splits)
				}
			})
		}
	}
}

// TestHeadDimsVarlen runs Varlen at every head dim between the powers of
// two against float64 (120 in tiles of 128 whose padding must add
// nothing): long query rows (the 128-row kernels, 64-row at 192), short
// ones (the _r64 kernels), a batch that starts with one-token
// rows (run as a decode and a varlen launch), causal and not, single-pass,
// automatic and forced split-K (7 and 64, merged by the dims' merge
// kernels), and every score modifier at once.
func TestHeadDimsVarlen(t *testing.T) {
	auto := open(t, config.Options{})
	single := open(t, config.Options{SplitKAttn: ptr(config.SplitOff)})
	g := rng(t)
	for i, d := range append(moreDims, dispatch.PaddedHeadDim) {
		dt := []pagedkv.DType{pagedkv.BF16, pagedkv.F16}[i%2]
		shapes := []check.VarlenShape{
			{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: d, BlockSize: 16, DType: dt, CacheDType: dt, MaxQLen: 230, MaxKV: 900, Causal: true},
			{Seqs: 4, QHeads: 16, KVHeads: 1, HeadDim: d, BlockSize: 1, DType: dt, CacheDType: dt, MaxQLen: 9, MaxKV: 700, Causal: true},
			{Seqs: 2, QHeads: 6, KVHeads: 3, HeadDim: d, BlockSize: 256, DType: dt, CacheDType: dt, MaxQLen: 150, MaxKV: 1300, Causal: false},
			{Seqs: 5, QHeads: 12, KVHeads: 4, HeadDim: d, BlockSize: 32, DType: dt, CacheDType: dt, MaxQLen: 1, MaxKV: 1000, Causal: true},
		}
		if check.FP8HeadDim(d) {
			// fp8 caches, f16 and bf16 queries: long and short query rows,
			// one-token rows.
			for _, q := range []pagedkv.DType{pagedkv.F16, pagedkv.BF16} {
				shapes = append(shapes,
					check.VarlenShape{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: d, BlockSize: 16, DType: q, CacheDType: pagedkv.E4M3, MaxQLen: 230, MaxKV: 900, Causal: true},
					check.VarlenShape{Seqs: 4, QHeads: 16, KVHeads: 2, HeadDim: d, BlockSize: 32, DType: q, CacheDType: pagedkv.E4M3, MaxQLen: 9, MaxKV: 700, Causal: true},
				)
			}
		}
		for _, c := range shapes {
			t.Run(c.String(), func(t *testing.T) {
				p := varlenProblem(t, auto, auto.Stream(), g, c)
				run := func(what string) {
					wantOut, wantLSE := p.Reference()
					plan, err := auto.PlanVarlen(auto.Stream(), &p.Args)
					require.NoError(t, err)
					out, lse, err := p.Run(auto, auto.Stream())
					require.NoError(t, err)
					require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "%s auto: %s, %d splits", what, plan.Kernel, plan.Splits)
					o1, l1, err := p.Run(single, single.Stream())
					require.NoError(t, err)
					require.NoError(t, p.CheckReference(o1, l1, wantOut, wantLSE), "%s single-pass", what)
					for _, n := range []int{7, 64} {
						plan, err := auto.PlanVarlenWith(&p.Args, forcedVarlen(n))
						require.NoError(t, err)
						o, l, err := p.RunWithPlan(auto, auto.Stream(), plan)
						require.NoError(t, err)
						require.NoError(t, p.CheckReference(o, l, wantOut, wantLSE), "%s %s, %d splits", what, plan.Kernel, plan.Splits)
					}
				}
				run("plain")
				if c.Causal {
					require.NoError(t, p.SetMods(auto.Stream(), g, 2*c.BlockSize+3, 9, true, true))
					run("mods")
				}
			})
		}
	}
}

// TestHeadDimsRefused: what the dims between the powers of two have no
// kernels for is refused before any launch, naming the field.
func TestHeadDimsRefused(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	for _, d := range append(moreDims, dispatch.PaddedHeadDim) {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			if !check.FP8HeadDim(d) {
				dc := check.DecodeShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 16, MaxBlocksPerSeq: 8, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 100}
				p := decodeProblem(t, r, r.Stream(), g, dc)
				_, _, err := p.Run(r, r.Stream())
				require.ErrorIs(t, err, pagedkv.ErrInvalidArgument)
				assert.ErrorContains(t, err, fmt.Sprintf("DecodeArgs.HeadDim=%d is not supported with CacheDType=e4m3", d))
			}
			vc := check.VarlenShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 20, MaxKV: 100, Causal: true, Layout: pagedkv.LayoutShuffle}
			v := varlenProblem(t, r, r.Stream(), g, vc)
			_, _, err := v.Run(r, r.Stream())
			require.ErrorIs(t, err, pagedkv.ErrInvalidArgument)
			assert.ErrorContains(t, err, fmt.Sprintf("VarlenArgs.HeadDim=%d is not supported with Layout=shuffle", d))
			_, err = dispatch.ClusterDecodeKernelName(pagedkv.F16, pagedkv.F16, d, 4)
			assert.ErrorIs(t, err, dispatch.ErrInvalidShape)
		})
	}
}

// TestHeadDim120Refused: head dim 120 has kernels over 16-bit flash-layout
// caches only; Decode over the x-split layout and fp8 caches are refused
// before any launch, naming the field (TestHeadDimsRefused covers Varlen).
func TestHeadDim120Refused(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	d := dispatch.PaddedHeadDim
	for _, c := range []struct {
		shape check.DecodeShape
		want  string
	}{
		{check.DecodeShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 16, MaxBlocksPerSeq: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 100, Layout: pagedkv.LayoutXSplit},
			"DecodeArgs.HeadDim=120 is not supported with Layout=x-split"},
		{check.DecodeShape{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: d, BlockSize: 16, MaxBlocksPerSeq: 8, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 100},
			"DecodeArgs.HeadDim=120 is not supported with CacheDType=e4m3"},
	} {
		p := decodeProblem(t, r, r.Stream(), g, c.shape)
		_, _, err := p.Run(r, r.Stream())
		require.ErrorIs(t, err, pagedkv.ErrInvalidArgument)
		assert.ErrorContains(t, err, c.want)
	}
}

// TestHeadDimsSequence runs SequenceAttention (one sequence's new tokens:
// Varlen, or Decode for one token) at every head dim between the powers of
// two, eager and replayed from a CUDA graph.
func TestHeadDimsSequence(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for i, d := range append(moreDims, dispatch.PaddedHeadDim) {
		dt := []pagedkv.DType{pagedkv.F16, pagedkv.BF16}[i%2]
		c := check.VarlenShape{Seqs: 1, QHeads: 16, KVHeads: 4, HeadDim: d, BlockSize: 16, DType: dt, CacheDType: dt, MaxQLen: 200, MaxKV: 3000, Causal: true}
		for _, qLen := range []int{1, 1 + g.IntN(c.MaxQLen)} {
			t.Run(fmt.Sprintf("%s q_len=%d", c.String(), qLen), func(t *testing.T) {
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
			})
		}
	}
}
