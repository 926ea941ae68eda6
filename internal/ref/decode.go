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
	for s := range a.NumSeqs {
		kvLen := int(a.KVLens[s])
		if kvLen < 0 || kvLen > a.MaxBlocksPerSeq*a.BlockSize {
			panic(fmt.Sprintf("ref: PagedDecode: KVLens[%d]=%d, capacity is %d",
				s, kvLen, a.MaxBlocksPerSeq*a.BlockSize))
		}
		// rows[j] is the element offset of token j's row in the caches.
		rows := make([]int, kvLen)
		for j := range rows {
			block := int(a.BlockTables[s*a.MaxBlocksPerSeq+j/a.BlockSize])
			if block < 0 || block >= numBlocks {
				panic(fmt.Sprintf("ref: PagedDecode: BlockTables[%d][%d]=%d, cache has %d blocks",
					s, j/a.BlockSize, block, numBlocks))
			}
			rows[j] = (block*a.BlockSize + j%a.BlockSize) * rowElems
		}

		scores := make([]float64, kvLen)
		for h := range a.NumQHeads {
			q := a.Q[(s*a.NumQHeads+h)*a.HeadDim:][:a.HeadDim]
			o := out[(s*a.NumQHeads+h)*a.HeadDim:][:a.HeadDim]
			kvOff := (h / group) * a.HeadDim
			if kvLen == 0 {
				lse[s*a.NumQHeads+h] = math.Inf(-1)
				continue
			}
			maxScore := math.Inf(-1)
			for j, row := range rows {
				k := a.KeyCache[row+kvOff:][:a.HeadDim]
				var dot float64
				for d := range q {
					dot += q[d] * k[d]
				}
				scores[j] = a.Scale * dot
				maxScore = math.Max(maxScore, scores[j])
			}
			var sum float64
			for j, row := range rows {
				p := math.Exp(scores[j] - maxScore)
				sum += p
				v := a.ValueCache[row+kvOff:][:a.HeadDim]
				for d := range o {
					o[d] += p * v[d]
				}
			}
			for d := range o {
				o[d] /= sum
			}
			lse[s*a.NumQHeads+h] = maxScore + math.Log(sum)
		}
	}
	return out, lse
}
