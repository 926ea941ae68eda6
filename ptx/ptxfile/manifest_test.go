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
		{"compute_90a", 0, `arch "compute_90a"`},
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
		{"sm_80", 80}, {"sm_86", 86}, {"sm_90", 90}, {"sm_100", 100},
		{"compute_90", 0}, {"sm_90a", 0}, {"sm_9", 0}, {"sm_09", 0}, {"sm_+90", 0}, {"", 0},
	}
	for _, tt := range tests {
		t.Run(tt.arch, func(t *testing.T) {
			cc, err := SASSArch(tt.arch)
			if tt.want == 0 {
				assert.ErrorContains(t, err, "is not sm_<major><minor>")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cc)
		})
	}
	assert.Equal(t, "decode_f16.sm_86.cubin.gz", SASSFile("decode_f16", "sm_86"))
}
