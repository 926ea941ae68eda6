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

// modsCase is one combination of score modifiers.
type modsCase struct {
	window       int
	softCap      float32
	sinks, alibi bool
}

func (m modsCase) String() string {
	return fmt.Sprintf("window=%d cap=%g sinks=%v alibi=%v", m.window, m.softCap, m.sinks, m.alibi)
}

// TestDecodeModsMatchReference runs the score modifiers (sliding window,
// soft-cap, sinks, ALiBi) alone and together against float64, over the
// wide and narrow kernels, every head dim, layout and cache dtype (fp8
// too), block sizes from 1 to
// 256, single-pass, automatic and forced split-K (7 and up to 64 splits, the
// first of which adds the sinks), and a balanced plan. Windows put their
// first key inside a page, on a page edge, inside the first tile of a page
// of 32, and before the sequence's start.
func TestDecodeModsMatchReference(t *testing.T) {
	runtimes := map[string]*pagedkv.Runtime{
		"auto":     open(t, config.Options{}),
		"single":   open(t, config.Options{PagedFlash: ptr(false)}),
		"split7":   open(t, config.Options{PagedFlashSplits: ptr(7)}),
		"split64":  open(t, config.Options{PagedFlashSplits: ptr(64)}),
		"balanced": open(t, config.Options{DecodeBalance: ptr(config.SplitOn)}),
	}
	auto := runtimes["auto"]
	g := rng(t)
	shapes := []check.DecodeShape{
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1000},
		{Seqs: 3, QHeads: 16, KVHeads: 1, HeadDim: 64, BlockSize: 1, MaxBlocksPerSeq: 300, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 300},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 256, MaxBlocksPerSeq: 9, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 2100, Layout: pagedkv.LayoutShuffle},
		{Seqs: 3, QHeads: 48, KVHeads: 4, HeadDim: 64, BlockSize: 8, MaxBlocksPerSeq: 100, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 797, Layout: pagedkv.LayoutXSplit},
		{Seqs: 5, QHeads: 12, KVHeads: 2, HeadDim: 128, BlockSize: 32, MaxBlocksPerSeq: 40, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 1200, Layout: pagedkv.LayoutShuffle},
		{Seqs: 6, QHeads: 4, KVHeads: 4, HeadDim: 128, BlockSize: 32, MaxBlocksPerSeq: 40, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 1200},
		// fp8 caches: narrow flash, wide x-split, narrow shuffle.
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 64, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 1000},
		{Seqs: 3, QHeads: 48, KVHeads: 4, HeadDim: 64, BlockSize: 16, MaxBlocksPerSeq: 60, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 797, Layout: pagedkv.LayoutXSplit},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 32, MaxBlocksPerSeq: 70, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxLen: 2100, Layout: pagedkv.LayoutShuffle},
	}
	mods := []modsCase{
		{window: 100},
		{softCap: 5},
		{sinks: true},
		{alibi: true},
		{window: 37, softCap: 2, sinks: true, alibi: true},
	}
	for _, c := range shapes {
		// Window edges for this shape: inside a page, a whole number of
		// pages, 16 + 3 (the first key inside a tile), past the longest
		// sequence (every key).
		windows := []int{c.BlockSize*3 + 5, c.BlockSize * 4, 19, c.MaxLen + 50}
		cases := append([]modsCase{}, mods...)
		for _, w := range windows {
			cases = append(cases, modsCase{window: w, sinks: g.IntN(2) == 0})
		}
		for _, m := range cases {
			t.Run(c.String()+" "+m.String(), func(t *testing.T) {
				p := decodeProblem(t, auto, auto.Stream(), g, c)
				require.NoError(t, p.SetMods(auto.Stream(), g, m.window, m.softCap, m.sinks, m.alibi))
				for name, r := range runtimes {
					plan, err := r.PlanDecode(r.Stream(), &p.Args)
					require.NoError(t, err, name)
					assert.Contains(t, plan.Kernel, "_mods", name)
					assert.Zero(t, plan.Cluster, name)
					out, lse, err := p.Run(r, r.Stream())
					require.NoError(t, err, name)
					require.NoError(t, p.Check(out, lse), "%s: %s, %d splits", name, plan.Kernel, plan.Splits)
				}
			})
		}
	}
}

// TestDecodeModsWindowReads: with a window, the plan splits the window, not
// the sequence: a batch of long sequences with a short window plans as a
// batch of window-long ones, and pages before the window are never read
// (their table entries point outside the pool: a read would be a fault).
func TestDecodeModsWindowReads(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	c := check.DecodeShape{Seqs: 8, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: 512, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 8192}
	p := decodeProblem(t, r, r.Stream(), g, c)
	const window = 1000
	require.NoError(t, p.SetMods(r.Stream(), g, window, 0, true, false))
	lens := make([]int32, c.Seqs)
	for i := range lens {
		lens[i] = int32(window + 1 + g.IntN(c.MaxLen-window))
	}
	lens[0] = int32(c.MaxLen)
	require.NoError(t, p.SetLens(r.Stream(), lens))
	windowed, err := r.PlanDecode(r.Stream(), &p.Args)
	require.NoError(t, err)
	short := p.Args
	short.MaxKVLen = window + c.BlockSize
	asShort, err := r.PlanDecode(r.Stream(), &short)
	require.NoError(t, err)
	assert.Equal(t, asShort, windowed, "the window's plan is that of a window-long batch")
	// Pages wholly before each window point past the pool.
	tables := append([]int32(nil), p.Tables...)
	for s, n := range lens {
		lo := int(n) - window
		for page := range lo / c.BlockSize {
			tables[s*c.MaxBlocksPerSeq+page] = int32(p.Shape.NumBlocks + 1000 + page)
		}
	}
	require.NoError(t, pagedkv.Upload(r.Stream(), p.Args.BlockTables, tables))
	out, lse, err := p.Run(r, r.Stream())
	require.NoError(t, err, "a read of a page before the window would record a fault")
	require.NoError(t, p.Check(out, lse))
}

// TestDecodeModsGraphReplay captures a windowed, soft-capped decode with
// sinks and ALiBi once for a KV capacity and replays it at other lengths.
func TestDecodeModsGraphReplay(t *testing.T) {
	const capacity = 4096
	r := open(t, config.Options{KVCapacity: ptr(capacity)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	for _, c := range []check.DecodeShape{
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: capacity / 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 100},
		{Seqs: 40, QHeads: 16, KVHeads: 1, HeadDim: 64, BlockSize: 32, MaxBlocksPerSeq: capacity / 32, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxLen: 100},
		{Seqs: 5, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, MaxBlocksPerSeq: capacity / 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxLen: 100},
	} {
		t.Run(c.String(), func(t *testing.T) {
			p := decodeProblem(t, r, s, g, c)
			require.NoError(t, p.SetMods(s, g, 700, 30, true, true))
			require.NoError(t, r.ReserveDecode(s, &p.Args))
			graph := captureDecode(t, r, s, &p.Args)
			t.Cleanup(func() { require.NoError(t, graph.Close()) })
			for _, maxLen := range []int{capacity, 1, 699, 701, capacity - 1} {
				require.NoError(t, p.SetLens(s, check.RandomLens(g, c.Seqs, maxLen, c.BlockSize)))
				require.NoError(t, p.Poison(s))
				require.NoError(t, graph.Launch(s))
				out, lse, err := p.Fetch(s)
				require.NoError(t, err)
				require.NoError(t, p.Check(out, lse), "replay with lengths up to %d", maxLen)
				eager, _, err := p.Run(r, s)
				require.NoError(t, err)
				assert.LessOrEqual(t, ref.RelL2(eager, out), check.Tolerance(c.DType)/2, "graph replay vs eager")
			}
		})
	}
}

// TestVarlenModsMatchReference runs the score modifiers alone and together
// against float64 through Varlen: the 128-row, 64-row (_r64) and head-dim
// 256 kernels over 16-bit and fp8 caches, block sizes 1 to 256, mixed
// batches with one-token rows,
// single-pass, automatic and forced split-K (the first split adds the
// sinks), and both tile widths asked for (the 64-key knob's _mods twin is
// the 32-key kernel).
// Windows put their first key inside a page, on a page edge, inside the
// first K/V tile and before the sequence's start.
func TestVarlenModsMatchReference(t *testing.T) {
	auto := open(t, config.Options{})
	single := open(t, config.Options{SplitKAttn: ptr(config.SplitOff)})
	g := rng(t)
	shapes := []check.VarlenShape{
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 200, MaxKV: 1200, Causal: true},
		// f16 at head dim 128 (128-row blocks of 16 tokens, group 8).
		{Seqs: 2, QHeads: 16, KVHeads: 2, HeadDim: 128, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 150, MaxKV: 700, Causal: true},
		{Seqs: 4, QHeads: 16, KVHeads: 1, HeadDim: 64, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 9, MaxKV: 600, Causal: true},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 256, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 100, MaxKV: 1500, Causal: true},
		{Seqs: 5, QHeads: 12, KVHeads: 4, HeadDim: 128, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 1, MaxKV: 900, Causal: true},
		{Seqs: 3, QHeads: 8, KVHeads: 8, HeadDim: 64, BlockSize: 8, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 300, MaxKV: 800, Causal: true},
		{Seqs: 3, QHeads: 16, KVHeads: 2, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 16, MaxKV: 2000, Causal: true},
		// fp8 caches: the 128-row, 64-row (with one-token rows, which the
		// decode's fp8 _mods kernels run) and head-dim 256 kernels.
		{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 200, MaxKV: 1200, Causal: true},
		{Seqs: 4, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 1, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 9, MaxKV: 600, Causal: true},
		{Seqs: 2, QHeads: 8, KVHeads: 2, HeadDim: 256, BlockSize: 64, DType: pagedkv.F16, CacheDType: pagedkv.E4M3, MaxQLen: 100, MaxKV: 1500, Causal: true},
	}
	mods := []modsCase{
		{window: 100},
		{softCap: 5},
		{sinks: true},
		{alibi: true},
		{window: 37, softCap: 2, sinks: true, alibi: true},
	}
	for i, c := range shapes {
		cases := append([]modsCase{}, mods...)
		if i < 4 || c.CacheDType == pagedkv.E4M3 {
			// Window edges: inside a page, a whole number of pages, 32 + 3
			// (the first key inside a tile), past the longest sequence.
			for _, w := range []int{c.BlockSize*3 + 5, c.BlockSize * 4, 35, c.MaxKV + 50} {
				cases = append(cases, modsCase{window: w, sinks: g.IntN(2) == 0, alibi: g.IntN(2) == 0})
			}
		}
		for _, m := range cases {
			t.Run(c.String()+" "+m.String(), func(t *testing.T) {
				p := varlenProblem(t, auto, auto.Stream(), g, c)
				require.NoError(t, p.SetMods(auto.Stream(), g, m.window, m.softCap, m.sinks, m.alibi))
				wantOut, wantLSE := p.Reference()
				plan, err := auto.PlanVarlen(auto.Stream(), &p.Args)
				require.NoError(t, err)
				if plan.DecodePrefix < c.Seqs {
					assert.Contains(t, plan.Kernel, "_mods")
				} // else every sequence is one token: the decode's _mods kernels run it
				out, lse, err := p.Run(auto, auto.Stream())
				require.NoError(t, err)
				require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "auto: %s, %d splits", plan.Kernel, plan.Splits)
				out, lse, err = p.Run(single, single.Stream())
				require.NoError(t, err)
				require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "single-pass")
				for _, k := range []dispatch.Knobs{forcedVarlen(7), forcedVarlen(64), keysVarlen(64), keysVarlen(32)} {
					plan, err := auto.PlanVarlenWith(&p.Args, k)
					require.NoError(t, err)
					assert.Contains(t, plan.Kernel, "_mods")
					out, lse, err := p.RunWithPlan(auto, auto.Stream(), plan)
					require.NoError(t, err)
					require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "%s, %d splits", plan.Kernel, plan.Splits)
				}
			})
		}
	}
}

// forcedVarlen returns the default knobs with n splits forced.
func forcedVarlen(n int) dispatch.Knobs {
	k := dispatch.DefaultKnobs()
	k.ForcedSplits = n
	return k
}

// keysVarlen returns the default knobs asking for varlen tiles of keys keys.
func keysVarlen(keys int) dispatch.Knobs {
	k := dispatch.DefaultKnobs()
	k.VarlenKeys = keys
	return k
}

// TestVarlenModsWindowReads: with a window, a block reads no page before
// its first query's window: those pages' table entries point outside the
// pool, where a read would be a recorded fault. Long prompts and chunks
// over a long cache, single-pass and split-K.
func TestVarlenModsWindowReads(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	const window = 500
	for _, c := range []check.VarlenShape{
		{Seqs: 4, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 700, MaxKV: 3000, Causal: true},
		{Seqs: 3, QHeads: 8, KVHeads: 1, HeadDim: 64, BlockSize: 8, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 5, MaxKV: 3000, Causal: true},
	} {
		t.Run(c.String(), func(t *testing.T) {
			p := varlenProblem(t, r, r.Stream(), g, c)
			require.NoError(t, p.SetMods(r.Stream(), g, window, 0, true, false))
			tables := append([]int32(nil), p.Tables...)
			mbps := p.Args.MaxBlocksPerSeq
			for s, pos := range p.PosOffsets {
				lo := int(pos) - window + 1
				for page := 0; (page+1)*c.BlockSize <= lo; page++ {
					tables[s*mbps+page] = int32(p.Args.NumBlocks + 1000 + page)
				}
			}
			require.NoError(t, pagedkv.Upload(r.Stream(), p.Args.BlockTables, tables))
			wantOut, wantLSE := p.Reference()
			for _, k := range []dispatch.Knobs{dispatch.DefaultKnobs(), forcedVarlen(5)} {
				plan, err := r.PlanVarlenWith(&p.Args, k)
				require.NoError(t, err)
				out, lse, err := p.RunWithPlan(r, r.Stream(), plan)
				require.NoError(t, err, "a read of a page before the window would record a fault")
				require.NoError(t, p.CheckReference(out, lse, wantOut, wantLSE), "%s, %d splits", plan.Kernel, plan.Splits)
			}
		})
	}
}

// TestVarlenModsGraphReplay captures a windowed, soft-capped varlen with
// sinks and ALiBi once and replays it at other lengths.
func TestVarlenModsGraphReplay(t *testing.T) {
	const capacity = 4096
	r := open(t, config.Options{KVCapacity: ptr(capacity)})
	g := rng(t)
	s, err := r.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	c := check.VarlenShape{Seqs: 3, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 200, MaxKV: capacity, Causal: true}
	p := varlenProblem(t, r, s, g, c)
	require.NoError(t, p.SetMods(s, g, 700, 30, true, true))
	budget := p.Args.NumTokens
	p.Args.HostCuSeqlensQ, p.Args.HostPosOffsets = nil, nil
	require.NoError(t, r.ReserveVarlen(s, &p.Args))
	graph := captureVarlen(t, r, s, &p.Args)
	t.Cleanup(func() { require.NoError(t, graph.Close()) })
	replayVarlenAt(t, s, g, p, graph, c, budget, []int{capacity, 64, 701, 1500}, nil)
}

// TestSequenceAttentionMods runs SequenceAttention with every modifier on
// both of its paths: a causal varlen over one sequence and (QLen 1) the
// decode.
func TestSequenceAttentionMods(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	for _, c := range []check.VarlenShape{
		{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.BF16, MaxQLen: 300, MaxKV: 3000, Causal: true},
		{Seqs: 1, QHeads: 16, KVHeads: 2, HeadDim: 64, BlockSize: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxQLen: 16, MaxKV: 5000, Causal: true},
		{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, DType: pagedkv.BF16, CacheDType: pagedkv.E4M3, MaxQLen: 300, MaxKV: 3000, Causal: true},
	} {
		for _, qLen := range []int{1, 2 + g.IntN(c.MaxQLen-1)} {
			t.Run(fmt.Sprintf("%v qlen=%d", c, qLen), func(t *testing.T) {
				kv := qLen + g.IntN(c.MaxKV-qLen+1)
				p, err := check.NewVarlenProblemWith(r, s, g, c, []int32{0, int32(qLen)}, []int32{int32(kv - qLen)})
				require.NoError(t, err)
				t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
				require.NoError(t, p.SetMods(s, g, 1+g.IntN(kv), 20, true, true))
				out, lse, err := p.RunSequence(r, s)
				require.NoError(t, err)
				require.NoError(t, p.Check(out, lse))
			})
		}
	}
}

// ringCache copies the first kvLen tokens of one sequence (block-table row
// table over caches k and v of numBlocks pages, flash layout, 16-bit) into
// a sliding-window cache of ring pages the way an engine fills one:
// Gather the tokens out, then Append them in order by their logical slots
// (token position) through a SlotRemap that sends logical page j to
// physical page j mod ring. It returns the ring caches and its block-table row, which
// maps every logical page to its ring page (so the pages before the window
// point at pages that now hold newer tokens).
func ringCache(t *testing.T, r *pagedkv.Runtime, s *pagedkv.Stream, a *check.Arena, k, v pagedkv.Buffer, table []int32,
	numBlocks, kvHeads, headDim, blockSize, kvLen, ring int, dtype pagedkv.DType) (rk, rv, rtable pagedkv.Buffer) {
	t.Helper()
	tokenBytes := int64(kvHeads * headDim * dtype.Size())
	physical := make([]int64, kvLen)
	logical := make([]int64, kvLen)
	remap := make([]int64, kvLen)
	for i := range kvLen {
		physical[i] = int64(table[i/blockSize])*int64(blockSize) + int64(i%blockSize)
		logical[i] = int64(i)
		remap[i] = int64((i/blockSize)%ring*blockSize + i%blockSize)
	}
	var set check.Setter
	var kTok, vTok, phys, logi, rem pagedkv.Buffer
	set.To(&kTok)(a.Alloc(int64(kvLen) * tokenBytes))
	set.To(&vTok)(a.Alloc(int64(kvLen) * tokenBytes))
	set.To(&phys)(check.Upload(a, s, physical, 8))
	set.To(&logi)(check.Upload(a, s, logical, 8))
	set.To(&rem)(check.Upload(a, s, remap, 8))
	set.To(&rk)(a.Alloc(int64(ring*blockSize) * tokenBytes))
	set.To(&rv)(a.Alloc(int64(ring*blockSize) * tokenBytes))
	rows := make([]int32, len(table))
	for j := range rows {
		rows[j] = int32(j % ring)
	}
	set.To(&rtable)(check.Upload(a, s, rows, 4))
	require.NoError(t, set.Err)
	require.NoError(t, r.Gather(s, &pagedkv.GatherArgs{
		KCache: k, VCache: v, SlotMapping: phys, KOut: kTok, VOut: vTok, NumTokens: kvLen, NumKVHeads: kvHeads,
		HeadDim: headDim, BlockSize: blockSize, NumBlocks: numBlocks, CacheDType: dtype,
	}))
	// One Append per ring's worth of tokens, in order, as an engine's
	// steps write them: within one launch no two tokens share a slot.
	for at := 0; at < kvLen; at += ring * blockSize {
		n := min(ring*blockSize, kvLen-at)
		var kv, vv, slots pagedkv.Buffer
		set.To(&kv)(kTok.Slice(int64(at)*tokenBytes, int64(n)*tokenBytes))
		set.To(&vv)(vTok.Slice(int64(at)*tokenBytes, int64(n)*tokenBytes))
		set.To(&slots)(logi.Slice(int64(at)*8, int64(n)*8))
		require.NoError(t, set.Err)
		require.NoError(t, r.Append(s, &pagedkv.AppendArgs{
			K: kv, V: vv, KCache: rk, VCache: rv, SlotMapping: slots, SlotRemap: rem, NumTokens: n,
			NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize, NumBlocks: ring, DType: dtype, CacheDType: dtype,
		}))
	}
	return rk, rv, rtable
}

// TestWindowOverRingCache: a sliding-window cache of window + query + one
// page of slots, filled through Append's SlotRemap, serves a sequence far
// longer than the window. Decode and Varlen (split-K too) over the ring
// give what they give over the whole cache, checked against float64:
// neither reads a page before the window, whose table entries now name
// ring pages that hold newer tokens.
func TestWindowOverRingCache(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	s := r.Stream()
	a := arena(t, r)
	const window, kvLen, bs = 300, 5000, 16
	t.Run("decode", func(t *testing.T) {
		c := check.DecodeShape{Seqs: 1, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: bs, MaxBlocksPerSeq: (kvLen + bs - 1) / bs,
			DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: kvLen}
		p := decodeProblem(t, r, s, g, c)
		require.NoError(t, p.SetLens(s, []int32{kvLen}))
		require.NoError(t, p.SetMods(s, g, window, 0, true, false))
		ring := (window+bs-1)/bs + 1
		rk, rv, rtable := ringCache(t, r, s, a, p.Args.KCache, p.Args.VCache, p.Tables, p.Args.NumBlocks, c.KVHeads, c.HeadDim, bs, kvLen, ring, c.DType)
		p.Args.KCache, p.Args.VCache, p.Args.BlockTables, p.Args.NumBlocks = rk, rv, rtable, ring
		forced := dispatch.DefaultKnobs()
		forced.ForcedSplits = 5
		for _, k := range []dispatch.Knobs{dispatch.DefaultKnobs(), forced} {
			plan, err := p.PlanWith(r, k)
			require.NoError(t, err)
			out, lse, err := p.RunWithPlan(r, s, plan)
			require.NoError(t, err)
			require.NoError(t, p.Check(out, lse), "%s, %d splits", plan.Kernel, plan.Splits)
		}
	})
	t.Run("varlen", func(t *testing.T) {
		const qLen = 40
		c := check.VarlenShape{Seqs: 1, QHeads: 16, KVHeads: 4, HeadDim: 128, BlockSize: bs, DType: pagedkv.BF16, CacheDType: pagedkv.BF16,
			MaxQLen: qLen, MaxKV: kvLen, Causal: true}
		p, err := check.NewVarlenProblemWith(r, s, g, c, []int32{0, qLen}, []int32{kvLen - qLen})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, p.Arena.Free()) })
		require.NoError(t, p.SetMods(s, g, window, 0, false, true))
		ring := (window+qLen+bs-1)/bs + 1
		rk, rv, rtable := ringCache(t, r, s, a, p.Args.KCache, p.Args.VCache, p.Tables, p.Args.NumBlocks, c.KVHeads, c.HeadDim, bs, kvLen, ring, c.DType)
		p.Args.KCache, p.Args.VCache, p.Args.BlockTables, p.Args.NumBlocks = rk, rv, rtable, ring
		want, wantLSE := p.Reference()
		for _, k := range []dispatch.Knobs{dispatch.DefaultKnobs(), forcedVarlen(4)} {
			plan, err := r.PlanVarlenWith(&p.Args, k)
			require.NoError(t, err)
			out, lse, err := p.RunWithPlan(r, s, plan)
			require.NoError(t, err)
			require.NoError(t, p.CheckReference(out, lse, want, wantLSE), "%s, %d splits", plan.Kernel, plan.Splits)
		}
	})
}
