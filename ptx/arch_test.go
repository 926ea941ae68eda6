package ptx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

func TestModuleComputeCapabilityDefault(t *testing.T) {
	cc, err := ptxfile.ModuleInfo{}.ComputeCapability()
	require.NoError(t, err)
	assert.Equal(t, cc, defaultComputeCapability, "defaultComputeCapability must match ptxfile.DefaultArch")
	assert.Equal(t, defaultComputeCapability, ModuleComputeCapability(ModuleDecodeF16))
	assert.Equal(t, defaultComputeCapability, ModuleComputeCapability("no_such_module"))
}
