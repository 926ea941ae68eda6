package dispatch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanDecodeMods: score modifiers take the _mods kernels, never
// clusters; a window plans as a batch of window-long sequences and is never
// balanced; fp8 caches are refused.
func TestPlanDecodeMods(t *testing.T) {
	dev := h200()
	base := DecodeShape{NumSeqs: 8, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, MaxKVLen: 32768,
		MaxBlocksPerSeq: 2048, DType: F16, CacheDType: F16}
	for _, group := range []int{4, 16} {
		s := base
		s.NumKVHeads = s.NumQHeads / group
		s.Mods = true
		p, err := PlanDecode(s, dev, DefaultKnobs())
		require.NoError(t, err)
		assert.True(t, strings.HasSuffix(p.Kernel, "_mods"), p.Kernel)
		assert.Zero(t, p.Cluster)
		twin, ok := DecodeModsKernel(strings.TrimSuffix(p.Kernel, "_mods"))
		assert.True(t, ok)
		assert.Equal(t, p.Kernel, twin)
	}
	windowed := base
	windowed.Mods, windowed.SlidingWindow = true, 4096
	windowed.HostKVLens = make([]int32, base.NumSeqs)
	for i := range windowed.HostKVLens {
		windowed.HostKVLens[i] = int32(100 + 4000*i) // ragged: would be balanced
	}
	windowed.HostKVLens[0] = int32(base.MaxKVLen)
	got, err := PlanDecode(windowed, dev, DefaultKnobs())
	require.NoError(t, err)
	assert.False(t, got.Balanced())
	short := windowed
	short.MaxKVLen, short.HostKVLens = 4096+16, nil
	want, err := PlanDecode(short, dev, DefaultKnobs())
	require.NoError(t, err)
	assert.Equal(t, want, got)

	fp8 := base
	fp8.Mods, fp8.CacheDType = true, E4M3
	_, err = PlanDecode(fp8, dev, DefaultKnobs())
	assert.ErrorIs(t, err, ErrInvalidShape)
	assert.ErrorContains(t, err, "DecodeShape.Mods with CacheDType=e4m3 is not supported")
	noMods := base
	noMods.SlidingWindow = 10
	_, err = PlanDecode(noMods, dev, DefaultKnobs())
	assert.ErrorContains(t, err, "DecodeShape.SlidingWindow=10 is not allowed")
}
