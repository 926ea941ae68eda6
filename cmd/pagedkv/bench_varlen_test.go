package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
)

func TestVarlenBatch(t *testing.T) {
	c := varlenCase{runs: []varlenRun{{2, 1, 20}, {1, 3, 5}}}
	bt := c.batch()
	assert.Equal(t, []int32{1, 1, 3}, bt.qLens)
	assert.Equal(t, []int32{20, 20, 5}, bt.kvLens)
	assert.Equal(t, []int32{0, 1, 2, 5}, bt.cu)
	assert.Equal(t, []int32{19, 19, 2}, bt.pos)
}

// TestVarlenFLOPs checks the closed form against counting every (query, key)
// pair the bottom-right causal mask lets through.
func TestVarlenFLOPs(t *testing.T) {
	for _, c := range varlenCases() {
		bt := c.batch()
		if kvBytes(bt.kvLens, pagedkv.E4M3) > 64<<20 {
			continue // too many pairs to count one by one (1x16384)
		}
		var pairs float64
		for s, l := range bt.qLens {
			for i := range int(l) {
				p := int(bt.pos[s]) + i
				for k := range int(bt.kvLens[s]) {
					if k <= p && (c.mods.window == 0 || k > p-c.mods.window) {
						pairs++
					}
				}
			}
		}
		assert.Equal(t, 4*float64(c.hd())*32*pairs, varlenFLOPs(bt.qLens, bt.pos, 32, c.hd(), c.mods.window), c.shape)
	}
	// One 4096-token prefill: 4·128·32·4096·4097/2.
	assert.Equal(t, 4.0*128*32*4096*4097/2, varlenFLOPs([]int32{4096}, []int32{0}, 32, 128, 0))
	// With a 1000-token window: 1000·1001/2 pairs, then 1000 a query.
	assert.Equal(t, 4.0*128*32*(1000*1001/2+3096*1000), varlenFLOPs([]int32{4096}, []int32{0}, 32, 128, 1000))
}

func TestVarlenBytes(t *testing.T) {
	c := varlenCase{runs: []varlenRun{{8, 16, 8192}}}
	bt := c.batch()
	kv := 8 * 8192 * benchKVHeads * benchHeadDim * 2 * 2
	qo := 2 * 8 * 16 * 32 * benchHeadDim * 2
	assert.Equal(t, float64(kv+qo), varlenBytes(&bt, 32, 128, pagedkv.BF16, pagedkv.BF16, 0))
	assert.Equal(t, float64(kv/2+qo), varlenBytes(&bt, 32, 128, pagedkv.F16, pagedkv.E4M3, 0))
	// A window of 1000 covers its 16 queries' 1015 keys.
	assert.Equal(t, float64(kv*1015/8192+qo), varlenBytes(&bt, 32, 128, pagedkv.BF16, pagedkv.BF16, 1000))
}

func TestPageTables(t *testing.T) {
	lens := []int32{1, 16, 17, 0}
	perm := []int{9, 3, 7, 1, 0, 8, 2, 6, 5, 4}
	require.Equal(t, 4, pagesOf(lens))
	tables := pageTables(perm, lens, 2, 2)
	assert.Equal(t, [][]int32{{9, 0, 3, 0, 7, 1, 0, 0}, {0, 0, 8, 0, 2, 6, 0, 0}}, tables)
}
