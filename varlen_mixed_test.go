package pagedkv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mixedVarlen is a valid batch of decodes one-token sequences, then chunks
// sequences of chunk query tokens each, with the host's lengths.
func mixedVarlen(decodes, chunks, chunk int) VarlenArgs {
	a := goodVarlen()
	n := decodes + chunks
	a.NumSeqs = n
	a.HostCuSeqlensQ = make([]int32, n+1)
	a.HostPosOffsets = make([]int32, n)
	for i := range n {
		q := int32(1)
		if i >= decodes {
			q = int32(chunk)
		}
		a.HostCuSeqlensQ[i+1] = a.HostCuSeqlensQ[i] + q
		a.HostPosOffsets[i] = int32(a.MaxKVLen) - q
	}
	a.NumTokens = int(a.HostCuSeqlensQ[n])
	rows := int64(a.NumTokens) * int64(a.NumQHeads)
	a.Q, a.Out, a.LSE = fakeBuffer(rows*int64(a.HeadDim)*2), fakeBuffer(rows*int64(a.HeadDim)*2), fakeBuffer(rows*4)
	a.BlockTables, a.CuSeqlensQ, a.PosOffsets = fakeBuffer(int64(n*a.MaxBlocksPerSeq*4)), fakeBuffer(int64(n+1)*4), fakeBuffer(int64(n)*4)
	return a
}

// TestDecodePrefix checks when Varlen splits a mixed batch into a decode
// and a varlen: only where its leading one-token sequences are what makes it
// take the 64-row kernel, the host has the lengths, the engine gave no
// workspace and Out is token-major and contiguous.
func TestDecodePrefix(t *testing.T) {
	// GQA group 4: 960 packed rows over 42 sequences (fewer than 128 on
	// average); the two chunks alone have 400 each.
	a := mixedVarlen(40, 2, 100)
	require.NoError(t, a.Validate())
	assert.Equal(t, 40, a.decodePrefix())

	for _, c := range []struct {
		name string
		edit func(a *VarlenArgs)
	}{
		{"no host bounds", func(a *VarlenArgs) { a.HostCuSeqlensQ, a.HostPosOffsets = nil, nil }},
		{"no host offsets", func(a *VarlenArgs) { a.HostPosOffsets = nil }},
		{"workspace", func(a *VarlenArgs) { a.Workspace = fakeBuffer(1 << 20) }},
		{"head-major out", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = a.HeadDim, a.NumTokens*a.HeadDim }},
		{"padded out", func(a *VarlenArgs) { a.OutTokenStride, a.OutHeadStride = a.NumQHeads*a.HeadDim+8, a.HeadDim }},
		{"head dim 256: one kernel", func(a *VarlenArgs) { a.HeadDim = 256 }},
	} {
		b := mixedVarlen(40, 2, 100)
		c.edit(&b)
		assert.Zero(t, b.decodePrefix(), c.name)
	}
	// Token-major Out with its default strides spelled out still splits.
	b := mixedVarlen(40, 2, 100)
	b.OutTokenStride, b.OutHeadStride = b.NumQHeads*b.HeadDim, b.HeadDim
	assert.Equal(t, 40, b.decodePrefix())
	// Only decodes: all of them run as one decode, at head dim 256 too.
	only := mixedVarlen(9, 0, 0)
	require.NoError(t, only.Validate())
	assert.Equal(t, 9, only.decodePrefix())
	only.HeadDim = 256
	assert.Equal(t, 9, only.decodePrefix())
	only = mixedVarlen(9, 0, 0)
	only.HostPosOffsets = nil
	assert.Zero(t, only.decodePrefix(), "no host offsets")

	for _, c := range []struct {
		name                    string
		decodes, chunks, length int
	}{
		// Few decodes beside the chunks: the batch takes the 128-row kernel
		// anyway.
		{"few decodes", 3, 2, 100},
		// Only chunks: nothing to split.
		{"only chunks", 0, 4, 100},
		// Short chunks (verify steps of 16 tokens): the rest takes the
		// 64-row kernel too.
		{"verify steps", 40, 4, 16},
		// More decodes than a decode grid holds.
		{"decode grid", maxDecodeSeqs + 1, 600, 1000},
	} {
		b := mixedVarlen(c.decodes, c.chunks, c.length)
		assert.Zero(t, b.decodePrefix(), c.name)
	}
}

// TestMixedLengths checks the host lengths of a split: the decode's KV
// lengths (pos + 1) and the rest's bounds rebased to 0, with each part's
// longest KV, written into one buffer of n+1 values.
func TestMixedLengths(t *testing.T) {
	cu := []int32{0, 1, 2, 3, 103, 353, 354}
	pos := []int32{9, 0, 4095, 7, 100, 3}
	buf := make([]int32, len(cu))
	kv, restCu, maxKV, restMaxKV := mixedLengths(buf, cu, pos, 3)
	assert.Equal(t, []int32{10, 1, 4096}, kv)
	assert.Equal(t, []int32{0, 100, 350, 351}, restCu)
	assert.Equal(t, 4096, maxKV)
	assert.Equal(t, 350, restMaxKV, "100 + 250 over 7 + 100 and 3 + 1")
	assert.Equal(t, []int32{10, 1, 4096, 0, 100, 350, 351}, buf, "one buffer holds both")
}
