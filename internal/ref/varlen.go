package ref

import "fmt"

// Varlen holds the arguments of PagedVarlen: several query tokens per
// sequence (prefill, chunked prefill, speculative verify, or one token for a
// decode in a mixed batch) attending over the sequence's paged KV cache,
// which already holds the new tokens. Tensors are row-major float64, K and
// V decoded (scales applied), as for Decode.
type Varlen struct {
	// Q is [CuSeqlensQ[NumSeqs], NumQHeads, HeadDim], token-major.
	Q []float64
	// KCache and VCache are [NumBlocks, BlockSize, NumKVHeads, HeadDim]
	// in LayoutFlash, or in Layout with its X, as for Decode.
	KCache, VCache []float64
	Layout         Layout
	X              int
	// BlockTables is [NumSeqs, MaxBlocksPerSeq], as for Decode.
	BlockTables []int32
	// CuSeqlensQ is [NumSeqs+1]: sequence s owns query tokens
	// CuSeqlensQ[s] … CuSeqlensQ[s+1]-1.
	CuSeqlensQ []int32
	// PosOffsets is [NumSeqs]: the KV position of sequence s's first query
	// token, so its KV length is PosOffsets[s] + q_len.
	PosOffsets []int32

	NumSeqs, NumQHeads, NumKVHeads, HeadDim, BlockSize, MaxBlocksPerSeq int

	// Causal: query i of sequence s attends KV positions ≤ PosOffsets[s] + i
	// (bottom-right aligned); otherwise every position of the sequence.
	Causal bool
	// Scale multiplies every q·k score (usually 1/sqrt(HeadDim)).
	Scale float64
	// Mods modify the scores, as for Decode; a SlidingWindow needs Causal.
	Mods Mods
}

// PagedVarlen returns out [total q tokens, NumQHeads, HeadDim] and the
// natural log-sum-exp of the scaled scores lse [total q tokens, NumQHeads],
// computed as PagedDecode computes one query (PagedDecode is PagedVarlen with
// one query token per sequence at position KVLens[s]-1, causal or not).
// Inconsistent shapes, a decreasing CuSeqlensQ, negative offsets, block ids
// outside the cache and lengths beyond MaxBlocksPerSeq*BlockSize panic.
func PagedVarlen(a Varlen) (out, lse []float64) {
	if a.NumKVHeads <= 0 || a.NumQHeads%a.NumKVHeads != 0 {
		panic(fmt.Sprintf("ref: PagedVarlen: NumQHeads=%d is not a multiple of NumKVHeads=%d", a.NumQHeads, a.NumKVHeads))
	}
	if a.BlockSize <= 0 || len(a.CuSeqlensQ) != a.NumSeqs+1 || len(a.PosOffsets) != a.NumSeqs || a.CuSeqlensQ[0] != 0 {
		panic(fmt.Sprintf("ref: PagedVarlen: BlockSize=%d, %d CuSeqlensQ (first %v), %d PosOffsets for %d sequences",
			a.BlockSize, len(a.CuSeqlensQ), a.CuSeqlensQ[:min(1, len(a.CuSeqlensQ))], len(a.PosOffsets), a.NumSeqs))
	}
	if len(a.VCache) != len(a.KCache) {
		panic(fmt.Sprintf("ref: PagedVarlen: KCache has %d elements, VCache %d", len(a.KCache), len(a.VCache)))
	}
	for s := range a.NumSeqs {
		if a.CuSeqlensQ[s+1] < a.CuSeqlensQ[s] || a.PosOffsets[s] < 0 {
			panic(fmt.Sprintf("ref: PagedVarlen: sequence %d has CuSeqlensQ %d..%d and PosOffsets %d", s, a.CuSeqlensQ[s], a.CuSeqlensQ[s+1], a.PosOffsets[s]))
		}
	}
	a.Mods.check("PagedVarlen", a.NumQHeads)
	if a.Mods.SlidingWindow > 0 && !a.Causal {
		panic("ref: PagedVarlen: a SlidingWindow needs Causal")
	}
	group := a.NumQHeads / a.NumKVHeads
	c := newPagedCache("PagedVarlen", a.KCache, a.VCache, a.BlockTables, a.Layout, a.X, a.NumKVHeads, a.HeadDim,
		a.BlockSize, a.MaxBlocksPerSeq, len(a.KCache)/(a.BlockSize*a.NumKVHeads*a.HeadDim))
	total := int(a.CuSeqlensQ[a.NumSeqs])
	out = make([]float64, total*a.NumQHeads*a.HeadDim)
	lse = make([]float64, total*a.NumQHeads)
	// Each sequence's rows first (a bad block id panics here), then every
	// query token's heads on their own.
	rows := make([][]int, a.NumSeqs)
	seqOf := make([]int, total)
	for s := range a.NumSeqs {
		first, end := int(a.CuSeqlensQ[s]), int(a.CuSeqlensQ[s+1])
		rows[s] = c.rows("PagedVarlen", s, int(a.PosOffsets[s])+end-first)
		for t := first; t < end; t++ {
			seqOf[t] = s
		}
	}
	forEach(total, func(t int) {
		s := seqOf[t]
		p := int(a.PosOffsets[s]) + t - int(a.CuSeqlensQ[s])
		visible, from := a.Mods.visible(rows[s], p, a.Causal)
		for h := range a.NumQHeads {
			i := t*a.NumQHeads + h
			q := query{a.Q[i*a.HeadDim:][:a.HeadDim], p, h}
			lse[i] = c.attend(q, visible, from, h/group, a.Scale, &a.Mods, out[i*a.HeadDim:][:a.HeadDim])
		}
	})
	return out, lse
}
