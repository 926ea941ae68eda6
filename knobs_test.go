package pagedkv

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
)

// TestConfigLimitsMatchPlanner ties config's limits to the planner's.
func TestConfigLimitsMatchPlanner(t *testing.T) {
	assert.Equal(t, dispatch.MaxSplits, config.MaxPagedFlashSplits)
}

// TestKnobsFrom checks that every planner knob follows its config key.
func TestKnobsFrom(t *testing.T) {
	c := config.Default()
	assert.Equal(t, dispatch.DefaultKnobs().Balance, knobsFrom(c).Balance)
	for mode, want := range map[config.SplitMode]dispatch.SplitMode{
		config.SplitAuto: dispatch.SplitAuto, config.SplitOff: dispatch.SplitOff, config.SplitOn: dispatch.SplitOn,
	} {
		c.DecodeBalance, c.SplitKAttn = mode, mode
		k := knobsFrom(c)
		assert.Equal(t, want, k.Balance, "DECODE_BALANCE=%s", mode)
		assert.Equal(t, want, varlenKnobsFrom(c).SplitK, "SPLIT_K_ATTN=%s", mode)
		// SPLIT_K_ATTN governs varlen only; decode follows PAGED_FLASH.
		assert.Equal(t, dispatch.SplitAuto, k.SplitK, "decode with SPLIT_K_ATTN=%s", mode)
	}
	c.PagedFlashSplits, c.PagedFlash, c.DecodeClusters, c.DecodeNarrow, c.ScratchLimitBytes = 12, false, false, false, 4096
	k := knobsFrom(c)
	assert.Equal(t, 12, k.ForcedSplits)
	assert.False(t, k.PagedFlash)
	assert.False(t, k.Clusters)
	assert.False(t, k.Narrow)
	assert.Equal(t, int64(4096), k.ScratchLimitBytes)
	v := varlenKnobsFrom(c)
	assert.Equal(t, 0, v.ForcedSplits, "PAGED_FLASH_SPLITS governs decode only")
	assert.True(t, v.Clusters, "DECODE_CLUSTERS governs decode only")
	c.VarlenClusters = false
	assert.False(t, varlenKnobsFrom(c).Clusters)
	assert.True(t, knobsFrom(config.Default()).Clusters, "VARLEN_CLUSTERS governs varlen only")
	assert.Equal(t, int64(4096), v.ScratchLimitBytes)
}

// TestSplitModesMirror ties config.SplitMode (the knob as users spell it;
// config may not import dispatch) to dispatch.SplitMode (what the planner
// obeys): every config mode maps to the dispatch mode of the same meaning,
// for both knobs that take one, and no mode on either side is left over.
func TestSplitModesMirror(t *testing.T) {
	mirror := []struct {
		c config.SplitMode
		d dispatch.SplitMode
	}{
		{config.SplitAuto, dispatch.SplitAuto},
		{config.SplitOff, dispatch.SplitOff},
		{config.SplitOn, dispatch.SplitOn},
	}
	names := map[config.SplitMode]string{config.SplitAuto: "auto", config.SplitOff: "off", config.SplitOn: "on"}
	seen := map[dispatch.SplitMode]bool{}
	for _, m := range mirror {
		assert.True(t, m.c.Valid(), "config.SplitMode %q", m.c)
		assert.Equal(t, names[m.c], m.d.String(), "config.SplitMode %q", m.c)
		c := config.Default()
		c.SplitKAttn, c.DecodeBalance = m.c, m.c
		assert.Equal(t, m.d, varlenKnobsFrom(c).SplitK, "SPLIT_K_ATTN=%s", m.c)
		assert.Equal(t, m.d, knobsFrom(c).Balance, "DECODE_BALANCE=%s", m.c)
		assert.False(t, seen[m.d], "dispatch.SplitMode %s mirrors two config modes", m.d)
		seen[m.d] = true
	}
	// Every dispatch.SplitMode (one whose String is a name, not a number)
	// has a config mode.
	for n := range 256 {
		d := dispatch.SplitMode(n)
		if d.String() != fmt.Sprintf("SplitMode(%d)", n) {
			assert.True(t, seen[d], "dispatch.SplitMode %s has no config.SplitMode", d)
		}
	}
}
