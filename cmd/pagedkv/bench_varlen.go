package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
)

// varlenRun is a run of sequences of one shape within a varlen batch: seqs
// sequences of qLen new query tokens over kvLen keys each, so pos_offset =
// kvLen − qLen.
type varlenRun struct{ seqs, qLen, kvLen int }

// varlenCase is one varlen row: a batch of runs issued as one Varlen call
// (32 query heads, 8 KV heads, head dim 128, block 16, causal).
type varlenCase struct {
	shape string
	runs  []varlenRun
	// memoryBound rows also report bytes/s and % of the copy bandwidth.
	memoryBound bool
	// fp8 rows are measured with an e4m3 cache too.
	fp8 bool
	// twoCalls also times the same data as a Decode of the first run (its
	// q_len must be 1) plus one Varlen of the other runs.
	twoCalls bool
	// mods are the row's score modifiers (none by default).
	mods benchMods
	// headDim is the row's head dim (0: benchHeadDim).
	headDim int
	// graphCap > 0 times the batch as graphs captured for a KV capacity of
	// graphCap (an engine's graph, captured once and replayed at whatever
	// lengths each step has), replayed over the row's own lengths.
	graphCap int
}

// hd returns the row's head dim.
func (c *varlenCase) hd() int { return cmp.Or(c.headDim, benchHeadDim) }

// varlenCases are prefill, chunked prefill, small-query steps (speculative
// verification of 16 and of 5 tokens), one sequence's 16-token chunk over
// short caches (a SequenceAttention call, where a split-K merge's second
// launch weighs), a mixed decode + prefill batch and decodes sent as a
// varlen, then the score modifiers: a 4096-token window over a 16384-token
// prompt (against the FLOPs its windows cover), soft-cap, sinks and ALiBi
// over the plain rows' shapes, and the head dims between the powers of two.
func varlenCases() []varlenCase {
	return []varlenCase{
		{shape: "prefill 1x4096", runs: []varlenRun{{1, 4096, 4096}}},
		{shape: "prefill 8x2048", runs: []varlenRun{{8, 2048, 2048}}, fp8: true},
		{shape: "prefill 32x512", runs: []varlenRun{{32, 512, 512}}},
		{shape: "prefill 1x16384", runs: []varlenRun{{1, 16384, 16384}}},
		{shape: "chunk 4x512 kv=8192", runs: []varlenRun{{4, 512, 8192}}},
		{shape: "small-query 8x16 kv=8192", runs: []varlenRun{{8, 16, 8192}}, memoryBound: true, fp8: true},
		{shape: "spec-verify 8x5 kv=3584", runs: []varlenRun{{8, 5, 3584}}, memoryBound: true},
		{shape: "chunk 1x16 kv=512", runs: []varlenRun{{1, 16, 512}}, memoryBound: true},
		{shape: "chunk 1x16 kv=1024", runs: []varlenRun{{1, 16, 1024}}, memoryBound: true},
		{shape: "chunk 1x16 kv=2048", runs: []varlenRun{{1, 16, 2048}}, memoryBound: true},
		{shape: "chunk 1x300 kv=2000", runs: []varlenRun{{1, 300, 2000}}},
		{shape: "chunk 1x16 kv=512 graph cap=32768", runs: []varlenRun{{1, 16, 512}}, memoryBound: true, graphCap: 32768},
		{shape: "chunk 1x300 kv=2000 graph cap=32768", runs: []varlenRun{{1, 300, 2000}}, graphCap: 32768},
		{shape: "spec-verify 8x5 kv=3584 graph cap=32768", runs: []varlenRun{{8, 5, 3584}}, memoryBound: true, graphCap: 32768},
		{shape: "mixed 64x1 kv=2048 + 2x512 kv=4096", runs: []varlenRun{{64, 1, 2048}, {2, 512, 4096}}, memoryBound: true, twoCalls: true},
		{shape: "decodes 64x1 kv=2048", runs: []varlenRun{{64, 1, 2048}}, memoryBound: true},
		{shape: "prefill 1x16384 window=4096", runs: []varlenRun{{1, 16384, 16384}}, mods: benchMods{window: 4096}, fp8: true},
		{shape: "prefill 8x2048 softcap=30", runs: []varlenRun{{8, 2048, 2048}}, mods: benchMods{softCap: 30}},
		{shape: "prefill 8x2048 sinks", runs: []varlenRun{{8, 2048, 2048}}, mods: benchMods{sinks: true}},
		{shape: "prefill 8x2048 alibi", runs: []varlenRun{{8, 2048, 2048}}, mods: benchMods{alibi: true}},
		{shape: "prefill 8x2048 softcap+sinks+alibi", runs: []varlenRun{{8, 2048, 2048}}, mods: benchMods{softCap: 30, sinks: true, alibi: true}, fp8: true},
		{shape: "small-query 8x16 kv=8192 softcap+sinks+alibi", runs: []varlenRun{{8, 16, 8192}}, memoryBound: true,
			mods: benchMods{softCap: 30, sinks: true, alibi: true}},
		{shape: "prefill 8x2048 hd=80", runs: []varlenRun{{8, 2048, 2048}}, headDim: 80},
		{shape: "prefill 8x2048 hd=96", runs: []varlenRun{{8, 2048, 2048}}, headDim: 96, fp8: true},
		{shape: "prefill 8x2048 hd=112", runs: []varlenRun{{8, 2048, 2048}}, headDim: 112},
		{shape: "prefill 8x2048 hd=120", runs: []varlenRun{{8, 2048, 2048}}, headDim: 120},
		{shape: "prefill 8x2048 hd=192", runs: []varlenRun{{8, 2048, 2048}}, headDim: 192, fp8: true},
		{shape: "small-query 8x16 kv=8192 hd=80", runs: []varlenRun{{8, 16, 8192}}, memoryBound: true, headDim: 80},
	}
}

// varlenBatch is a case's lengths per sequence: query tokens, KV length,
// and the CuSeqlensQ and PosOffsets the kernels read.
type varlenBatch struct {
	qLens, kvLens, cu, pos []int32
}

func (c *varlenCase) batch() varlenBatch {
	bt := varlenBatch{cu: []int32{0}}
	for _, r := range c.runs {
		for range r.seqs {
			bt.qLens = append(bt.qLens, int32(r.qLen))
			bt.kvLens = append(bt.kvLens, int32(r.kvLen))
			bt.pos = append(bt.pos, int32(r.kvLen-r.qLen))
			bt.cu = append(bt.cu, bt.cu[len(bt.cu)-1]+int32(r.qLen))
		}
	}
	return bt
}

// varlenFLOPs counts 4·headDim·NumQHeads FLOPs (a multiply-add each for q·k
// and p·v) per (query, key) pair attended under the bottom-right causal
// mask: query i of a sequence attends pos_offset+i+1 keys, so q_len L at
// offset P gives L·P + L(L+1)/2 pairs; with a sliding window (> 0), at
// most window of them.
func varlenFLOPs(qLens, pos []int32, qHeads, headDim, window int) float64 {
	var pairs float64
	for s, l := range qLens {
		L, P := float64(l), float64(pos[s])
		if window <= 0 {
			pairs += L*P + L*(L+1)/2
			continue
		}
		for i := range int(l) {
			pairs += float64(min(int(pos[s])+i+1, window))
		}
	}
	return 4 * float64(headDim) * float64(qHeads) * pairs
}

// varlenBytes is the least a varlen must move: each sequence's K and V once
// per KV head (kvBytes; with a sliding window, the keys its queries'
// windows cover), q read and out written.
func varlenBytes(bt *varlenBatch, qHeads, headDim int, q, cache pagedkv.DType, window int) float64 {
	tokens := int64(bt.cu[len(bt.cu)-1])
	kv := bt.kvLens
	if window > 0 {
		kv = make([]int32, len(bt.kvLens))
		for s, n := range bt.kvLens {
			kv[s] = min(n, int32(window)+bt.qLens[s]-1)
		}
	}
	return float64(kvBytes(kv, cache)*int64(headDim)/benchHeadDim + 2*tokens*int64(qHeads*headDim*q.Size()))
}

// benchVarlen measures paged varlen attention on varlenCases for each
// cache dtype: f16 and bf16 caches with queries of their own dtype, e4m3
// (KScale = VScale = 1) the fp8 cases with bf16 and f16 queries.
func (b *bencher) benchVarlen(caches []pagedkv.DType, doSweep bool) error {
	cases := varlenCases()
	// The pool holds every case's rotations at 2 bytes an element, so the
	// e4m3 rows fit too.
	blocks, total := 0, 0
	for _, c := range cases {
		kv := c.batch().kvLens
		blocks = max(blocks, pagesOf(kv)*b.rotations(kvBytes(kv, pagedkv.F16), 16))
	}
	for _, cache := range caches {
		for _, c := range cases {
			switch {
			case cache != pagedkv.E4M3:
				total++
			case c.fp8:
				total += 2
			}
		}
	}
	arena := check.NewArena(b.r)
	defer arena.Free()
	pool, err := newPagePool(arena, blocks)
	if err != nil {
		return err
	}
	n := 0
	for _, cache := range caches {
		if err := b.fillPool(pool, cache); err != nil {
			return err
		}
		queries := []pagedkv.DType{cache}
		if cache == pagedkv.E4M3 {
			queries = []pagedkv.DType{pagedkv.BF16, pagedkv.F16}
		}
		for _, q := range queries {
			for _, c := range cases {
				if cache == pagedkv.E4M3 && !c.fp8 {
					continue
				}
				n++
				if !b.wants(varlenDType(q, cache), c.shape) {
					continue
				}
				b.status(fmt.Sprintf("varlen %s %s (%d/%d)", varlenDType(q, cache), c.shape, n, total))
				rows, err := b.varlenShape(pool, c, q, cache, doSweep)
				if err != nil {
					row := fmt.Sprintf("varlen %s %s", varlenDType(q, cache), c.shape)
					if b.refuse(row, err) {
						continue
					}
					return fmt.Errorf("%s: %w", row, err)
				}
				b.rep.Results = append(b.rep.Results, rows...)
			}
		}
	}
	return nil
}

// varlenDType names a row's dtypes: the query dtype, then the cache's when
// it differs.
func varlenDType(q, cache pagedkv.DType) string {
	if q == cache {
		return q.String()
	}
	return q.String() + "/" + cache.String()
}

// varlenShape measures case c with q queries over a cache of pool's pages:
// its row; with doSweep, for a memory-bound case of one run, the same batch
// at each forced split count the planner could pick (rows "… forced"), so
// the table shows how far the automatic count is from the best, and for a
// compute-bound one on a device with the wgmma kernels, the other
// tensor-core choice (a "… forced" row where it differs); and for a
// twoCalls case the "as two calls" row.
func (b *bencher) varlenShape(pool *pagePool, c varlenCase, q, cache pagedkv.DType, doSweep bool) ([]benchResult, error) {
	const qHeads = 32
	bt := c.batch()
	seqs, totalQ := len(bt.qLens), int(bt.cu[len(bt.cu)-1])
	maxKV := int(slices.Max(bt.kvLens))
	pagesPerSeq := (max(maxKV, c.graphCap) + benchBlockSize - 1) / benchBlockSize
	hd := c.hd()
	blocks := pool.blocks * benchHeadDim / hd // pages of hd hold this many
	rot := min(b.rotations(kvBytes(bt.kvLens, cache)*int64(hd)/benchHeadDim, 16), blocks/pagesOf(bt.kvLens))
	a := check.NewArena(b.r)
	defer a.Free()
	qRaw, _ := check.RandomTensor(b.g, q, totalQ*qHeads*hd, 1)
	base := pagedkv.VarlenArgs{
		KCache: pool.k, VCache: pool.v,
		NumSeqs: seqs, NumTokens: totalQ, NumQHeads: qHeads, NumKVHeads: benchKVHeads, HeadDim: hd,
		BlockSize: benchBlockSize, NumBlocks: blocks, MaxBlocksPerSeq: pagesPerSeq, MaxKVLen: maxKV, Causal: true,
		HostCuSeqlensQ: bt.cu, HostPosOffsets: bt.pos, DType: q, CacheDType: cache, KVCapacity: c.graphCap,
	}
	if cache == pagedkv.E4M3 {
		base.KScale, base.VScale = 1, 1
	}
	base.SlidingWindow, base.SoftCap = c.mods.window, c.mods.softCap
	var err error
	if base.Sinks, base.AlibiSlopes, err = b.modBuffers(a, c.mods, qHeads); err != nil {
		return nil, err
	}
	var set check.Setter
	set.To(&base.Q)(check.Upload(a, b.s, qRaw, 1))
	set.To(&base.Out)(a.Alloc(int64(len(qRaw))))
	set.To(&base.CuSeqlensQ)(check.Upload(a, b.s, bt.cu, 4))
	set.To(&base.PosOffsets)(check.Upload(a, b.s, bt.pos, 4))
	sets := make([]pagedkv.VarlenArgs, rot)
	for i, table := range pageTables(b.g.Perm(blocks), bt.kvLens, pagesPerSeq, rot) {
		sets[i] = base
		set.To(&sets[i].BlockTables)(check.Upload(a, b.s, table, 4))
	}
	if set.Err != nil {
		return nil, set.Err
	}
	var plan dispatch.VarlenPlan
	var us float64
	if c.graphCap > 0 {
		if plan, us, err = b.varlenGraphs(sets); err != nil {
			return nil, err
		}
	} else {
		if plan, err = b.r.PlanVarlen(b.s, &sets[0]); err != nil {
			return nil, err
		}
		if us, err = b.measure(func(i int) error { return b.r.Varlen(b.s, &sets[i%rot]) }); err != nil {
			return nil, err
		}
	}
	flops, bytes := varlenFLOPs(bt.qLens, bt.pos, qHeads, hd, c.mods.window), varlenBytes(&bt, qHeads, hd, q, cache, c.mods.window)
	dtype := varlenDType(q, cache)
	rows := []benchResult{b.varlenRow(c, dtype, c.shape, varlenPlanText(plan), plan.Splits, us, flops, bytes)}
	if c.mods != (benchMods{}) {
		// The same batch without modifiers, as the planner runs it (the
		// 64-key kernel where it takes one): what the modifiers cost
		// against plain varlen.
		plain := slices.Clone(sets)
		for i := range plain {
			plain[i].SlidingWindow, plain[i].SoftCap, plain[i].Sinks, plain[i].AlibiSlopes = 0, 0, pagedkv.Buffer{}, pagedkv.Buffer{}
		}
		pp, err := b.r.PlanVarlen(b.s, &plain[0])
		if err != nil {
			return nil, err
		}
		pus, err := b.measure(func(i int) error { return b.r.VarlenWithPlan(b.s, &plain[i%rot], pp) })
		if err != nil {
			return nil, err
		}
		pflops := varlenFLOPs(bt.qLens, bt.pos, qHeads, hd, 0)
		rows = append(rows, b.varlenRow(c, dtype, c.shape+" (none)", varlenPlanText(pp), pp.Splits, pus, pflops, varlenBytes(&bt, qHeads, hd, q, cache, 0)))
	}
	if b.layouts && c.mods == (benchMods{}) && c.headDim == 0 && c.graphCap == 0 {
		// The same batch over the same pages read as the other layouts
		// (the score modifiers have flash-layout kernels only).
		for _, layout := range allLayouts[1:] {
			laid := slices.Clone(sets)
			for i := range laid {
				laid[i].Layout = layout
			}
			lp, err := b.r.PlanVarlen(b.s, &laid[0])
			if err != nil {
				return nil, err
			}
			lus, err := b.measure(func(i int) error { return b.r.Varlen(b.s, &laid[i%rot]) })
			if err != nil {
				return nil, err
			}
			rows = append(rows, b.varlenRow(c, dtype, c.shape+" "+layout.String(), varlenPlanText(lp), lp.Splits, lus, flops, bytes))
		}
	}
	if doSweep && c.memoryBound && len(c.runs) == 1 && c.graphCap == 0 {
		for _, n := range []int{1, 2, 3, 4, 6, 8, 12, 16} {
			k := b.r.VarlenKnobs()
			k.ForcedSplits = n
			forced, err := b.r.PlanVarlenWith(&sets[0], k)
			if err != nil {
				return nil, err
			}
			if forced.Splits != n || n == plan.Splits {
				continue
			}
			fus, err := b.measure(func(i int) error { return b.r.VarlenWithPlan(b.s, &sets[i%rot], forced) })
			if err != nil {
				return nil, err
			}
			rows = append(rows, b.varlenRow(c, dtype, fmt.Sprintf("%s forced x%d", c.shape, n), varlenPlanText(forced), forced.Splits, fus, flops, bytes))
		}
	}
	if doSweep && !c.memoryBound && len(c.runs) == 1 && c.graphCap == 0 && b.r.Facts().WGMMA {
		// The other tensor-core choice (wgmma or mma.sync) for the same
		// batch, where the device has both: how far the planner's choice
		// is from the better.
		k := b.r.VarlenKnobs()
		k.VarlenWGMMA = dispatch.SplitOn
		if dispatch.VarlenWGKernel(plan.Kernel) {
			k.VarlenWGMMA = dispatch.SplitOff
		}
		other, err := b.r.PlanVarlenWith(&sets[0], k)
		if err != nil {
			return nil, err
		}
		if otherWG := dispatch.VarlenWGKernel(other.Kernel); otherWG != dispatch.VarlenWGKernel(plan.Kernel) {
			ous, err := b.measure(func(i int) error { return b.r.VarlenWithPlan(b.s, &sets[i%rot], other) })
			if err != nil {
				return nil, err
			}
			cores := "mma.sync"
			if otherWG {
				cores = "wgmma"
			}
			rows = append(rows, b.varlenRow(c, dtype, c.shape+" forced "+cores, varlenPlanText(other), other.Splits, ous, flops, bytes))
		}
	}
	if !c.twoCalls {
		return rows, nil
	}

	// The same buffers as two calls: a Decode of the first run's rows (one
	// token each) and a Varlen of the rest, on views of Q, Out, PosOffsets
	// and each rotation's block tables.
	d := c.runs[0].seqs
	rest := bt.cu[d:]
	restCu := make([]int32, len(rest))
	for i, t := range rest {
		restCu[i] = t - rest[0]
	}
	rowBytes, tableRow := int64(qHeads*hd*q.Size()), int64(pagesPerSeq*4)
	decBase := pagedkv.DecodeArgs{
		KCache: pool.k, VCache: pool.v,
		NumSeqs: d, NumQHeads: qHeads, NumKVHeads: benchKVHeads, HeadDim: hd, BlockSize: benchBlockSize,
		NumBlocks: blocks, MaxBlocksPerSeq: pagesPerSeq, MaxKVLen: int(slices.Max(bt.kvLens[:d])), HostKVLens: bt.kvLens[:d],
		DType: q, CacheDType: cache, KScale: base.KScale, VScale: base.VScale,
	}
	preBase := base
	preBase.NumSeqs, preBase.NumTokens = seqs-d, totalQ-d
	preBase.MaxKVLen = int(slices.Max(bt.kvLens[d:]))
	preBase.HostCuSeqlensQ, preBase.HostPosOffsets = restCu, bt.pos[d:]
	set.To(&decBase.Q)(base.Q.Slice(0, int64(d)*rowBytes))
	set.To(&decBase.Out)(base.Out.Slice(0, int64(d)*rowBytes))
	set.To(&decBase.KVLens)(check.Upload(a, b.s, bt.kvLens[:d], 4))
	set.To(&preBase.Q)(base.Q.Slice(int64(d)*rowBytes, int64(totalQ-d)*rowBytes))
	set.To(&preBase.Out)(base.Out.Slice(int64(d)*rowBytes, int64(totalQ-d)*rowBytes))
	set.To(&preBase.CuSeqlensQ)(check.Upload(a, b.s, restCu, 4))
	set.To(&preBase.PosOffsets)(base.PosOffsets.Slice(int64(d)*4, int64(seqs-d)*4))
	decs, pres := make([]pagedkv.DecodeArgs, rot), make([]pagedkv.VarlenArgs, rot)
	for i := range sets {
		decs[i], pres[i] = decBase, preBase
		set.To(&decs[i].BlockTables)(sets[i].BlockTables.Slice(0, int64(d)*tableRow))
		set.To(&pres[i].BlockTables)(sets[i].BlockTables.Slice(int64(d)*tableRow, int64(seqs-d)*tableRow))
	}
	if set.Err != nil {
		return nil, set.Err
	}
	dp, err := b.r.PlanDecode(b.s, &decs[0])
	if err != nil {
		return nil, err
	}
	vp, err := b.r.PlanVarlen(b.s, &pres[0])
	if err != nil {
		return nil, err
	}
	us2, err := b.measure(func(i int) error {
		if err := b.r.Decode(b.s, &decs[i%rot]); err != nil {
			return err
		}
		return b.r.Varlen(b.s, &pres[i%rot])
	})
	if err != nil {
		return nil, err
	}
	two := fmt.Sprintf("mixed as two calls: Decode %dx1 kv=%d + Varlen", d, c.runs[0].kvLen)
	for i, r := range c.runs[1:] {
		if i > 0 {
			two += " +"
		}
		two += fmt.Sprintf(" %dx%d kv=%d", r.seqs, r.qLen, r.kvLen)
	}
	rows = append(rows, b.varlenRow(c, dtype, two, "decode "+planText(dp)+" + "+varlenPlanText(vp), 0, us2, flops, bytes))
	return rows, nil
}

// varlenGraphs captures one graph of a Varlen per input set, planned for
// the sets' KVCapacity (PlanVarlenGraph), and times their replays.
func (b *bencher) varlenGraphs(sets []pagedkv.VarlenArgs) (dispatch.VarlenPlan, float64, error) {
	plan, err := b.r.PlanVarlenGraph(&sets[0])
	if err != nil {
		return plan, 0, err
	}
	graphs, err := b.captureEach(len(sets), func(i int) error { return b.r.ReserveVarlen(b.s, &sets[i]) },
		func(i int) error { return b.r.Varlen(b.s, &sets[i]) })
	if err != nil {
		return plan, 0, fmt.Errorf("varlen as a graph: %w", err)
	}
	defer closeGraphs(graphs)
	us, err := b.measure(func(i int) error { return graphs[i%len(graphs)].Launch(b.s) })
	return plan, us, err
}

// varlenRow is a measured varlen row: TFLOP/s always, bytes/s against the
// copy bandwidth for memory-bound cases.
func (b *bencher) varlenRow(c varlenCase, dtype, shape, plan string, splits int, us, flops, bytes float64) benchResult {
	res := benchResult{Op: "varlen", DType: dtype, Shape: shape, Plan: plan, Splits: splits, Micros: us, TFLOPS: flops / us / 1e6}
	if c.memoryBound {
		res.GBps = bytes / us / 1e3
		res.PctCopy = 100 * res.GBps / b.rep.CopyGBps
	}
	return res
}

// varlenPlanText describes a varlen plan: its kernel and split count
// ("<=xN by length" where each row tile splits by its own KV range), and
// the decode of a mixed batch's prefix that runs before it.
func varlenPlanText(p dispatch.VarlenPlan) string {
	if p.Kernel == "" && p.DecodePrefix > 0 {
		return fmt.Sprintf("decode x%d", p.DecodePrefix)
	}
	text := fmt.Sprintf("%s split-K x%d", p.Kernel, p.Splits)
	if p.SplitWave > 0 {
		// Each row tile splits by its own KV range, up to Splits.
		text = fmt.Sprintf("%s split-K <=x%d by length", p.Kernel, p.Splits)
	}
	if p.Splits == 1 {
		text = p.Kernel + " single-pass"
	}
	if p.DecodePrefix > 0 {
		text = fmt.Sprintf("decode x%d + %s", p.DecodePrefix, text)
	}
	return text
}
