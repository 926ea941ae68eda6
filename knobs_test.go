package pagedkv

import (
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
		assert.Equal(t, want, k.SplitK, "SPLIT_K_ATTN=%s", mode)
	}
	c.PagedFlashSplits, c.PagedFlash, c.DecodeClusters, c.DecodeNarrow, c.ScratchLimitBytes = 12, false, false, false, 4096
	k := knobsFrom(c)
	assert.Equal(t, 12, k.ForcedSplits)
	assert.False(t, k.PagedFlash)
	assert.False(t, k.Clusters)
	assert.False(t, k.Narrow)
	assert.Equal(t, int64(4096), k.ScratchLimitBytes)
}
