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

// TestModuleRunsOn checks ModuleRunsOn against every embedded module's
// manifest record, on the devices pagedkv supports.
func TestModuleRunsOn(t *testing.T) {
	m, err := ReadManifest()
	require.NoError(t, err)
	for _, mod := range append(m.Modules, ModuleInfo{Name: "no_such_module"}) {
		for _, cc := range []int{75, 80, 86, 89, 90, 100, 103, 120} {
			wantOK, wantReason, err := mod.RunsOn(cc)
			require.NoError(t, err)
			ok, reason := ModuleRunsOn(mod.Name, cc)
			assert.Equal(t, wantOK, ok, "%s on %d", mod.Name, cc)
			assert.Equal(t, wantReason, reason, "%s on %d", mod.Name, cc)
		}
	}
	ok, reason := ModuleRunsOn(ModuleDecodeF16Sm90, 89)
	assert.False(t, ok)
	assert.Equal(t, "needs compute capability 9.0 or newer, device is 8.9", reason)
	assert.False(t, ModuleArchSpecific(ModuleDecodeF16Sm90))
	assert.False(t, ModuleArchSpecific("no_such_module"))
}
