package dispatch

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanDecodeBalancedChoice: the automatic plan is balanced for graphs, for
// eager batches without host lengths (BalanceGraphMinSeqs or more sequences,
// as graphs) and for eager batches whose host lengths are ragged; never when a knob forces
// another path, when the batch has too many sequences or the scratch limit
// is too small.
func TestPlanDecodeBalancedChoice(t *testing.T) {
	ragged := llama(128, 32768)
	ragged.HostKVLens = make([]int32, 128)
	for i := range ragged.HostKVLens {
		ragged.HostKVLens[i] = 512
	}
	ragged.HostKVLens[0] = 32768
	uniform := llama(128, 512)
	uniform.HostKVLens = make([]int32, 128)
	for i := range uniform.HostKVLens {
		uniform.HostKVLens[i] = 512
	}
	graph := llama(BalanceGraphMinSeqs, 32768)
	graph.Graph = true
	smallGraph := llama(BalanceGraphMinSeqs-1, 32768)
	smallGraph.Graph = true
	many := llama(BalanceMaxSeqs+1, 4096)
	many.Graph = true
	for _, tt := range []struct {
		name   string
		shape  DecodeShape
		k      Knobs
		reason string // "" = not balanced
	}{
		{"ragged host lengths", ragged, DefaultKnobs(), ReasonBalancedRagged},
		{"uniform host lengths", uniform, DefaultKnobs(), ""},
		{"no host lengths", llama(128, 32768), DefaultKnobs(), ReasonBalancedNoLens},
		{"no host lengths, a small batch", llama(BalanceGraphMinSeqs-1, 32768), DefaultKnobs(), ""},
		{"graph", graph, DefaultKnobs(), ReasonBalancedGraph},
		{"graph of a small batch", smallGraph, DefaultKnobs(), ""},
		{"graph of a small batch, forced on", smallGraph, knobs(func(k *Knobs) { k.Balance = SplitOn }), ReasonBalanceOn},
		{"forced on", llama(8, 2048), knobs(func(k *Knobs) { k.Balance = SplitOn }), ReasonBalanceOn},
		{"forced off", graph, knobs(func(k *Knobs) { k.Balance = SplitOff }), ""},
		{"forced splits win", ragged, knobs(func(k *Knobs) { k.ForcedSplits = 4 }), ""},
		{"PAGED_FLASH=0 wins", graph, knobs(func(k *Knobs) { k.PagedFlash = false }), ""},
		{"SPLIT_K_ATTN=0 wins", graph, knobs(func(k *Knobs) { k.SplitK = SplitOff }), ""},
		{"too many sequences", many, DefaultKnobs(), ""},
		{"scratch limit", graph, knobs(func(k *Knobs) { k.ScratchLimitBytes = 4096 }), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanDecode(tt.shape, h200(), tt.k)
			require.NoError(t, err)
			if tt.reason == "" {
				assert.False(t, p.Balanced(), "%s", p.String())
				return
			}
			require.True(t, p.Balanced(), "%s", p.String())
			assert.Equal(t, tt.reason, p.Reason)
			assert.Zero(t, p.Cluster)
			assert.True(t, BalancedItemsValid(tt.shape.NumSeqs, int(p.Grid.Y), p.BalanceWave))
			assert.Equal(t, Dim3{uint32(tt.shape.NumKVHeads), p.Grid.Y, 1}, p.Grid)
			rows := int64(p.Grid.Y) * int64(tt.shape.NumQHeads)
			work := (rows*int64(tt.shape.HeadDim+2) + 3) / 4 * 4
			floats := work + 4*int64(p.Grid.Y)
			assert.Equal(t, floats, p.ScratchFloats)
			assert.Equal(t, work, p.WorkOffset)
			assert.Zero(t, p.WorkOffset%4, "16-byte aligned work list")
			assert.GreaterOrEqual(t, p.WorkOffset, p.SumOffset+int64(p.Grid.Y)*int64(tt.shape.NumQHeads), "after the sums")
			assert.Equal(t, int64(tt.shape.NumSeqs*tt.shape.NumKVHeads), p.Counters)
			assert.Equal(t, ceilDiv(BalanceMinChunkTokens, tt.shape.BlockSize), p.BalanceMinPages)
			assert.Equal(t, p.WorkOffset*4+4*4*int64(p.Grid.Y), p.ScratchFloats*4)
		})
	}

	bad := ragged
	bad.HostKVLens = bad.HostKVLens[:3]
	_, err := PlanDecode(bad, h200(), DefaultKnobs())
	assert.ErrorContains(t, err, "HostKVLens has 3 lengths; want NumSeqs=128")
	bad = uniform
	bad.HostKVLens = append([]int32(nil), uniform.HostKVLens...)
	bad.HostKVLens[5] = 513
	_, err = PlanDecode(bad, h200(), DefaultKnobs())
	assert.ErrorContains(t, err, "HostKVLens[5]=513 is out of range")
	_, err = PlanDecode(llama(2, 64), h200(), knobs(func(k *Knobs) { k.Balance = 7 }))
	assert.ErrorContains(t, err, "Knobs.Balance")
}

// TestPlanDecodeBalancedRing pins the balanced plan's ring: the one-wave
// ring, unless the host lengths' mean is above ShallowRingMaxTokens (long
// items), which takes the deep ring; the wave is the one-wave ring's
// either way.
func TestPlanDecodeBalancedRing(t *testing.T) {
	dev := h200()
	lens := func(long, short int32) []int32 {
		l := make([]int32, 64)
		for i := range l {
			l[i] = short
		}
		l[0] = long
		return l
	}
	shortMean := llama(64, 32768)
	shortMean.HostKVLens = lens(32768, 500) // mean 1004
	longMean := llama(64, 32768)
	longMean.HostKVLens = lens(32768, 600) // mean 1103
	ps, err := PlanDecode(shortMean, dev, DefaultKnobs())
	require.NoError(t, err)
	pl, err := PlanDecode(longMean, dev, DefaultKnobs())
	require.NoError(t, err)
	require.True(t, ps.Balanced() && pl.Balanced())
	assert.Equal(t, uint32(DecodeOneWaveSharedBytes(ps.Kernel, dev.MaxSharedPerBlockOptin)), ps.SharedBytes)
	assert.Equal(t, uint32(KernelSharedBytes(pl.Kernel, dev.MaxSharedPerBlockOptin)), pl.SharedBytes)
	assert.Greater(t, pl.SharedBytes, ps.SharedBytes)
	assert.Equal(t, 132*3/8, ps.BalanceWave, "the one-wave ring's 3 blocks per SM")
	assert.Equal(t, ps.BalanceWave, pl.BalanceWave)
	// A graph plan has no host lengths: its capacity decides, the deep ring
	// above ShallowRingMaxTokens, else the one-wave ring.
	graph := llama(64, 32768)
	graph.Graph = true
	pg, err := PlanDecode(graph, dev, DefaultKnobs())
	require.NoError(t, err)
	assert.Equal(t, pl.SharedBytes, pg.SharedBytes)
	assert.Equal(t, pl.BalanceWave, pg.BalanceWave)
	short := llama(64, ShallowRingMaxTokens)
	short.Graph = true
	pg, err = PlanDecode(short, dev, DefaultKnobs())
	require.NoError(t, err)
	require.True(t, pg.Balanced())
	assert.Equal(t, ps.SharedBytes, pg.SharedBytes)
}

// partition is the work list kernels_src/decode.cuh's partition_work writes,
// computed the same way on the host: (seq, split, splits, first) per item.
func partition(lens []int32, items, wave, cap, blockSize, minPages int) [][4]int {
	pagesOf := func(l int32) int { return ceilDiv(min(max(int(l), 0), cap), blockSize) }
	total := 0
	for _, l := range lens {
		total += pagesOf(l)
	}
	splitsOf := func(p, c int) int { return min(max(ceilDiv(p, c), 1), MaxSplits) }
	c := max(minPages, ceilDiv(total, max(wave, 1)))
	if len(lens) < wave {
		c = minPages
		for {
			used := 0
			for _, l := range lens {
				used += splitsOf(pagesOf(l), c)
			}
			if used <= items {
				break
			}
			c++
		}
	}
	n := make([]int, len(lens))
	class := make([]int, len(lens))
	for s, l := range lens {
		p := pagesOf(l)
		n[s] = splitsOf(p, c)
		switch {
		case n[s] > 1:
			class[s] = 0
		case 2*p > c:
			class[s] = 1
		case 4*p > c:
			class[s] = 2
		default:
			class[s] = 3
		}
	}
	work := make([][4]int, items)
	next := 0
	for cls := range 4 {
		for s := range lens {
			if class[s] == cls {
				for z := range n[s] {
					work[next+z] = [4]int{s, z, n[s], next}
				}
				next += n[s]
			}
		}
	}
	return work
}

// TestBalancedPartitionCovers checks the partition's promise on random and
// extreme batches: every sequence's splits appear once each, in items the
// plan has, each split at most c pages, and the items of split sequences
// first.
func TestBalancedPartitionCovers(t *testing.T) {
	g := rand.New(rand.NewPCG(3, 4))
	dev := h200()
	for trial := range 300 {
		seqs := 1 + g.IntN(BalanceMaxSeqs)
		bs := 1 << g.IntN(9)
		capacity := 1 + g.IntN(40000)
		lens := make([]int32, seqs)
		for i := range lens {
			switch g.IntN(4) {
			case 0:
				lens[i] = int32(capacity)
			case 1:
				lens[i] = int32(g.IntN(3))
			default:
				lens[i] = int32(g.IntN(capacity + 1))
			}
		}
		shape := DecodeShape{NumSeqs: seqs, NumQHeads: 8, NumKVHeads: 1 + g.IntN(8), HeadDim: 128, BlockSize: bs,
			MaxKVLen: capacity, MaxBlocksPerSeq: ceilDiv(capacity, bs), DType: F16, CacheDType: F16, Graph: true}
		shape.NumQHeads = shape.NumKVHeads * (1 + g.IntN(4))
		p, err := PlanDecode(shape, dev, knobs(func(k *Knobs) { k.Balance = SplitOn }))
		require.NoError(t, err)
		require.True(t, p.Balanced(), "trial %d: %s", trial, p.String())
		work := partition(lens, int(p.Grid.Y), p.BalanceWave, shape.MaxBlocksPerSeq*bs, bs, p.BalanceMinPages)
		used := 0
		for _, w := range work {
			if w[2] > 0 {
				used++
			}
		}
		require.True(t, BalancedItemsValid(seqs, int(p.Grid.Y), p.BalanceWave), "trial %d", trial)
		if seqs < p.BalanceWave {
			require.Equal(t, p.BalanceWave, int(p.Grid.Y), "trial %d: a batch of fewer sequences than a wave runs in one wave", trial)
		}
		seen := make([][]bool, seqs)
		usedDone := false
		for y, w := range work {
			if w[2] == 0 {
				usedDone = true
				continue
			}
			require.False(t, usedDone, "trial %d: item %d used after an unused one", trial, y)
			s, z, n, first := w[0], w[1], w[2], w[3]
			require.LessOrEqual(t, n, p.Splits, "trial %d: more splits than the plan's Splits", trial)
			if seen[s] == nil {
				seen[s] = make([]bool, n)
			}
			require.Len(t, seen[s], n)
			require.False(t, seen[s][z], "trial %d: seq %d split %d twice", trial, s, z)
			seen[s][z] = true
			require.Equal(t, y, first+z, "trial %d: items of a sequence are consecutive from first", trial)
		}
		for s := range seen {
			require.NotNil(t, seen[s], "trial %d: seq %d (len %d) has no item", trial, s, lens[s])
			for z, ok := range seen[s] {
				require.True(t, ok, "trial %d: seq %d split %d missing", trial, s, z)
			}
		}
	}
}

func TestBalancedItemsValid(t *testing.T) {
	for _, tt := range []struct {
		seqs, items, wave int
		ok                bool
	}{
		{10, 49, 49, true}, {10, 48, 49, false}, {10, 60, 49, true},
		{49, 98, 49, true}, {49, 97, 49, false}, {128, 177, 49, true},
		{1, 1, 0, false}, {5, 4, 1, false}, {5, 6, 1, true},
	} {
		assert.Equal(t, tt.ok, BalancedItemsValid(tt.seqs, tt.items, tt.wave), "%+v", tt)
	}
}

// TestPlanDecodeExtremeLengths: lengths near the int limits are errors or
// plans, never overflows.
func TestPlanDecodeExtremeLengths(t *testing.T) {
	assert.Equal(t, 1, ceilDiv(1, 16))
	assert.Equal(t, 0, ceilDiv(0, 16))
	assert.Equal(t, math.MaxInt/16+1, ceilDiv(math.MaxInt, 16))
	s := llama(1, 512)
	s.MaxKVLen = math.MaxInt
	_, err := PlanDecode(s, h200(), DefaultKnobs())
	assert.ErrorContains(t, err, "DecodeShape.MaxKVLen=9223372036854775807 is out of range; allowed: 0..2147483647")
	s.MaxKVLen = math.MaxInt32
	_, err = PlanDecode(s, h200(), DefaultKnobs())
	assert.ErrorContains(t, err, "holds fewer than MaxKVLen")
	s.MaxBlocksPerSeq = math.MaxInt / 16
	_, err = PlanDecode(s, h200(), DefaultKnobs())
	assert.ErrorContains(t, err, "DecodeShape.MaxBlocksPerSeq=576460752303423487 is out of range")
	s.MaxBlocksPerSeq = MaxSeqTokens/16 + 1
	s.MaxKVLen = 512
	_, err = PlanDecode(s, h200(), DefaultKnobs())
	assert.ErrorContains(t, err, "DecodeShape.MaxBlocksPerSeq=67108865 is out of range; allowed: 1..67108864")
	s.MaxBlocksPerSeq = MaxSeqTokens / 16
	s.MaxKVLen = MaxSeqTokens
	p, err := PlanDecode(s, h200(), DefaultKnobs())
	require.NoError(t, err)
	assert.LessOrEqual(t, p.Splits, MaxSplits, "%s", p.String())
	// A batch whose pages could pass the partition's int32 sum is not balanced.
	s = llama(40, MaxSeqTokens)
	s.BlockSize, s.MaxBlocksPerSeq, s.Graph = 1, MaxSeqTokens, true
	p, err = PlanDecode(s, h200(), DefaultKnobs())
	require.NoError(t, err)
	assert.False(t, p.Balanced(), "%s", p.String())
}

// TestPlanDecodeBalancedScratchLimit: a balanced plan whose scratch exceeds
// the limit by a byte falls back to the usual plan; at the limit it stays.
func TestPlanDecodeBalancedScratchLimit(t *testing.T) {
	s := llama(64, 8192)
	s.Graph = true
	p, err := PlanDecode(s, h200(), DefaultKnobs())
	require.NoError(t, err)
	require.True(t, p.Balanced())
	at, err := PlanDecode(s, h200(), knobs(func(k *Knobs) { k.ScratchLimitBytes = p.ScratchFloats * 4 }))
	require.NoError(t, err)
	assert.True(t, at.Balanced())
	below, err := PlanDecode(s, h200(), knobs(func(k *Knobs) { k.ScratchLimitBytes = p.ScratchFloats*4 - 1 }))
	require.NoError(t, err)
	assert.False(t, below.Balanced(), "%s", below.String())
	assert.LessOrEqual(t, below.ScratchFloats*4, p.ScratchFloats*4-1)
}

// TestDecodeKey checks DecodeKey's promise: shapes with equal keys get
// equal plans, over random batches whose host lengths differ (some ragged,
// some not) and random graph flags, on both devices.
func TestDecodeKey(t *testing.T) {
	g := rand.New(rand.NewPCG(15, 15))
	draw := func(s DecodeShape) []int32 {
		lens := make([]int32, s.NumSeqs)
		long := g.IntN(2) == 0
		for i := range lens {
			lens[i] = int32(g.IntN(s.MaxKVLen + 1))
			if long {
				lens[i] = int32(s.MaxKVLen - g.IntN(s.MaxKVLen/8+1))
			}
		}
		return lens
	}
	var equal, ragged int
	for range 2000 {
		s := llama(1+g.IntN(64), 1+g.IntN(16384))
		s.Graph = g.IntN(4) == 0
		if g.IntN(2) == 0 {
			s.CacheDType = E4M3
		}
		a, b := s, s
		a.HostKVLens, b.HostKVLens = draw(s), draw(s)
		// The layout picks the fp8 kernels (DecodeLayoutKernel).
		a.Layout, b.Layout = Layout(g.IntN(4)), Layout(g.IntN(4))
		if a.Key() != b.Key() {
			continue
		}
		equal++
		if a.Key().Ragged {
			ragged++
		}
		for _, dev := range []DeviceFacts{hopper, h200()} {
			pa, errA := PlanDecode(a, dev, DefaultKnobs())
			pb, errB := PlanDecode(b, dev, DefaultKnobs())
			require.NoError(t, errA)
			require.NoError(t, errB)
			require.Equal(t, pa, pb, "shapes %+v and %+v share a key", a, b)
		}
	}
	assert.Greater(t, equal, 200, "shape pairs with equal keys")
	assert.Greater(t, ragged, 20, "ragged pairs with equal keys")
	// The lengths' count and raggedness are part of the key.
	s := llama(8, 4096)
	uniform, lopsided := s, s
	uniform.HostKVLens = []int32{4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096}
	lopsided.HostKVLens = []int32{4096, 1, 1, 1, 1, 1, 1, 1}
	assert.NotEqual(t, uniform.Key(), lopsided.Key())
	assert.NotEqual(t, s.Key(), uniform.Key())
	// So is the layout: a plan cached for one would name the wrong fp8
	// kernel for another (TestDecodeLayoutsAgree in tests/ checks it on a GPU).
	shuffle := s
	shuffle.Layout = LayoutShuffle
	assert.NotEqual(t, s.Key(), shuffle.Key())
}

// TestDecodeKeyCoversShape changes each field of a DecodeShape in turn
// and checks that the key changes too, so that a field added to the shape
// (as Layout was) cannot be left out of the key: the root's plan cache
// would hand a plan for one shape to another. HostKVLens counts by its
// length.
func TestDecodeKeyCoversShape(t *testing.T) {
	base := llama(8, 4096)
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		s := base
		v := reflect.ValueOf(&s).Elem().Field(i)
		switch v.Kind() {
		case reflect.Int:
			v.SetInt(v.Int() + 1)
		case reflect.Uint8:
			v.SetUint(v.Uint() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Slice:
			v.Set(reflect.ValueOf([]int32{1, 2, 3}))
		default:
			t.Fatalf("DecodeShape.%s is a %v: teach this test to change it", f.Name, v.Kind())
		}
		assert.NotEqual(t, base.Key(), s.Key(), "DecodeShape.%s is not in DecodeKey", f.Name)
	}
}
