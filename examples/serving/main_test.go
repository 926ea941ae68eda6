package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/internal/ref"
)

// TestAttention64MatchesReference: the example's own float64 check agrees
// with the library's reference (an identity block table over the
// request's tokens), so its verdicts mean what the tests' do.
func TestAttention64MatchesReference(t *testing.T) {
	g := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 17, 300} {
		q := make([]float32, qHeads*headDim)
		k, v := make([]float32, n*kvHeads*headDim), make([]float32, n*kvHeads*headDim)
		for _, s := range [][]float32{q, k, v} {
			for i := range s {
				s[i] = float32(2*g.Float64() - 1)
			}
		}
		blocks := (n + blockSize - 1) / blockSize
		table := make([]int32, blocks)
		for i := range table {
			table[i] = int32(i)
		}
		widen := func(s []float32, size int) []float64 {
			out := make([]float64, size)
			for i, x := range s {
				out[i] = float64(x)
			}
			return out
		}
		cache := blocks * blockSize * kvHeads * headDim
		want, _ := ref.PagedDecode(ref.Decode{
			Q: widen(q, len(q)), KCache: widen(k, cache), VCache: widen(v, cache), BlockTables: table,
			KVLens: []int32{int32(n)}, NumSeqs: 1, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim,
			BlockSize: blockSize, MaxBlocksPerSeq: blocks, Scale: 1 / math.Sqrt(headDim),
		})
		require.Less(t, ref.RelL2(attention64(q, k, v, n), want), 1e-12, "n=%d", n)
	}
}
