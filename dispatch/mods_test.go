package dispatch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanDecodeMods: score modifiers take the _mods kernels, never
// clusters; a window plans as a batch of window-long sequences and is never
// balanced; fp8 caches take their e4m3 twins in every layout.
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

	// fp8 caches: the e4m3 _mods twins, every layout, never clusters.
	for _, layout := range []Layout{LayoutFlash, LayoutXSplit, LayoutShuffle} {
		fp8 := base
		fp8.Mods, fp8.CacheDType, fp8.Layout = true, E4M3, layout
		p, err := PlanDecode(fp8, dev, DefaultKnobs())
		require.NoError(t, err, layout)
		assert.Equal(t, "paged_decode_f16_e4m3_hd128_g8_mods", p.Kernel, layout)
		assert.Zero(t, p.Cluster, layout)
	}
	noMods := base
	noMods.SlidingWindow = 10
	_, err = PlanDecode(noMods, dev, DefaultKnobs())
	assert.ErrorContains(t, err, "DecodeShape.SlidingWindow=10 is not allowed")
}

// TestPlanVarlenMods: score modifiers take the _mods twin of the kernel the
// shape would take (the 32-key one for a _k64 choice); a window sizes the
// splits from the KV one block reads, not MaxKVLen; fp8 caches take their
// e4m3 twins; other layouts and a window without Mods are refused.
func TestPlanVarlenMods(t *testing.T) {
	dev := varlenDev()
	fp8 := prefill(8, 2048, 2048)
	fp8.CacheDType = E4M3
	for _, s := range []VarlenShape{prefill(8, 2048, 2048), prefill(8, 16, 8192), prefill(1, 300, 300), fp8} {
		plain, err := PlanVarlen(s, dev, DefaultKnobs())
		require.NoError(t, err)
		s.Mods = true
		p, err := PlanVarlen(s, dev, DefaultKnobs())
		require.NoError(t, err)
		want, ok := VarlenModsKernel(plain.Kernel)
		require.True(t, ok, plain.Kernel)
		assert.Equal(t, want, p.Kernel)
		assert.True(t, strings.HasSuffix(p.Kernel, "_mods"), p.Kernel)
		assert.Equal(t, uint32(VarlenSharedBytes(p.Kernel)), p.SharedBytes)
		rows, keys, ok := VarlenGeometry(p.Kernel)
		require.True(t, ok)
		assert.Equal(t, p.Grid.X, uint32(VarlenGridX(s.NumSeqs, s.NumTokens, 4, rows)), "rows %d keys %d", rows, keys)
	}
	k64, _ := VarlenK64KernelName("paged_varlen_bf16_hd128")
	twin, ok := VarlenModsKernel(k64)
	assert.True(t, ok)
	assert.Equal(t, "paged_varlen_bf16_hd128_mods", twin)

	// A short query over a long cache: without a window it splits the
	// 32768 positions; with a 1024-position window each block reads about
	// 1100, and the planner splits that.
	long := prefill(2, 16, 32768)
	long.Mods = true
	full, err := PlanVarlen(long, dev, DefaultKnobs())
	require.NoError(t, err)
	long.SlidingWindow = 1024
	windowed, err := PlanVarlen(long, dev, DefaultKnobs())
	require.NoError(t, err)
	assert.Greater(t, full.Splits, windowed.Splits)
	assert.Equal(t, 6, windowed.Splits, "18 tiles of the window's span: 6 splits of 3 (cost 192+6·24+100 keys)")
	forced := knobs(func(k *Knobs) { k.ForcedSplits = 64 })
	p, err := PlanVarlen(long, dev, forced)
	require.NoError(t, err)
	assert.Equal(t, (1024+16+64+63)/64, p.Splits, "forced splits: whole 64-key tiles of the window's span")

	for _, tc := range []struct {
		name string
		edit func(*VarlenShape)
		msg  string
	}{
		{"layout", func(s *VarlenShape) { s.Layout = LayoutXSplit }, "VarlenShape.Mods with Layout=x-split is not supported"},
		{"window without mods", func(s *VarlenShape) { s.Mods = false }, "VarlenShape.SlidingWindow=1024 is not allowed; allowed: 0, or > 0 with Mods"},
	} {
		s := long
		tc.edit(&s)
		_, err := PlanVarlen(s, dev, DefaultKnobs())
		assert.ErrorIs(t, err, ErrInvalidShape, tc.name)
		assert.ErrorContains(t, err, tc.msg, tc.name)
	}
}
