package ref

import (
	"fmt"
	"math"
)

// Decode holds the arguments of PagedDecode: one query token per sequence
// attending over that sequence's paged KV cache. All tensors are row-major
// float64; K and V are already decoded (for fp8 caches the caller has
// multiplied by the k/v scale), so the op is dtype-free.
type Decode struct {
	// Q is [NumSeqs, NumQHeads, HeadDim].
	Q []float64
	// KCache and VCache are [NumBlocks, BlockSize, NumKVHeads, HeadDim]
	// in LayoutFlash, or in Layout (see CacheIndex) with its X.
	KCache, VCache []float64
	// Layout is the caches' layout (the zero value is LayoutFlash); X is
	// its x, 16 bytes over the cache element size (8 for 16-bit caches, 16
	// for fp8), unused for LayoutFlash.
	Layout Layout
	X      int
	// BlockTables is [NumSeqs, MaxBlocksPerSeq]: entry (s, p) is the
	// physical block holding tokens p*BlockSize … (p+1)*BlockSize-1 of s.
	BlockTables []int32
	// KVLens[s] is the number of cached tokens of sequence s.
	KVLens []int32

	NumSeqs, NumQHeads, NumKVHeads, HeadDim, BlockSize, MaxBlocksPerSeq int

	// Scale multiplies every q·k score (usually 1/sqrt(HeadDim)).
	Scale float64
	// Mods modify the scores (the zero value: none).
	Mods Mods
}

// Mods are the score modifiers of an attention op; the zero value modifies
// nothing. A query at KV position p and a key at position j (both counted
// from the sequence's start) get the score
//
//	s = Scale·q·k;  s = SoftCap·tanh(s/SoftCap) (SoftCap > 0);
//	s += AlibiSlopes[h]·(j − p) (AlibiSlopes set)
//
// over the keys p−SlidingWindow+1 … p (SlidingWindow > 0, else 0 … p), and
// the softmax's denominator gains exp(Sinks[h]) (Sinks set), a logit that
// attends to no value; the log-sum-exp includes it.
type Mods struct {
	SlidingWindow int
	SoftCap       float64
	// Sinks and AlibiSlopes are [NumQHeads], or nil.
	Sinks, AlibiSlopes []float64
}

// check panics, naming op, when m does not fit numQHeads heads.
func (m *Mods) check(op string, numQHeads int) {
	if m.SlidingWindow < 0 || m.SoftCap < 0 || (m.Sinks != nil && len(m.Sinks) != numQHeads) ||
		(m.AlibiSlopes != nil && len(m.AlibiSlopes) != numQHeads) {
		panic(fmt.Sprintf("ref: %s: Mods window %d, soft-cap %g, %d sinks, %d ALiBi slopes for %d heads", op,
			m.SlidingWindow, m.SoftCap, len(m.Sinks), len(m.AlibiSlopes), numQHeads))
	}
}

// visible returns the keys of rows (key j at rows[j]) a query at position p
// sees, causal or not, and the position of the first of them.
func (m *Mods) visible(rows []int, p int, causal bool) ([]int, int) {
	if causal {
		rows = rows[:min(len(rows), p+1)]
	}
	first := 0
	if m.SlidingWindow > 0 {
		first = max(0, p-m.SlidingWindow+1)
	}
	if first >= len(rows) {
		return nil, first
	}
	return rows[first:], first
}

// PagedDecode returns the attention output out [NumSeqs, NumQHeads, HeadDim]
// and the log-sum-exp of the scaled scores lse [NumSeqs, NumQHeads] (natural
// log).
//
// Query head h reads KV head h / (NumQHeads/NumKVHeads). Token j of sequence s
// (0 ≤ j < KVLens[s]) is row j%BlockSize of block
// BlockTables[s*MaxBlocksPerSeq + j/BlockSize]. With score_j = Scale·(q·k_j),
// out = Σ_j softmax(score)_j v_j and lse = log Σ_j exp(score_j), both computed
// in float64 with the maximum score subtracted first. A sequence with
// KVLens[s] == 0 gets a zero output row and lse = -Inf.
//
// Inconsistent shapes, block ids outside the cache and lengths beyond
// MaxBlocksPerSeq*BlockSize panic.
func PagedDecode(a Decode) (out, lse []float64) {
	if a.NumKVHeads <= 0 || a.NumQHeads%a.NumKVHeads != 0 {
		panic(fmt.Sprintf("ref: PagedDecode: NumQHeads=%d is not a multiple of NumKVHeads=%d",
			a.NumQHeads, a.NumKVHeads))
	}
	if a.BlockSize <= 0 {
		panic(fmt.Sprintf("ref: PagedDecode: BlockSize=%d", a.BlockSize))
	}
	rowElems := a.NumKVHeads * a.HeadDim
	numBlocks := len(a.KCache) / (a.BlockSize * rowElems)
	if len(a.VCache) != len(a.KCache) {
		panic(fmt.Sprintf("ref: PagedDecode: KCache has %d elements, VCache %d", len(a.KCache), len(a.VCache)))
	}
	group := a.NumQHeads / a.NumKVHeads
	a.Mods.check("PagedDecode", a.NumQHeads)

	out = make([]float64, a.NumSeqs*a.NumQHeads*a.HeadDim)
	lse = make([]float64, a.NumSeqs*a.NumQHeads)
	c := newPagedCache("PagedDecode", a.KCache, a.VCache, a.BlockTables, a.Layout, a.X, a.NumKVHeads, a.HeadDim,
		a.BlockSize, a.MaxBlocksPerSeq, numBlocks)
	// Each sequence's rows first (a bad block id panics here), then every
	// (sequence, head) on its own.
	rows := make([][]int, a.NumSeqs)
	firsts := make([]int, a.NumSeqs)
	for s := range a.NumSeqs {
		n := int(a.KVLens[s])
		rows[s], firsts[s] = a.Mods.visible(c.rows("PagedDecode", s, n), n-1, true)
	}
	forEach(a.NumSeqs*a.NumQHeads, func(i int) {
		s, h := i/a.NumQHeads, i%a.NumQHeads
		q := query{a.Q[i*a.HeadDim:][:a.HeadDim], int(a.KVLens[s]) - 1, h}
		lse[i] = c.attend(q, rows[s], firsts[s], h/group, a.Scale, &a.Mods, out[i*a.HeadDim:][:a.HeadDim])
	})
	return out, lse
}

// pagedCache is a paged K/V cache as the reference ops read it.
type pagedCache struct {
	keys, values                                    []float64
	tables                                          []int32
	layout                                          Layout
	x                                               int
	numKVHeads, headDim, blockSize, maxBlocksPerSeq int
	numBlocks                                       int
}

// newPagedCache returns the cache the arguments describe; a layout other
// than LayoutFlash whose x does not divide HeadDim (and BlockSize, for
// LayoutShuffle) panics, naming op.
func newPagedCache(op string, keys, values []float64, tables []int32, layout Layout, x, numKVHeads, headDim,
	blockSize, maxBlocksPerSeq, numBlocks int) pagedCache {
	switch layout {
	case LayoutFlash, LayoutHND:
	case LayoutXSplit, LayoutShuffle:
		if x <= 0 || headDim%x != 0 || (layout == LayoutShuffle && blockSize%x != 0) {
			panic(fmt.Sprintf("ref: %s: layout %d with X=%d, HeadDim=%d, BlockSize=%d", op, layout, x, headDim, blockSize))
		}
	default:
		panic(fmt.Sprintf("ref: %s: unknown layout %d", op, layout))
	}
	return pagedCache{keys: keys, values: values, tables: tables, layout: layout, x: x, numKVHeads: numKVHeads,
		headDim: headDim, blockSize: blockSize, maxBlocksPerSeq: maxBlocksPerSeq, numBlocks: numBlocks}
}

// rows returns the cache slots (block·BlockSize + row) of tokens 0..n-1 of
// sequence s; op names the caller in panics.
func (c *pagedCache) rows(op string, s, n int) []int {
	if n < 0 || n > c.maxBlocksPerSeq*c.blockSize {
		panic(fmt.Sprintf("ref: %s: sequence %d has %d tokens, capacity is %d", op, s, n, c.maxBlocksPerSeq*c.blockSize))
	}
	rows := make([]int, n)
	for j := range rows {
		block := int(c.tables[s*c.maxBlocksPerSeq+j/c.blockSize])
		if block < 0 || block >= c.numBlocks {
			panic(fmt.Sprintf("ref: %s: BlockTables[%d][%d]=%d, cache has %d blocks", op, s, j/c.blockSize, block, c.numBlocks))
		}
		rows[j] = block*c.blockSize + j%c.blockSize
	}
	return rows
}

// row copies element d of KV head kvHead of the token at slot into dst[d],
// from the V cache when value is set, else the K cache.
func (c *pagedCache) row(dst []float64, value bool, slot, kvHead int) {
	src := c.keys
	if value {
		src = c.values
	}
	if c.layout == LayoutFlash { // the head's elements are contiguous
		copy(dst, src[CacheIndex(LayoutFlash, value, slot, kvHead, 0, c.numKVHeads, c.headDim, c.blockSize, c.x):][:c.headDim])
		return
	}
	for d := range dst {
		dst[d] = src[CacheIndex(c.layout, value, slot, kvHead, d, c.numKVHeads, c.headDim, c.blockSize, c.x)]
	}
}

// query is one query row: its values, its KV position and its head.
type query struct {
	q    []float64
	pos  int
	head int
}

// attend writes into o the attention of q over the tokens at slots rows
// (positions first, first+1, ...), KV head kvHead, with the scores
// modified by m, and returns the natural log-sum-exp of the scores (a
// sink's logit included); o stays zero when rows is empty, and the result
// is then the sink's logit, or -Inf without sinks.
func (c *pagedCache) attend(q query, rows []int, first, kvHead int, scale float64, m *Mods, o []float64) float64 {
	sink := math.Inf(-1)
	if m.Sinks != nil {
		sink = m.Sinks[q.head]
	}
	if len(rows) == 0 {
		return sink
	}
	k := make([]float64, c.headDim)
	scores := make([]float64, len(rows))
	maxScore := sink
	for j, slot := range rows {
		c.row(k, false, slot, kvHead)
		var dot float64
		for d := range q.q {
			dot += q.q[d] * k[d]
		}
		s := scale * dot
		if m.SoftCap > 0 {
			s = m.SoftCap * math.Tanh(s/m.SoftCap)
		}
		if m.AlibiSlopes != nil {
			s += m.AlibiSlopes[q.head] * float64(first+j-q.pos)
		}
		scores[j] = s
		maxScore = math.Max(maxScore, s)
	}
	sum := math.Exp(sink - maxScore)
	v := k
	for j, slot := range rows {
		p := math.Exp(scores[j] - maxScore)
		sum += p
		c.row(v, true, slot, kvHead)
		for d := range o {
			o[d] += p * v[d]
		}
	}
	for d := range o {
		o[d] /= sum
	}
	return maxScore + math.Log(sum)
}
