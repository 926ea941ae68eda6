package pagedkv

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/ptx"
	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// fakeRuntime is a Runtime that never opened a device: enough for what
// LoadModule checks before it calls the driver.
func fakeRuntime(t *testing.T, major, minor int) *Runtime {
	t.Helper()
	return &Runtime{
		info:    DeviceInfo{Ordinal: 1, Name: "Fake GPU", ComputeMajor: major, ComputeMinor: minor},
		funcs:   map[string]driver.Function{},
		modules: map[string]loadedModule{},
	}
}

func TestCheckComputeCapability(t *testing.T) {
	// runsOn is ptx.ModuleRunsOn over a compute_90 module and a compute_90a
	// (arch-specific) one, which the embedded PTX need not have.
	runsOn := func(module string, cc int) (bool, string) {
		return ptxfile.RunsOn(90, module == "decode_f16_sm90a", cc)
	}
	tests := []struct {
		module       string
		major, minor int
		want         string
	}{
		{"decode_f16_sm90", 9, 0, ""},
		{"decode_f16_sm90", 10, 0, ""},
		{"decode_f16_sm90", 12, 0, ""},
		{"decode_f16_sm90", 8, 9, "pagedkv: module not built for this GPU: decode_f16_sm90 needs compute capability 9.0 or newer, device is 8.9 (device 1, Fake GPU)"},
		{"decode_f16_sm90", 8, 0, "pagedkv: module not built for this GPU: decode_f16_sm90 needs compute capability 9.0 or newer, device is 8.0 (device 1, Fake GPU)"},
		{"decode_f16_sm90a", 9, 0, ""},
		{"decode_f16_sm90a", 8, 9, "pagedkv: module not built for this GPU: decode_f16_sm90a needs compute capability 9.0 exactly (sm_90a), device is 8.9 (device 1, Fake GPU)"},
		{"decode_f16_sm90a", 10, 0, "pagedkv: module not built for this GPU: decode_f16_sm90a needs compute capability 9.0 exactly (sm_90a), device is 10.0 (device 1, Fake GPU)"},
		{"decode_f16_sm90a", 12, 0, "pagedkv: module not built for this GPU: decode_f16_sm90a needs compute capability 9.0 exactly (sm_90a), device is 12.0 (device 1, Fake GPU)"},
	}
	for _, tt := range tests {
		d := fakeRuntime(t, tt.major, tt.minor).info
		err := checkComputeCapability(tt.module, d, runsOn)
		if tt.want == "" {
			assert.NoError(t, err, "%s on %d.%d", tt.module, tt.major, tt.minor)
			continue
		}
		require.Error(t, err)
		assert.Equal(t, tt.want, err.Error())
		assert.ErrorIs(t, err, ErrComputeCapability)
	}
}

// TestCanLoadEmbedded checks canLoad against every embedded module's
// recorded capability, on a device exactly at it, one just below and one
// of the next major version (where only an arch-specific module does not
// load).
func TestCanLoadEmbedded(t *testing.T) {
	for _, mod := range ptx.Modules() {
		need := ptx.ModuleComputeCapability(mod)
		assert.True(t, fakeRuntime(t, need/10, need%10).canLoad(mod), mod)
		below := fakeRuntime(t, need/10-1, 9)
		assert.False(t, below.canLoad(mod), mod)
		next := fakeRuntime(t, need/10+1, 0)
		assert.Equal(t, !ptx.ModuleArchSpecific(mod), next.canLoad(mod), mod)
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
	assert.Equal(t, "pagedkv: module not built for this GPU: decode_f16 needs compute capability 8.0 or newer, device is 7.5 (device 1, Fake GPU)", err.Error())
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

// TestImageChoice checks what LoadModule plans from on fake devices, from
// the embedded files: with LOAD_SASS off nothing but the PTX; with it on,
// the embedded cubin of the highest architecture the device runs, and none
// for a device the cubins do not cover; with auto (the default), the same
// and, for the modules whose SASS is slower than the JIT's code, the
// recorded JIT code where there is some, else the PTX.
func TestImageChoice(t *testing.T) {
	h200 := fakeRuntime(t, 9, 0)
	h200.info.DriverVersion = 13000
	h200.cfg.LoadSASS = config.SplitOff
	c, sass, jit := h200.imageChoice(ptx.ModuleDecodeF16)
	assert.Equal(t, imageChoice{mode: config.SplitOff, cc: 90, driver: 13000}, c)
	assert.Nil(t, sass)
	assert.Nil(t, jit)

	h200.cfg.LoadSASS = config.SplitOn
	c, sass, jit = h200.imageChoice(ptx.ModuleDecodeF16)
	assert.Equal(t, 90, c.sassArch)
	assert.Equal(t, "\x7fELF", string(sass[:4]))
	assert.Nil(t, jit, "LOAD_SASS on never takes the recorded JIT code")
	c, _, _ = h200.imageChoice(ptx.ModuleVarlenBf16)
	assert.Equal(t, []imageCandidate{{kind: imageSASS, arch: 90, why: "PAGEDKV_LOAD_SASS=1"},
		{kind: imagePTX, why: "the driver refused the sass sm_90"}}, planImages(c),
		"LOAD_SASS on takes even the slower SASS")

	h200.cfg.LoadSASS = config.SplitAuto
	c, _, _ = h200.imageChoice(ptx.ModuleDecodeF16)
	assert.False(t, c.jitFaster, "decode_f16's sm_90 SASS is as fast as the JIT's")
	assert.Equal(t, imageSASS, planImages(c)[0].kind)
	for _, m := range []string{ptx.ModuleVarlenBf16, ptx.ModuleVarlenF16E4m3, ptx.ModuleDecodeBf16E4m3, ptx.ModuleDecodeF16E4m3Sm90} {
		c, _, jit = h200.imageChoice(m)
		assert.True(t, c.jitFaster, m)
		_, driver, recorded := ptx.JITCubin(m, 90)
		assert.Equal(t, driver, c.jitDriver, m)
		if recorded {
			assert.NotNil(t, jit, m)
			assert.Equal(t, imageJIT, planImages(c)[0].kind, "auto: %s loads its recorded JIT code on sm_90", m)
		} else {
			assert.Equal(t, imagePTX, planImages(c)[0].kind, "auto: %s, with no JIT code recorded, loads its PTX on sm_90", m)
		}
	}

	ada := fakeRuntime(t, 8, 9)
	ada.cfg.LoadSASS = config.SplitAuto
	c, _, _ = ada.imageChoice(ptx.ModuleVarlenBf16)
	assert.Equal(t, 89, c.sassArch)
	assert.False(t, c.jitFaster, "nothing measured slower on sm_89")
	c, _, _ = ada.imageChoice(ptx.ModuleDecodeF16Sm90)
	assert.Zero(t, c.sassArch, "a compute_90 module has no SASS an sm_89 device runs")

	blackwell := fakeRuntime(t, 10, 0)
	blackwell.cfg.LoadSASS = config.SplitOn
	c, _, _ = blackwell.imageChoice(ptx.ModuleCache)
	assert.Zero(t, c.sassArch, "no sm_100 cubin: the driver JITs the PTX")
}

// TestPlanImages checks the load order and reasons for every LOAD_SASS mode
// against what is embedded and which driver runs.
func TestPlanImages(t *testing.T) {
	const slower = "its sm_90 SASS runs slower than the driver's JIT code, and no JIT code is recorded for sm_90"
	jit := func(arch int, why string) imageCandidate { return imageCandidate{kind: imageJIT, arch: arch, why: why} }
	sass := func(arch int, why string) imageCandidate {
		return imageCandidate{kind: imageSASS, arch: arch, why: why}
	}
	ptxc := func(why string) imageCandidate { return imageCandidate{kind: imagePTX, why: why} }
	tests := []struct {
		name   string
		choice imageChoice
		want   []imageCandidate
		labels string
	}{
		{
			name:   "auto, recorded JIT code, same driver",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 13000, sassArch: 90, jitFaster: true, jitDriver: 13000},
			want: []imageCandidate{
				jit(90, "driver 13000 recorded, 13000 running"),
				sass(90, "the driver refused the jit-cubin sm_90"),
				ptxc("the driver refused the jit-cubin sm_90 and the sass sm_90"),
			},
			labels: "jit-cubin sm_90, sass sm_90, ptx",
		},
		{
			name:   "auto, recorded JIT code, newer driver",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 13020, sassArch: 90, jitFaster: true, jitDriver: 13000},
			want: []imageCandidate{
				jit(90, "driver 13000 recorded, 13020 running"),
				sass(90, "the driver refused the jit-cubin sm_90"),
				ptxc("the driver refused the jit-cubin sm_90 and the sass sm_90"),
			},
		},
		{
			name:   "auto, recorded JIT code, older driver: the SASS, not a JIT stall",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 12080, sassArch: 90, jitFaster: true, jitDriver: 13000},
			want: []imageCandidate{
				sass(90, "recorded JIT code needs driver ≥ 13000, running 12080"),
				ptxc("the driver refused the sass sm_90"),
			},
		},
		{
			name:   "auto, slower SASS, nothing recorded: the PTX",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 13000, sassArch: 90, jitFaster: true},
			want:   []imageCandidate{ptxc(slower)},
		},
		{
			name:   "auto, SASS as fast as the JIT's",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 13000, sassArch: 90},
			want:   []imageCandidate{sass(90, "PAGEDKV_LOAD_SASS=auto"), ptxc("the driver refused the sass sm_90")},
		},
		{
			name:   "auto, JIT code recorded for a module whose SASS is as fast",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 13000, sassArch: 90, jitDriver: 12040},
			want: []imageCandidate{
				jit(90, "driver 12040 recorded, 13000 running"),
				sass(90, "the driver refused the jit-cubin sm_90"),
				ptxc("the driver refused the jit-cubin sm_90 and the sass sm_90"),
			},
		},
		{
			name:   "auto, a lower architecture's SASS",
			choice: imageChoice{mode: config.SplitAuto, cc: 87, driver: 12040, sassArch: 86},
			want:   []imageCandidate{sass(86, "PAGEDKV_LOAD_SASS=auto"), ptxc("the driver refused the sass sm_86")},
			labels: "sass sm_86, ptx",
		},
		{
			name:   "auto, an arch-specific module's sm_90a SASS",
			choice: imageChoice{mode: config.SplitAuto, cc: 90, driver: 12040, sassArch: 90, archSpecific: true},
			want: []imageCandidate{
				{kind: imageSASS, arch: 90, archSpecific: true, why: "PAGEDKV_LOAD_SASS=auto"},
				ptxc("the driver refused the sass sm_90a"),
			},
			labels: "sass sm_90a, ptx",
		},
		{
			name:   "auto, no SASS",
			choice: imageChoice{mode: config.SplitAuto, cc: 100, driver: 13000},
			want:   []imageCandidate{ptxc("no SASS for sm_100")},
		},
		{
			name:   "auto, recorded JIT code and no SASS",
			choice: imageChoice{mode: config.SplitAuto, cc: 100, driver: 13000, jitDriver: 13000},
			want:   []imageCandidate{jit(100, "driver 13000 recorded, 13000 running"), ptxc("the driver refused the jit-cubin sm_100")},
		},
		{
			name:   "auto, JIT code for a newer driver and no SASS",
			choice: imageChoice{mode: config.SplitAuto, cc: 100, driver: 12080, jitDriver: 13000},
			want:   []imageCandidate{ptxc("no SASS for sm_100; recorded JIT code needs driver ≥ 13000, running 12080")},
		},
		{
			name:   "on: the SASS even where it is slower",
			choice: imageChoice{mode: config.SplitOn, cc: 90, driver: 13000, sassArch: 90, jitFaster: true},
			want:   []imageCandidate{sass(90, "PAGEDKV_LOAD_SASS=1"), ptxc("the driver refused the sass sm_90")},
		},
		{
			name:   "on ignores recorded JIT code",
			choice: imageChoice{mode: config.SplitOn, cc: 90, driver: 13000, sassArch: 90, jitFaster: true, jitDriver: 13000},
			want:   []imageCandidate{sass(90, "PAGEDKV_LOAD_SASS=1"), ptxc("the driver refused the sass sm_90")},
		},
		{
			name:   "on, no SASS",
			choice: imageChoice{mode: config.SplitOn, cc: 120, driver: 13000},
			want:   []imageCandidate{ptxc("no SASS for sm_120")},
		},
		{
			name:   "off: the PTX only",
			choice: imageChoice{mode: config.SplitOff, cc: 90, driver: 13000, sassArch: 90, jitFaster: true, jitDriver: 13000},
			want:   []imageCandidate{ptxc("PAGEDKV_LOAD_SASS=0")},
			labels: "ptx",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planImages(tt.choice)
			assert.Equal(t, tt.want, got)
			if tt.labels != "" {
				labels := make([]string, len(got))
				for i, c := range got {
					labels[i] = c.label()
				}
				assert.Equal(t, tt.labels, strings.Join(labels, ", "))
			}
			require.NotEmpty(t, got)
			assert.Equal(t, imagePTX, got[len(got)-1].kind, "the PTX is always the last resort")
		})
	}
}

func TestModuleImageString(t *testing.T) {
	m := ModuleImage{Image: "jit-cubin sm_90", Reason: "driver 13000 recorded, 13000 running"}
	assert.Equal(t, "jit-cubin sm_90 (driver 13000 recorded, 13000 running)", m.String())
}
