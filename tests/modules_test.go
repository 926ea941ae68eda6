package tests

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
)

// TestEveryModuleLoads loads every embedded module on the device, as
// pagedkv info does, through the image PAGEDKV_LOAD_SASS picks (the
// recorded JIT code, the SASS or the PTX): each loads, or is a module
// built for a newer architecture than the device's (ErrComputeCapability).
// With PAGEDKV_LOAD_SASS=0 and an empty CUDA_CACHE_PATH it fills that JIT
// cache with the driver's code of every module (scripts/jit_harvest.py).
func TestEveryModuleLoads(t *testing.T) {
	r := open(t, config.Options{})
	loaded := 0
	for _, m := range pagedkv.Modules() {
		took, err := r.LoadModule(m)
		if errors.Is(err, pagedkv.ErrComputeCapability) {
			continue
		}
		require.NoError(t, err, "module %s", m)
		image, ok := r.ModuleImage(m)
		require.True(t, ok, "module %s: no image after loading", m)
		t.Logf("%s: %v in %v", m, image, took)
		loaded++
	}
	assert.Positive(t, loaded)
}
