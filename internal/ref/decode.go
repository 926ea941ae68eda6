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
	// KeyCache and ValueCache are [NumBlocks, BlockSize, NumKVHeads, HeadDim].
	KeyCache, ValueCache []float64
	// BlockTables is [NumSeqs, MaxBlocksPerSeq]: entry (s, p) is the
	// physical block holding tokens p*BlockSize … (p+1)*BlockSize-1 of s.
	BlockTables []int32
	// KVLens[s] is the number of cached tokens of sequence s.
	KVLens []int32

	NumSeqs, NumQHeads, NumKVHeads, HeadDim, BlockSize, MaxBlocksPerSeq int

	// Scale multiplies every q·k score (usually 1/sqrt(HeadDim)).
	Scale float64
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
	numBlocks := len(a.KeyCache) / (a.BlockSize * rowElems)
	if len(a.ValueCache) != len(a.KeyCache) {
		panic(fmt.Sprintf("ref: PagedDecode: KeyCache has %d elements, ValueCache %d", len(a.KeyCache), len(a.ValueCache)))
	}
	group := a.NumQHeads / a.NumKVHeads

	out = make([]float64, a.NumSeqs*a.NumQHeads*a.HeadDim)
	lse = make([]float64, a.NumSeqs*a.NumQHeads)
	c := pagedCache{keys: a.KeyCache, values: a.ValueCache, tables: a.BlockTables, numKVHeads: a.NumKVHeads,
		headDim: a.HeadDim, blockSize: a.BlockSize, maxBlocksPerSeq: a.MaxBlocksPerSeq, numBlocks: numBlocks}
	for s := range a.NumSeqs {
		rows := c.rows("PagedDecode", s, int(a.KVLens[s]))
		for h := range a.NumQHeads {
			i := s*a.NumQHeads + h
			lse[i] = c.attend(a.Q[i*a.HeadDim:][:a.HeadDim], rows, h/group, a.Scale, out[i*a.HeadDim:][:a.HeadDim])
		}
	}
	return out, lse
}

// pagedCache is a paged K/V cache as the reference ops read it.
type pagedCache struct {
	keys, values                                    []float64
	tables                                          []int32
	numKVHeads, headDim, blockSize, maxBlocksPerSeq int
	numBlocks                                       int
}

// rows returns the element offsets, in the caches, of the rows of tokens
// 0..n-1 of sequence s; op names the caller in panics.
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
		rows[j] = (block*c.blockSize + j%c.blockSize) * c.numKVHeads * c.headDim
	}
	return rows
}

// attend writes into o the attention of q over the tokens at rows, KV head
// kvHead, and returns the natural log-sum-exp of the scaled scores; o stays
// zero and the result is -Inf when rows is empty.
func (c *pagedCache) attend(q []float64, rows []int, kvHead int, scale float64, o []float64) float64 {
	if len(rows) == 0 {
		return math.Inf(-1)
	}
	kvOff := kvHead * c.headDim
	scores := make([]float64, len(rows))
	maxScore := math.Inf(-1)
	for j, row := range rows {
		k := c.keys[row+kvOff:][:c.headDim]
		var dot float64
		for d := range q {
			dot += q[d] * k[d]
		}
		scores[j] = scale * dot
		maxScore = math.Max(maxScore, scores[j])
	}
	var sum float64
	for j, row := range rows {
		p := math.Exp(scores[j] - maxScore)
		sum += p
		v := c.values[row+kvOff:][:c.headDim]
		for d := range o {
			o[d] += p * v[d]
		}
	}
	for d := range o {
		o[d] /= sum
	}
	return maxScore + math.Log(sum)
}
