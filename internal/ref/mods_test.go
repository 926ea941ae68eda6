package ref

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestModsHandComputed checks each modifier on a query over three keys
// whose scores are 0, 1 and 2 (q = 1, k = j, Scale 1) and values 10·j.
func TestModsHandComputed(t *testing.T) {
	k := [][]float64{{0}, {1}, {2}}
	v := [][]float64{{0}, {10}, {20}}
	softmax := func(scores []float64, sink float64) (out, lse float64) {
		var sum, acc float64
		for j, s := range scores {
			sum += math.Exp(s)
			acc += math.Exp(s) * v[j][0]
		}
		sum += math.Exp(sink)
		return acc / sum, math.Log(sum)
	}
	tests := []struct {
		name   string
		mods   Mods
		scores []float64 // of keys 0, 1, 2 (NaN: not visible)
		sink   float64
	}{
		{"none", Mods{}, []float64{0, 1, 2}, math.Inf(-1)},
		{"window 2 drops key 0", Mods{SlidingWindow: 2}, []float64{math.NaN(), 1, 2}, math.Inf(-1)},
		{"window 1 keeps the query's own key", Mods{SlidingWindow: 1}, []float64{math.NaN(), math.NaN(), 2}, math.Inf(-1)},
		{"window longer than the sequence", Mods{SlidingWindow: 100}, []float64{0, 1, 2}, math.Inf(-1)},
		{"soft-cap", Mods{SoftCap: 1.5}, []float64{0, 1.5 * math.Tanh(1/1.5), 1.5 * math.Tanh(2/1.5)}, math.Inf(-1)},
		{"sink", Mods{Sinks: []float64{0.5}}, []float64{0, 1, 2}, 0.5},
		{"ALiBi: the query at position 2", Mods{AlibiSlopes: []float64{0.25}}, []float64{-0.5, 0.75, 2}, math.Inf(-1)},
		{"all", Mods{SlidingWindow: 2, SoftCap: 1.5, Sinks: []float64{-1}, AlibiSlopes: []float64{0.25}},
			[]float64{math.NaN(), 1.5*math.Tanh(1/1.5) - 0.25, 1.5 * math.Tanh(2/1.5)}, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := oneBlockDecode([]float64{1}, k, v, 1)
			a.Mods = tc.mods
			var scores []float64
			var kv []float64
			for j, s := range tc.scores {
				if !math.IsNaN(s) {
					scores = append(scores, s)
					kv = append(kv, v[j][0])
				}
			}
			var sum, acc float64
			for j, s := range scores {
				sum += math.Exp(s)
				acc += math.Exp(s) * kv[j]
			}
			sum += math.Exp(tc.sink)
			out, lse := PagedDecode(a)
			assert.InDelta(t, acc/sum, out[0], 1e-12)
			assert.InDelta(t, math.Log(sum), lse[0], 1e-12)
			if tc.name == "none" {
				o, l := softmax(tc.scores, tc.sink)
				assert.InDelta(t, o, out[0], 1e-12)
				assert.InDelta(t, l, lse[0], 1e-12)
			}
		})
	}
}

// TestModsEmptySequence: a sequence with no keys gets a zero row and, with
// a sink, the sink's logit as its log-sum-exp.
func TestModsEmptySequence(t *testing.T) {
	a := oneBlockDecode([]float64{1}, [][]float64{{1}}, [][]float64{{1}}, 1)
	a.KVLens[0] = 0
	out, lse := PagedDecode(a)
	assert.Equal(t, []float64{0}, out)
	assert.True(t, math.IsInf(lse[0], -1))
	a.Mods.Sinks = []float64{0.75}
	out, lse = PagedDecode(a)
	assert.Equal(t, []float64{0}, out)
	assert.Equal(t, 0.75, lse[0])
}

// TestModsVarlenMatchesDecode: a varlen's last query token of each
// sequence, causal, is the decode of that sequence, with every modifier;
// and a windowed query sees exactly the window's keys.
func TestModsVarlenMatchesDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const heads, kvHeads, d, bs, maxBlocks = 4, 2, 8, 4, 6
	qLens := []int32{3, 1, 5}
	pos := []int32{9, 0, 14}
	mods := Mods{SlidingWindow: 6, SoftCap: 2, Sinks: normals(rng, heads), AlibiSlopes: []float64{0.5, 0.25, 0.125, 0.0625}}
	numSeqs := len(qLens)
	tables := make([]int32, numSeqs*maxBlocks)
	for i := range tables {
		tables[i] = int32(rng.IntN(numSeqs * maxBlocks))
	}
	cu := []int32{0}
	for _, n := range qLens {
		cu = append(cu, cu[len(cu)-1]+n)
	}
	total := int(cu[numSeqs])
	kc := normals(rng, numSeqs*maxBlocks*bs*kvHeads*d)
	vc := normals(rng, len(kc))
	vq := normals(rng, total*heads*d)
	out, lse := PagedVarlen(Varlen{Q: vq, KCache: kc, VCache: vc, BlockTables: tables, CuSeqlensQ: cu, PosOffsets: pos,
		NumSeqs: numSeqs, NumQHeads: heads, NumKVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxBlocksPerSeq: maxBlocks,
		Causal: true, Scale: 0.3, Mods: mods})
	dq := make([]float64, 0, numSeqs*heads*d)
	lens := make([]int32, numSeqs)
	for s := range numSeqs {
		last := int(cu[s+1]) - 1
		dq = append(dq, vq[last*heads*d:][:heads*d]...)
		lens[s] = pos[s] + qLens[s]
	}
	dout, dlse := PagedDecode(Decode{Q: dq, KCache: kc, VCache: vc, BlockTables: tables, KVLens: lens,
		NumSeqs: numSeqs, NumQHeads: heads, NumKVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxBlocksPerSeq: maxBlocks,
		Scale: 0.3, Mods: mods})
	for s := range numSeqs {
		last := int(cu[s+1]) - 1
		assert.InDeltaSlice(t, dout[s*heads*d:][:heads*d], out[last*heads*d:][:heads*d], 1e-12, "sequence %d", s)
		assert.InDeltaSlice(t, dlse[s*heads:][:heads], lse[last*heads:][:heads], 1e-12, "sequence %d", s)
	}
	require.Panics(t, func() {
		PagedVarlen(Varlen{CuSeqlensQ: []int32{0, 1}, PosOffsets: []int32{0}, NumSeqs: 1, NumQHeads: 1, NumKVHeads: 1,
			BlockSize: 1, Mods: Mods{SlidingWindow: 2}})
	}, "a window without Causal")
}
