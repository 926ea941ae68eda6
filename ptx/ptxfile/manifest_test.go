package ptxfile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestManifestRoundTrip(t *testing.T) {
	m := Manifest{
		NVCC:       "release 11.8, V11.8.89",
		PTXAS:      "release 11.8, V11.8.90",
		Flags:      []string{"-ptx", "-arch=compute_80"},
		PTXASFlags: []string{"-O3"},
		Modules: []ModuleInfo{
			{Name: "z", Source: "kernels_src/z.cu", Arch: "compute_90", Sources: map[string]string{"kernels_src/z.cu": "bb", "kernels_src/a.cuh": "aa"}, PTXSHA256: "cc", Entries: []string{"z_b", "z_a"},
				SASS: []SASSImage{{Arch: "sm_90", SHA256: "ff", Size: 3}}},
			{Name: "a", Source: "kernels_src/a.cu", Sources: map[string]string{"kernels_src/a.cu": "dd"}, PTXSHA256: "ee", Entries: []string{"a_x"},
				SASS: []SASSImage{{Arch: "sm_100", SHA256: "a3", Size: 4}, {Arch: "sm_86", SHA256: "a2", Size: 2}, {Arch: "sm_80", SHA256: "a1", Size: 1}}},
		},
	}
	data, err := m.Marshal()
	require.NoError(t, err)
	assert.Equal(t, `{
  "nvcc": "release 11.8, V11.8.89",
  "ptxas": "release 11.8, V11.8.90",
  "flags": [
    "-ptx",
    "-arch=compute_80"
  ],
  "ptxas_flags": [
    "-O3"
  ],
  "modules": [
    {
      "name": "a",
      "source": "kernels_src/a.cu",
      "sources": {
        "kernels_src/a.cu": "dd"
      },
      "ptx_sha256": "ee",
      "entries": [
        "a_x"
      ],
      "sass": [
        {
          "arch": "sm_80",
          "sha256": "a1",
          "size": 1
        },
        {
          "arch": "sm_86",
          "sha256": "a2",
          "size": 2
        },
        {
          "arch": "sm_100",
          "sha256": "a3",
          "size": 4
        }
      ]
    },
    {
      "name": "z",
      "source": "kernels_src/z.cu",
      "arch": "compute_90",
      "sources": {
        "kernels_src/a.cuh": "aa",
        "kernels_src/z.cu": "bb"
      },
      "ptx_sha256": "cc",
      "entries": [
        "z_a",
        "z_b"
      ],
      "sass": [
        {
          "arch": "sm_90",
          "sha256": "ff",
          "size": 3
        }
      ]
    }
  ]
}
`, string(data))
	assert.Equal(t, "z", m.Modules[0].Name, "Marshal must not reorder its receiver")
	assert.Equal(t, []string{"z_b", "z_a"}, m.Modules[0].Entries)
	assert.Equal(t, "sm_100", m.Modules[1].SASS[0].Arch, "Marshal must not reorder its receiver's SASS")

	back, err := ParseManifest(data)
	require.NoError(t, err)
	again, err := back.Marshal()
	require.NoError(t, err)
	assert.Equal(t, data, again)

	mod, ok := back.Module("z")
	require.True(t, ok)
	assert.Equal(t, "cc", mod.PTXSHA256)
	_, ok = back.Module("nope")
	assert.False(t, ok)
}

func TestParseManifestStrict(t *testing.T) {
	_, err := ParseManifest([]byte(`{"nvcc": "x", "extra": 1}`))
	assert.ErrorContains(t, err, `unknown field "extra"`)
	_, err = ParseManifest([]byte(`{"nvcc": "x"} {}`))
	assert.ErrorContains(t, err, "data after the manifest object")
}

func TestModuleComputeCapability(t *testing.T) {
	tests := []struct {
		arch string
		want int
		err  string
	}{
		{"", 80, ""},
		{"compute_80", 80, ""},
		{"compute_90", 90, ""},
		{"compute_86", 86, ""},
		{"sm_90", 0, `arch "sm_90" is not compute_<major><minor>`},
		{"compute_90a", 90, ""},
		{"compute_100a", 100, ""},
		{"compute_86a", 0, `arch "compute_86a"`},
		{"compute_90aa", 0, `arch "compute_90aa"`},
		{"compute_a", 0, `arch "compute_a"`},
		{"compute_9", 0, `arch "compute_9"`},
		{"compute_100", 100, ""},
		{"compute_+9", 0, `arch "compute_+9"`},
		{"compute_+90", 0, `arch "compute_+90"`},
		{"compute_09", 0, `arch "compute_09"`},
	}
	for _, tt := range tests {
		t.Run(tt.arch, func(t *testing.T) {
			cc, err := ModuleInfo{Name: "m", Arch: tt.arch}.ComputeCapability()
			if tt.err != "" {
				assert.ErrorContains(t, err, "module m: "+tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cc)
		})
	}
}

func TestSASSArch(t *testing.T) {
	tests := []struct {
		arch string
		want int
	}{
		{"sm_80", 80}, {"sm_86", 86}, {"sm_90", 90}, {"sm_100", 100}, {"sm_90a", 90},
		{"compute_90", 0}, {"sm_80a", 0}, {"sm_9a", 0}, {"sm_9", 0}, {"sm_09", 0}, {"sm_+90", 0}, {"", 0},
	}
	for _, tt := range tests {
		t.Run(tt.arch, func(t *testing.T) {
			cc, err := SASSArch(tt.arch)
			if tt.want == 0 {
				assert.ErrorContains(t, err, "is not sm_<major><minor>, e.g. sm_90, or sm_<major><minor>a")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cc)
		})
	}
	assert.Equal(t, "decode_f16.sm_86.cubin.gz", SASSFile("decode_f16", "sm_86"))
}

func TestArchSpecific(t *testing.T) {
	tests := []struct {
		arch string
		want bool
	}{
		{"compute_90a", true}, {"sm_90a", true}, {"compute_100a", true},
		{"compute_90", false}, {"sm_90", false}, {"", false}, {"compute_80a", false}, {"sm_a", false}, {"90a", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ArchSpecific(tt.arch), tt.arch)
	}
	assert.True(t, ModuleInfo{Arch: "compute_90a"}.ArchSpecific())
	assert.False(t, ModuleInfo{Arch: "sm_90a"}.ArchSpecific(), "a module's arch is virtual")
	assert.False(t, ModuleInfo{}.ArchSpecific())
}

func TestRunsOn(t *testing.T) {
	tests := []struct {
		arch   string
		cc     int
		reason string // "": runs
	}{
		{"", 80, ""},
		{"", 90, ""},
		{"", 120, ""},
		{"", 75, "needs compute capability 8.0 or newer, device is 7.5"},
		{"compute_90", 90, ""},
		{"compute_90", 100, ""},
		{"compute_90", 89, "needs compute capability 9.0 or newer, device is 8.9"},
		{"compute_90a", 90, ""},
		{"compute_90a", 80, "needs compute capability 9.0 exactly (sm_90a), device is 8.0"},
		{"compute_90a", 89, "needs compute capability 9.0 exactly (sm_90a), device is 8.9"},
		{"compute_90a", 100, "needs compute capability 9.0 exactly (sm_90a), device is 10.0"},
		{"compute_90a", 120, "needs compute capability 9.0 exactly (sm_90a), device is 12.0"},
	}
	for _, tt := range tests {
		ok, reason, err := ModuleInfo{Name: "m", Arch: tt.arch}.RunsOn(tt.cc)
		require.NoError(t, err)
		assert.Equal(t, tt.reason == "", ok, "%q on %d", tt.arch, tt.cc)
		assert.Equal(t, tt.reason, reason, "%q on %d", tt.arch, tt.cc)
	}
	_, _, err := ModuleInfo{Name: "m", Arch: "sm_90a"}.RunsOn(90)
	assert.ErrorContains(t, err, `module m: arch "sm_90a"`)
}
