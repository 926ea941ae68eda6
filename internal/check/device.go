package check

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// Arena owns the device memory of one problem.
type Arena struct {
	r    *pagedkv.Runtime
	mems []*pagedkv.Memory
}

// NewArena returns an empty arena on r.
func NewArena(r *pagedkv.Runtime) *Arena { return &Arena{r: r} }

// Alloc allocates bytes (at least 16) owned by the arena.
func (a *Arena) Alloc(bytes int64) (pagedkv.Buffer, error) {
	m, err := a.r.Alloc(max(bytes, 16))
	if err != nil {
		return pagedkv.Buffer{}, err
	}
	a.mems = append(a.mems, m)
	return m.Buffer, nil
}

// Upload allocates a device copy of data.
func Upload[T any](a *Arena, s *pagedkv.Stream, data []T, elemBytes int) (pagedkv.Buffer, error) {
	b, err := a.Alloc(int64(len(data) * elemBytes))
	if err != nil {
		return b, err
	}
	return b, pagedkv.Upload(s, b, data)
}

// Free frees everything the arena allocated.
func (a *Arena) Free() error {
	var first error
	for _, m := range a.mems {
		if err := m.Free(); err != nil && first == nil {
			first = err
		}
	}
	a.mems = nil
	return first
}

// RandomTensor draws n normal values with standard deviation sd, encodes them
// in dtype d and returns the raw bytes and the values the kernel will see.
func RandomTensor(g *rand.Rand, d pagedkv.DType, n int, sd float64) ([]byte, []float64) {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(g.NormFloat64() * sd)
	}
	raw := ref.EncodeSlice(ref.DType(d), vals)
	return raw, ref.DecodeSlice(ref.DType(d), raw)
}

// NaNPattern is a 32-bit word that reads as NaN in dtype d (f32 for 0).
func NaNPattern(d pagedkv.DType) uint32 {
	switch d {
	case pagedkv.F16:
		return 0x7E007E00
	case pagedkv.BF16:
		return 0x7FC07FC0
	case pagedkv.E4M3:
		return 0x7F7F7F7F
	}
	return math.Float32bits(float32(math.NaN()))
}

// Tolerance is the relative L2 error allowed against float64 for outputs of dtype d.
func Tolerance(d pagedkv.DType) float64 {
	if d == pagedkv.BF16 {
		return 1.6e-2
	}
	return 2e-3
}

// FirstDiff returns the first index where a and b differ, or -1.
func FirstDiff(a, b []byte) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	if len(b) > len(a) {
		return len(a)
	}
	return -1
}

func errorf(format string, a ...any) error { return fmt.Errorf("check: "+format, a...) }

// Setter assigns a series of (buffer, error) results, keeping the first
// error: set.To(&args.Q)(Upload(...)).
type Setter struct{ Err error }

// To returns the assignment to dst.
func (s *Setter) To(dst *pagedkv.Buffer) func(pagedkv.Buffer, error) {
	return func(b pagedkv.Buffer, err error) {
		if s.Err == nil {
			*dst, s.Err = b, err
		}
	}
}

// FreeOnError frees arena when an assignment failed and returns the first
// error: the last step of every problem constructor.
func (s *Setter) FreeOnError(arena *Arena) error {
	if s.Err != nil {
		_ = arena.Free()
	}
	return s.Err
}

// RandomCaches returns a K and a V cache of bytes random bytes each, so that
// tests also see which bytes a kernel must leave alone.
func RandomCaches(g *rand.Rand, bytes int) (k, v []byte) {
	k, v = make([]byte, bytes), make([]byte, bytes)
	for i := range k {
		k[i], v[i] = byte(g.Uint32()), byte(g.Uint32())
	}
	return k, v
}

// RandomSlots returns n slots taken in order from perm (distinct when perm
// is), about one in seven replaced by -1 (skip), and -1 past the end of perm.
func RandomSlots(g *rand.Rand, n int, perm []int) []int64 {
	slots := make([]int64, n)
	for i := range slots {
		slots[i] = -1
		if i < len(perm) && g.IntN(7) != 0 {
			slots[i] = int64(perm[i])
		}
	}
	return slots
}

// PageRunSlots returns n slots mapped the way an engine maps a batch of
// prefills: the tokens form sequences of random lengths (some of 1..8
// tokens), each filling fresh random pages in order, slot = page·blockSize +
// position % blockSize, from a start position in its first page that is 0,
// random, or congruent to the sequence's first token index modulo 8 (so that
// its 8-token groups are page-aligned runs). About one slot in 40 is -1
// (skip), breaking a run. Slots are distinct; tokens left when the numBlocks
// pages run out get -1.
func PageRunSlots(g *rand.Rand, n, numBlocks, blockSize int) []int64 {
	slots := make([]int64, n)
	pages := g.Perm(numBlocks)
	for t := 0; t < n; {
		length := 1 + g.IntN(n-t)
		if g.IntN(4) == 0 {
			length = 1 + g.IntN(min(n-t, 8))
		}
		start := 0
		switch g.IntN(4) {
		case 1:
			start = g.IntN(blockSize)
		case 2:
			if blockSize >= 8 {
				start = t%8 + 8*g.IntN(blockSize/8)
			}
		case 3: // 16-token runs aligned with the kernels' group pairs
			if blockSize >= 16 {
				start = t%16 + 16*g.IntN(blockSize/16)
			}
		}
		need := (start + length + blockSize - 1) / blockSize
		if need > len(pages) { // use what is left from the start of a page
			start, length = 0, min(length, len(pages)*blockSize)
			need = (length + blockSize - 1) / blockSize
		}
		if length == 0 {
			for ; t < n; t++ {
				slots[t] = -1
			}
			break
		}
		for i := range length {
			pos := start + i
			slots[t+i] = int64(pages[pos/blockSize]*blockSize + pos%blockSize)
			if g.IntN(40) == 0 {
				slots[t+i] = -1
			}
		}
		pages = pages[need:]
		t += length
	}
	return slots
}

// PageRemap returns a remap table over numBlocks pages of blockSize slots
// that moves whole pages (keeping each slot's offset, so page runs stay
// runs), except that one page in 8 is also shuffled within itself and about
// one entry in 50 is -1: runs that a remap breaks.
func PageRemap(g *rand.Rand, numBlocks, blockSize int) []int64 {
	remap := make([]int64, numBlocks*blockSize)
	offsets := make([]int, blockSize)
	for p, q := range g.Perm(numBlocks) {
		for o := range offsets {
			offsets[o] = o
		}
		if g.IntN(8) == 0 {
			g.Shuffle(blockSize, func(i, j int) { offsets[i], offsets[j] = offsets[j], offsets[i] })
		}
		for o, to := range offsets {
			remap[p*blockSize+o] = int64(q*blockSize + to)
			if g.IntN(50) == 0 {
				remap[p*blockSize+o] = -1
			}
		}
	}
	return remap
}

// RandomRemap returns a sliding-window remap table over numSlots slots: a
// random permutation with about one entry in nine replaced by -1.
func RandomRemap(g *rand.Rand, numSlots int) []int64 {
	remap := make([]int64, numSlots)
	for i, q := range g.Perm(numSlots) {
		remap[i] = int64(q)
		if g.IntN(9) == 0 {
			remap[i] = -1
		}
	}
	return remap
}

// attnOutputs are an attention problem's outputs on the device: Out of
// dtype and, unless zero, LSE (f32), both one row per (query, head).
type attnOutputs struct {
	out, lse pagedkv.Buffer
	dtype    pagedkv.DType
}

// poison fills the outputs with NaN on s.
func (o attnOutputs) poison(s *pagedkv.Stream) error {
	if err := s.Fill32(o.out, NaNPattern(o.dtype)); err != nil {
		return err
	}
	return s.Fill32(o.lse, NaNPattern(0))
}

// run poisons the outputs, runs op on s and fetches rows rows.
func (o attnOutputs) run(s *pagedkv.Stream, op func() error, rows, headDim int) ([]float64, []float32, error) {
	if err := o.poison(s); err != nil {
		return nil, nil, err
	}
	if err := op(); err != nil {
		return nil, nil, err
	}
	return o.fetch(s, rows, headDim)
}

// fetch downloads the first rows rows of Out and LSE after the work on s,
// and fails on a recorded fault. lse is nil when there is no LSE.
func (o attnOutputs) fetch(s *pagedkv.Stream, rows, headDim int) ([]float64, []float32, error) {
	raw := make([]byte, rows*headDim*o.dtype.Size())
	var lse []float32
	if rows > 0 {
		if err := pagedkv.Download(s, raw, o.out); err != nil {
			return nil, nil, err
		}
		if !o.lse.IsZero() {
			lse = make([]float32, rows)
			if err := pagedkv.Download(s, lse, o.lse); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := s.Fault(); err != nil {
		return nil, nil, err
	}
	return ref.DecodeSlice(ref.DType(o.dtype), raw), lse, nil
}

// pagedCaches is a random K and V cache pair as an attention problem draws
// it: the raw bytes to upload and the values the kernels see (scales
// applied), with the per-tensor scales of an fp8 cache (0 otherwise).
type pagedCaches struct {
	kRaw, vRaw     []byte
	k, v           []float64
	kScale, vScale float32
}

// randomCaches draws elems normal values for each of K and V in cache
// dtype d; for e4m3 also a scale per tensor in [0.1, 1.1), applied to the
// values.
func randomCaches(g *rand.Rand, d pagedkv.DType, elems int) pagedCaches {
	var c pagedCaches
	c.kRaw, c.k = RandomTensor(g, d, elems, 1)
	c.vRaw, c.v = RandomTensor(g, d, elems, 1)
	if d == pagedkv.E4M3 {
		c.kScale, c.vScale = 0.1+g.Float32(), 0.1+g.Float32()
		for i := range c.k {
			c.k[i] *= float64(c.kScale)
			c.v[i] *= float64(c.vScale)
		}
	}
	return c
}
