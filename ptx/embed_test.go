package ptx

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testFS() fstest.MapFS {
	return fstest.MapFS{
		"b.ptx":         {Data: []byte(".version 7.8\n.visible .entry b_k(\n.param .u32 b_k_param_0\n)\n{ret;}\n")},
		"a.ptx":         {Data: []byte(".version 7.8\n")},
		"manifest.json": {Data: []byte(`{"nvcc": "release 11.8, V11.8.89", "flags": ["-ptx"], "modules": [{"name": "a", "entries": ["x"]}]}`)},
		"names.go":      {Data: []byte("package ptx\n")},
	}
}

func TestModule(t *testing.T) {
	fsys := testFS()
	assert.Equal(t, []string{"a", "b"}, modules(fsys))

	data, err := module(fsys, "b")
	require.NoError(t, err)
	assert.Contains(t, string(data), ".entry b_k")

	tests := []struct{ name, want string }{
		{"c", `ptx: unknown module "c"; known modules: a, b`},
		{"manifest", `ptx: unknown module "manifest"; known modules: a, b`},
		{"b.ptx", `ptx: module "b.ptx" is not a module name; known modules: a, b`},
		{"", `ptx: module "" is not a module name; known modules: a, b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := module(fsys, tt.name)
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestReadManifestMapFS(t *testing.T) {
	m, err := readManifest(testFS())
	require.NoError(t, err)
	assert.Equal(t, "release 11.8, V11.8.89", m.NVCC)
	require.Len(t, m.Modules, 1)
	assert.Equal(t, []string{"x"}, m.Modules[0].Entries)

	_, err = readManifest(fstest.MapFS{})
	assert.ErrorContains(t, err, "manifest.json")
}

func TestEmbeddedModulesLoad(t *testing.T) {
	names := Modules()
	require.NotEmpty(t, names, "no embedded PTX")
	for _, name := range names {
		entries, err := ModuleEntries(name)
		require.NoError(t, err, name)
		assert.NotEmpty(t, entries, "module %s has no .entry", name)
	}
}
