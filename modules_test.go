package pagedkv

import (
	"github.com/pagedkv/pagedkv/config"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/ptx"
)

// fakeRuntime is a Runtime that never opened a device: enough for what
// LoadModule checks before it calls the driver.
func fakeRuntime(t *testing.T, major, minor int) *Runtime {
	t.Helper()
	return &Runtime{
		info:    DeviceInfo{Ordinal: 1, Name: "Fake GPU", ComputeMajor: major, ComputeMinor: minor},
		funcs:   map[string]driver.Function{},
		modules: map[string]moduleLoad{},
	}
}

func TestCheckComputeCapability(t *testing.T) {
	tests := []struct {
		major, minor int
		need         int
		want         string
	}{
		{8, 0, 80, ""},
		{8, 6, 80, ""},
		{9, 0, 90, ""},
		{10, 0, 90, ""},
		{12, 0, 90, ""},
		{8, 9, 90, "pagedkv: module needs a newer GPU: decode_f16_sm90 needs compute capability 9.0; device 1 (Fake GPU) has 8.9"},
		{8, 0, 90, "pagedkv: module needs a newer GPU: decode_f16_sm90 needs compute capability 9.0; device 1 (Fake GPU) has 8.0"},
		{9, 0, 100, "pagedkv: module needs a newer GPU: decode_f16_sm90 needs compute capability 10.0; device 1 (Fake GPU) has 9.0"},
	}
	for _, tt := range tests {
		d := fakeRuntime(t, tt.major, tt.minor).info
		err := checkComputeCapability("decode_f16_sm90", tt.need, d)
		if tt.want == "" {
			assert.NoError(t, err, "%d.%d needing %d", tt.major, tt.minor, tt.need)
			continue
		}
		require.Error(t, err)
		assert.Equal(t, tt.want, err.Error())
		assert.ErrorIs(t, err, ErrComputeCapability)
	}
}

// TestCanLoadEmbedded checks canLoad against every embedded module's
// recorded capability, on a device exactly at it and one just below.
func TestCanLoadEmbedded(t *testing.T) {
	for _, mod := range ptx.Modules() {
		need := ptx.ModuleComputeCapability(mod)
		assert.True(t, fakeRuntime(t, need/10, need%10).canLoad(mod), mod)
		below := fakeRuntime(t, need/10-1, 9)
		assert.False(t, below.canLoad(mod), mod)
	}
}

// TestLoadModuleGatedBeforeDriver loads a compute_80 module on a fake 7.5
// device: the error names the module and both capabilities and comes before
// any driver call (this Runtime has no context to make one with).
func TestLoadModuleGatedBeforeDriver(t *testing.T) {
	r := fakeRuntime(t, 7, 5)
	took, err := r.LoadModule(ptx.ModuleDecodeF16)
	require.ErrorIs(t, err, ErrComputeCapability)
	assert.Zero(t, took)
	assert.Equal(t, "pagedkv: module needs a newer GPU: decode_f16 needs compute capability 8.0; device 1 (Fake GPU) has 7.5", err.Error())
	assert.Empty(t, r.modules)
}

// TestModuleFactsAddTo checks how a loaded module's measured facts join the
// device facts: into a new value, where they add to the facts of modules
// loaded before (missing maps are made), while the value plans are being
// made from is left as it was.
func TestModuleFactsAddTo(t *testing.T) {
	old := &dispatch.DeviceFacts{Name: "Fake GPU", SMs: 132, Clusters: true, Occupancy: map[string]int{"a": 1, "b": 2}}
	decode := moduleFacts{
		occupancy: map[string]int{"b": 3, "c": 0},
		shallow:   map[string]int{"c": 4},
		clusters:  map[string][]int{"c": {0, 5}},
	}
	got := decode.addTo(old)
	assert.Equal(t, &dispatch.DeviceFacts{
		Name: "Fake GPU", SMs: 132, Clusters: true,
		Occupancy:        map[string]int{"a": 1, "b": 3, "c": 0},
		ShallowOccupancy: map[string]int{"c": 4},
		ActiveClusters:   map[string][]int{"c": {0, 5}},
	}, got)
	assert.Equal(t, &dispatch.DeviceFacts{Name: "Fake GPU", SMs: 132, Clusters: true, Occupancy: map[string]int{"a": 1, "b": 2}}, old)

	rope := moduleFacts{occupancy: map[string]int{"d": 6}, shallow: map[string]int{}, clusters: map[string][]int{}}
	next := rope.addTo(got)
	assert.Equal(t, map[string]int{"a": 1, "b": 3, "c": 0, "d": 6}, next.Occupancy)
	assert.Equal(t, map[string]int{"c": 4}, next.ShallowOccupancy)
	assert.Equal(t, map[string][]int{"c": {0, 5}}, next.ActiveClusters)
	assert.Equal(t, map[string]int{"a": 1, "b": 3, "c": 0}, got.Occupancy)
}

// TestSASSChoice checks which machine code LoadModule would try: none with
// LOAD_SASS off; with it on, the embedded cubin of the highest architecture
// the device runs, and none for a device the cubins do not cover (its PTX
// loads instead); with auto (the default), the same except for the modules
// whose SASS is slower than the JIT's code there.
func TestSASSChoice(t *testing.T) {
	h200 := fakeRuntime(t, 9, 0)
	h200.cfg.LoadSASS = config.SplitOff
	_, _, ok := h200.sass("decode_f16")
	assert.False(t, ok, "LOAD_SASS off")
	h200.cfg.LoadSASS = config.SplitOn
	image, arch, ok := h200.sass("decode_f16")
	require.True(t, ok)
	assert.Equal(t, 90, arch)
	assert.Equal(t, "\x7fELF", string(image[:4]))
	_, _, ok = h200.sass("varlen_bf16")
	assert.True(t, ok, "LOAD_SASS on takes even the slower SASS")
	h200.cfg.LoadSASS = config.SplitAuto
	_, _, ok = h200.sass("decode_f16")
	assert.True(t, ok, "auto: decode_f16's sm_90 SASS is as fast as the JIT's")
	for _, m := range []string{"varlen_bf16", "varlen_f16_e4m3", "decode_bf16_e4m3", "decode_f16_e4m3_sm90"} {
		_, _, ok = h200.sass(m)
		assert.False(t, ok, "auto: %s loads its PTX on sm_90", m)
	}
	ada := fakeRuntime(t, 8, 9)
	ada.cfg.LoadSASS = config.SplitAuto
	_, arch, ok = ada.sass("varlen_bf16")
	require.True(t, ok, "auto: nothing measured slower on sm_89")
	assert.Equal(t, 89, arch)
	_, _, ok = ada.sass("decode_f16_sm90")
	assert.False(t, ok, "a compute_90 module has no SASS an sm_89 device runs")
	blackwell := fakeRuntime(t, 10, 0)
	blackwell.cfg.LoadSASS = config.SplitOn
	_, _, ok = blackwell.sass("cache")
	assert.False(t, ok, "no sm_100 cubin: the driver JITs the PTX")
}
