package ref

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomVarlen draws a batch of seqs sequences with random query and KV
// lengths (q_len 1 among them), a shuffled page table and random data.
func randomVarlen(g *rand.Rand, seqs int, causal bool) Varlen {
	a := Varlen{NumSeqs: seqs, NumQHeads: 6, NumKVHeads: 2, HeadDim: 8, BlockSize: 4, MaxBlocksPerSeq: 10, Causal: causal, Scale: 0.3}
	a.CuSeqlensQ = make([]int32, seqs+1)
	a.PosOffsets = make([]int32, seqs)
	capacity := a.MaxBlocksPerSeq * a.BlockSize
	for s := range seqs {
		qLen := 1 + g.IntN(6)
		if s == 0 {
			qLen = 1 // a decode in the mixed batch
		}
		a.PosOffsets[s] = int32(g.IntN(capacity - qLen + 1))
		a.CuSeqlensQ[s+1] = a.CuSeqlensQ[s] + int32(qLen)
	}
	numBlocks := seqs*a.MaxBlocksPerSeq + 2
	a.BlockTables = make([]int32, seqs*a.MaxBlocksPerSeq)
	for i, b := range g.Perm(numBlocks)[:len(a.BlockTables)] {
		a.BlockTables[i] = int32(b)
	}
	fill := func(n int) []float64 { return normals(g, n) }
	a.Q = fill(int(a.CuSeqlensQ[seqs]) * a.NumQHeads * a.HeadDim)
	a.KCache = fill(numBlocks * a.BlockSize * a.NumKVHeads * a.HeadDim)
	a.VCache = fill(len(a.KCache))
	return a
}

// decodeOf returns the decode of query token t (of sequence s) of a over
// its first kvLen KV tokens.
func decodeOf(a Varlen, s, t, kvLen int) Decode {
	return Decode{
		Q: a.Q[t*a.NumQHeads*a.HeadDim:][:a.NumQHeads*a.HeadDim], KCache: a.KCache, VCache: a.VCache,
		BlockTables: a.BlockTables[s*a.MaxBlocksPerSeq:][:a.MaxBlocksPerSeq], KVLens: []int32{int32(kvLen)},
		NumSeqs: 1, NumQHeads: a.NumQHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: a.BlockSize, MaxBlocksPerSeq: a.MaxBlocksPerSeq, Scale: a.Scale,
	}
}

// TestPagedVarlenIsDecodePerQuery: every query row of a varlen batch is the
// decode of that query over the KV it may see: positions ≤ pos + i when
// causal, the whole sequence otherwise.
func TestPagedVarlenIsDecodePerQuery(t *testing.T) {
	g := rand.New(rand.NewPCG(13, 1))
	for _, causal := range []bool{true, false} {
		for range 20 {
			a := randomVarlen(g, 1+g.IntN(5), causal)
			out, lse := PagedVarlen(a)
			row := a.NumQHeads * a.HeadDim
			for s := range a.NumSeqs {
				first, end := int(a.CuSeqlensQ[s]), int(a.CuSeqlensQ[s+1])
				pos := int(a.PosOffsets[s])
				for tok := first; tok < end; tok++ {
					kvLen := pos + end - first
					if causal {
						kvLen = pos + tok - first + 1
					}
					wantOut, wantLSE := PagedDecode(decodeOf(a, s, tok, kvLen))
					assert.InDeltaSlice(t, wantOut, out[tok*row:][:row], 1e-12, "causal=%v seq %d token %d", causal, s, tok)
					assert.InDeltaSlice(t, wantLSE, lse[tok*a.NumQHeads:][:a.NumQHeads], 1e-12)
				}
			}
		}
	}
}

// TestPagedVarlenCausalIgnoresTheFuture: changing K and V after a query's
// diagonal leaves its row as it was (causal), and changes it (non-causal).
func TestPagedVarlenCausalIgnoresTheFuture(t *testing.T) {
	g := rand.New(rand.NewPCG(14, 2))
	a := randomVarlen(g, 1, true)
	a.CuSeqlensQ, a.PosOffsets = []int32{0, 5}, []int32{7}
	a.Q = a.Q[:0]
	for range 5 * a.NumQHeads * a.HeadDim {
		a.Q = append(a.Q, g.NormFloat64())
	}
	before, _ := PagedVarlen(a)
	// Token 10 (query 3's diagonal is position 10): rewrite position 11.
	block, rowInBlock := int(a.BlockTables[11/a.BlockSize]), 11%a.BlockSize
	rowElems := a.NumKVHeads * a.HeadDim
	off := (block*a.BlockSize + rowInBlock) * rowElems
	for i := range rowElems {
		a.KCache[off+i] += 3
		a.VCache[off+i] -= 2
	}
	after, _ := PagedVarlen(a)
	row := a.NumQHeads * a.HeadDim
	for q := range 5 {
		if 7+q < 11 {
			assert.Equal(t, before[q*row:][:row], after[q*row:][:row], "query %d sees positions ≤ %d", q, 7+q)
		} else {
			assert.NotEqual(t, before[q*row:][:row], after[q*row:][:row], "query %d sees position 11", q)
		}
	}
	a.Causal = false
	nc, _ := PagedVarlen(a)
	assert.NotEqual(t, after[:row], nc[:row], "non-causal query 0 sees the whole sequence")
}

func TestPagedVarlenEmptyAndPanics(t *testing.T) {
	g := rand.New(rand.NewPCG(15, 3))
	a := randomVarlen(g, 2, true)
	a.CuSeqlensQ = []int32{0, 0, a.CuSeqlensQ[2] - a.CuSeqlensQ[1]}
	a.PosOffsets[0] = 0
	out, lse := PagedVarlen(a) // a sequence without query tokens
	require.Len(t, lse, int(a.CuSeqlensQ[2])*a.NumQHeads)
	require.Len(t, out, len(lse)*a.HeadDim)
	for _, x := range lse {
		assert.False(t, math.IsInf(x, 0) || math.IsNaN(x))
	}

	bad := a
	bad.PosOffsets = []int32{-1, 0}
	assert.PanicsWithValue(t, "ref: PagedVarlen: sequence 0 has CuSeqlensQ 0..0 and PosOffsets -1", func() { PagedVarlen(bad) })
	bad = a
	bad.CuSeqlensQ = []int32{0, 3, 1}
	assert.PanicsWithValue(t, "ref: PagedVarlen: sequence 1 has CuSeqlensQ 3..1 and PosOffsets "+strconv.Itoa(int(a.PosOffsets[1])), func() { PagedVarlen(bad) })
	bad = a
	bad.PosOffsets = []int32{0, int32(a.MaxBlocksPerSeq * a.BlockSize)}
	assert.Panics(t, func() { PagedVarlen(bad) }, "KV beyond the table")
	bad = a
	bad.NumQHeads = 5
	assert.Panics(t, func() { PagedVarlen(bad) })
}
