package ref

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oneBlockDecode is a single sequence and a single KV head whose tokens all
// sit in block 0, with K and V rows given per token.
func oneBlockDecode(q []float64, k, v [][]float64, scale float64) Decode {
	d := len(q)
	a := Decode{
		Q:           q,
		BlockTables: []int32{0},
		KVLens:      []int32{int32(len(k))},
		NumSeqs:     1, NumQHeads: 1, NumKVHeads: 1, HeadDim: d,
		BlockSize: max(len(k), 1), MaxBlocksPerSeq: 1,
		Scale: scale,
	}
	a.KCache = make([]float64, a.BlockSize*d)
	a.VCache = make([]float64, a.BlockSize*d)
	for j := range k {
		copy(a.KCache[j*d:], k[j])
		copy(a.VCache[j*d:], v[j])
	}
	return a
}

func TestPagedDecodeHandComputed(t *testing.T) {
	tests := []struct {
		name    string
		a       Decode
		wantOut []float64
		wantLSE float64
	}{
		{
			name: "one token: out is v, lse is the score",
			a: oneBlockDecode([]float64{1, 2},
				[][]float64{{3, 4}}, [][]float64{{5, -6}}, 0.5),
			wantOut: []float64{5, -6},
			wantLSE: 5.5,
		},
		{
			name: "equal scores average",
			a: oneBlockDecode([]float64{1, 0},
				[][]float64{{2, 7}, {2, -3}}, [][]float64{{1, 10}, {3, -2}}, 1),
			wantOut: []float64{2, 4},
			wantLSE: 2 + math.Ln2,
		},
		{
			name: "weights one quarter and three quarters",
			a: oneBlockDecode([]float64{1},
				[][]float64{{0}, {math.Log(3)}}, [][]float64{{4}, {8}}, 1),
			wantOut: []float64{7},
			wantLSE: math.Log(4),
		},
		{
			name: "large equal scores stay finite",
			a: oneBlockDecode([]float64{1000},
				[][]float64{{1}, {1}}, [][]float64{{-1}, {3}}, 1),
			wantOut: []float64{1},
			wantLSE: 1000 + math.Ln2,
		},
		{
			name:    "kv_len 0: zeros and -Inf",
			a:       oneBlockDecode([]float64{1, 2, 3}, nil, nil, 1),
			wantOut: []float64{0, 0, 0},
			wantLSE: math.Inf(-1),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, lse := PagedDecode(tc.a)
			require.Len(t, lse, 1)
			assert.InDeltaSlice(t, tc.wantOut, out, 1e-12)
			if math.IsInf(tc.wantLSE, 0) {
				assert.Equal(t, tc.wantLSE, lse[0])
			} else {
				assert.InDelta(t, tc.wantLSE, lse[0], 1e-12)
			}
		})
	}
}

func TestPagedDecodeGQA(t *testing.T) {
	// 4 query heads share 2 KV heads: heads 0,1 read KV head 0; 2,3 read 1.
	// One token per sequence, so each output is its KV head's v row.
	a := Decode{
		Q:      []float64{1, 2, 3, 4, 5, 6, 7, 8},
		KCache: []float64{1, 1, 2, 2},
		// Block 0, row 0: KV head 0 then KV head 1.
		VCache:      []float64{10, 20, 30, 40},
		BlockTables: []int32{0},
		KVLens:      []int32{1},
		NumSeqs:     1, NumQHeads: 4, NumKVHeads: 2, HeadDim: 2,
		BlockSize: 1, MaxBlocksPerSeq: 1,
		Scale: 1,
	}
	out, lse := PagedDecode(a)
	assert.Equal(t, []float64{10, 20, 10, 20, 30, 40, 30, 40}, out)
	// Score of head h is q_h · k_{h/2}.
	assert.Equal(t, []float64{3, 7, 22, 30}, lse)
}

// naiveDecode computes attention for one (sequence, head) from logically
// ordered K and V rows, without the max shift (inputs are small).
func naiveDecode(q []float64, k, v [][]float64, scale float64) ([]float64, float64) {
	out := make([]float64, len(q))
	var sum float64
	for j := range k {
		var dot float64
		for d := range q {
			dot += q[d] * k[j][d]
		}
		w := math.Exp(scale * dot)
		sum += w
		for d := range out {
			out[d] += w * v[j][d]
		}
	}
	for d := range out {
		out[d] /= sum
	}
	return out, math.Log(sum)
}

func TestPagedDecodePageTablePermutation(t *testing.T) {
	const (
		numSeqs, numQHeads, numKVHeads, headDim = 4, 8, 2, 16
		blockSize, maxBlocks                    = 4, 4
		numBlocks                               = numSeqs*maxBlocks + 3 // spare blocks hold garbage
	)
	kvLens := []int32{1, 4, 13, 16}
	rng := rand.New(rand.NewPCG(7, 8))
	random := func(n int) []float64 { return normals(rng, n) }
	rowElems := numKVHeads * headDim
	q := random(numSeqs * numQHeads * headDim)
	// logical[s][j] is the K (V) row of token j of sequence s.
	logicalK := make([][][]float64, numSeqs)
	logicalV := make([][][]float64, numSeqs)
	for s := range numSeqs {
		for range maxBlocks * blockSize {
			logicalK[s] = append(logicalK[s], random(rowElems))
			logicalV[s] = append(logicalV[s], random(rowElems))
		}
	}
	// layout places each sequence's pages at physical[s*maxBlocks+p].
	layout := func(physical []int) Decode {
		a := Decode{
			Q:           q,
			KCache:      random(numBlocks * blockSize * rowElems),
			VCache:      random(numBlocks * blockSize * rowElems),
			BlockTables: make([]int32, numSeqs*maxBlocks),
			KVLens:      kvLens,
			NumSeqs:     numSeqs, NumQHeads: numQHeads, NumKVHeads: numKVHeads, HeadDim: headDim,
			BlockSize: blockSize, MaxBlocksPerSeq: maxBlocks,
			Scale: 1 / math.Sqrt(headDim),
		}
		for s := range numSeqs {
			for p := range maxBlocks {
				block := physical[s*maxBlocks+p]
				a.BlockTables[s*maxBlocks+p] = int32(block)
				for r := range blockSize {
					at := (block*blockSize + r) * rowElems
					copy(a.KCache[at:], logicalK[s][p*blockSize+r])
					copy(a.VCache[at:], logicalV[s][p*blockSize+r])
				}
			}
		}
		return a
	}

	contiguous := make([]int, numBlocks)
	for i := range contiguous {
		contiguous[i] = i
	}
	wantOut, wantLSE := PagedDecode(layout(contiguous))
	gotOut, gotLSE := PagedDecode(layout(rng.Perm(numBlocks)))
	// Same values in the same logical order: bit-identical.
	assert.Equal(t, wantOut, gotOut)
	assert.Equal(t, wantLSE, gotLSE)

	for s := range numSeqs {
		for h := range numQHeads {
			kvh := h / (numQHeads / numKVHeads)
			var k, v [][]float64
			for j := range kvLens[s] {
				k = append(k, logicalK[s][j][kvh*headDim:][:headDim])
				v = append(v, logicalV[s][j][kvh*headDim:][:headDim])
			}
			out, lse := naiveDecode(q[(s*numQHeads+h)*headDim:][:headDim], k, v, 1/math.Sqrt(headDim))
			assert.InDeltaSlice(t, out, gotOut[(s*numQHeads+h)*headDim:][:headDim], 1e-12, "seq %d head %d", s, h)
			assert.InDelta(t, lse, gotLSE[s*numQHeads+h], 1e-12, "seq %d head %d", s, h)
		}
	}
}

func TestPagedDecodePanics(t *testing.T) {
	valid := func() Decode {
		return oneBlockDecode([]float64{1, 2}, [][]float64{{3, 4}, {5, 6}}, [][]float64{{1, 1}, {2, 2}}, 1)
	}
	require.NotPanics(t, func() { PagedDecode(valid()) })
	tests := []struct {
		name   string
		mutate func(a *Decode)
	}{
		{"q heads not a multiple of kv heads", func(a *Decode) { a.NumQHeads, a.NumKVHeads = 3, 2 }},
		{"block id past the cache", func(a *Decode) { a.BlockTables[0] = 1 }},
		{"negative block id", func(a *Decode) { a.BlockTables[0] = -1 }},
		{"kv length past capacity", func(a *Decode) { a.KVLens[0] = 3 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := valid()
			tc.mutate(&a)
			assert.Panics(t, func() { PagedDecode(a) })
		})
	}
}

// relayout returns the flash-layout cache flash ([blocks, blockSize,
// kvHeads, headDim]) in layout l with its x (value: the V cache).
func relayout(flash []float64, l Layout, value bool, kvHeads, headDim, blockSize, x int) []float64 {
	out := make([]float64, len(flash))
	for i := range out {
		out[i] = math.NaN() // every element must be placed
	}
	for slot := range len(flash) / (kvHeads * headDim) {
		for h := range kvHeads {
			for d := range headDim {
				out[CacheIndex(l, value, slot, h, d, kvHeads, headDim, blockSize, x)] = flash[(slot*kvHeads+h)*headDim+d]
			}
		}
	}
	return out
}

// TestPagedAttentionLayouts checks that decode and varlen read the same
// tokens the same way in every layout: a cache moved element by element
// into the x-split and shuffle layouts (CacheIndex) gives bit-identical
// outputs, for x = 8 (16-bit caches) and 16 (fp8).
func TestPagedAttentionLayouts(t *testing.T) {
	const numQHeads, numKVHeads, headDim, blockSize, numBlocks, maxBlocks = 8, 2, 32, 16, 9, 4
	rng := rand.New(rand.NewPCG(21, 22))
	random := func(n int) []float64 { return normals(rng, n) }
	kc := random(numBlocks * blockSize * numKVHeads * headDim)
	vc := random(len(kc))
	tables := make([]int32, 2*maxBlocks)
	for i, b := range rng.Perm(numBlocks)[:len(tables)] {
		tables[i] = int32(b)
	}
	dec := Decode{Q: random(2 * numQHeads * headDim), KCache: kc, VCache: vc, BlockTables: tables,
		KVLens: []int32{37, 64}, NumSeqs: 2, NumQHeads: numQHeads, NumKVHeads: numKVHeads, HeadDim: headDim,
		BlockSize: blockSize, MaxBlocksPerSeq: maxBlocks, Scale: 0.2}
	vl := Varlen{Q: random(7 * numQHeads * headDim), KCache: kc, VCache: vc, BlockTables: tables,
		CuSeqlensQ: []int32{0, 5, 7}, PosOffsets: []int32{20, 57}, NumSeqs: 2, NumQHeads: numQHeads,
		NumKVHeads: numKVHeads, HeadDim: headDim, BlockSize: blockSize, MaxBlocksPerSeq: maxBlocks, Causal: true, Scale: 0.2}
	wantDec, wantDecLSE := PagedDecode(dec)
	wantVl, wantVlLSE := PagedVarlen(vl)
	for _, l := range []Layout{LayoutXSplit, LayoutShuffle, LayoutHND} {
		for _, x := range []int{8, 16} {
			d, v := dec, vl
			d.KCache = relayout(kc, l, false, numKVHeads, headDim, blockSize, x)
			d.VCache = relayout(vc, l, true, numKVHeads, headDim, blockSize, x)
			d.Layout, d.X = l, x
			v.KCache, v.VCache, v.Layout, v.X = d.KCache, d.VCache, l, x
			out, lse := PagedDecode(d)
			assert.Equal(t, wantDec, out, "decode, layout %d, x %d", l, x)
			assert.Equal(t, wantDecLSE, lse, "decode, layout %d, x %d", l, x)
			out, lse = PagedVarlen(v)
			assert.Equal(t, wantVl, out, "varlen, layout %d, x %d", l, x)
			assert.Equal(t, wantVlLSE, lse, "varlen, layout %d, x %d", l, x)
			// The flash layout's reading of the same bytes is another cache.
			d.Layout = LayoutFlash
			out, _ = PagedDecode(d)
			assert.NotEqual(t, wantDec, out, "layout %d, x %d read as flash", l, x)
		}
	}
	// An x that does not divide the head dim (or, for shuffle, the block size) panics.
	bad := dec
	bad.Layout, bad.X = LayoutXSplit, 12
	assert.PanicsWithValue(t, "ref: PagedDecode: layout 1 with X=12, HeadDim=32, BlockSize=16", func() { PagedDecode(bad) })
	bad.Layout, bad.X = LayoutShuffle, 32
	assert.PanicsWithValue(t, "ref: PagedDecode: layout 2 with X=32, HeadDim=32, BlockSize=16", func() { PagedDecode(bad) })
	bad.Layout = Layout(7)
	assert.PanicsWithValue(t, "ref: PagedDecode: unknown layout 7", func() { PagedDecode(bad) })
}

// normals returns n standard normal values drawn from rng.
func normals(rng *rand.Rand, n int) []float64 {
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = rng.NormFloat64()
	}
	return vals
}
