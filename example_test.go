package pagedkv_test

import (
	"errors"
	"fmt"

	"github.com/pagedkv/pagedkv"
)

// Example is the README's quick start: open a runtime, write one token per
// sequence into a paged f16 cache and decode. Without a GPU it stops at Open.
// `go test` compiles it, and TestReadmeGoBlocksAreExamples checks that the
// README shows this body verbatim, so the README's code stays current.
func Example() {
	const (
		seqs, qHeads, kvHeads, headDim = 4, 32, 8, 128
		blockSize, maxBlocks           = 16, 64
		numBlocks                      = seqs * maxBlocks
	)
	rt, err := pagedkv.Open(pagedkv.Options{Device: 0})
	if errors.Is(err, pagedkv.ErrNoDriver) || errors.Is(err, pagedkv.ErrNoDevice) {
		fmt.Println("no GPU")
		return
	}
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	s := rt.Stream() // or rt.NewStream(): one per concurrent caller

	// A Memory frees its device memory once it is unreachable: hold each one
	// until the work that uses it is done.
	var held []*pagedkv.Memory
	defer func() {
		for _, m := range held {
			_ = m.Free()
		}
	}()
	alloc := func(bytes int64) pagedkv.Buffer {
		m, err := rt.Alloc(bytes)
		if err != nil {
			panic(err)
		}
		held = append(held, m)
		return m.Buffer
	}
	cacheBytes := int64(numBlocks * blockSize * kvHeads * headDim * 2)
	kc, vc := alloc(cacheBytes), alloc(cacheBytes)
	// Earlier positions hold the sequences' K/V from their earlier steps
	// (Append or RopeCache wrote them); here they are zero.
	for _, c := range []pagedkv.Buffer{kc, vc} {
		if err := s.Fill(c, 0); err != nil {
			panic(err)
		}
	}
	k, v := alloc(seqs*kvHeads*headDim*2), alloc(seqs*kvHeads*headDim*2)
	q, out := alloc(seqs*qHeads*headDim*2), alloc(seqs*qHeads*headDim*2)
	// Real code fills k, v and q from the model with pagedkv.Upload
	// (pagedkv.F16FromFloat32 converts float32 values).

	// Sequence i owns blocks i·maxBlocks…; lens count its new token, which
	// goes to position lens[i]−1.
	tables := make([]int32, seqs*maxBlocks)
	for i := range tables {
		tables[i] = int32(i)
	}
	lens := []int32{1, 17, 300, 1000}
	slots := make([]int64, seqs)
	for i, n := range lens {
		slots[i] = int64(i*maxBlocks*blockSize) + int64(n-1)
	}
	tablesBuf, lensBuf, slotsBuf := alloc(int64(len(tables)*4)), alloc(seqs*4), alloc(seqs*8)
	for _, err := range []error{
		pagedkv.Upload(s, tablesBuf, tables), pagedkv.Upload(s, lensBuf, lens), pagedkv.Upload(s, slotsBuf, slots),
	} {
		if err != nil {
			panic(err)
		}
	}

	err = rt.Append(s, &pagedkv.AppendArgs{
		K: k, V: v, KCache: kc, VCache: vc, SlotMapping: slotsBuf,
		NumTokens: seqs, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize, NumBlocks: numBlocks,
		DType: pagedkv.F16, CacheDType: pagedkv.F16,
	})
	if err != nil {
		panic(err)
	}
	err = rt.Decode(s, &pagedkv.DecodeArgs{
		Q: q, KCache: kc, VCache: vc, BlockTables: tablesBuf, KVLens: lensBuf, Out: out,
		NumSeqs: seqs, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize,
		NumBlocks: numBlocks, MaxBlocksPerSeq: maxBlocks, MaxKVLen: 1000,
		HostKVLens: lens, // optional: the planner balances a ragged batch, runs a uniform one plainly
		DType:      pagedkv.F16, CacheDType: pagedkv.F16,
	})
	if err != nil {
		panic(err)
	}
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	fmt.Println("decoded")
}
