package ptx

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
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

func TestSASS(t *testing.T) {
	m, err := ReadManifest()
	require.NoError(t, err)
	tests := []struct {
		module string
		cc     int
		want   int // 0: none, load the PTX
	}{
		{ModuleDecodeF16, 80, 80},
		{ModuleDecodeF16, 86, 86},
		{ModuleDecodeF16, 87, 86},
		{ModuleDecodeF16, 89, 89},
		{ModuleDecodeF16, 90, 90},
		{ModuleDecodeF16, 100, 0},
		{ModuleDecodeF16, 120, 0},
		{ModuleDecodeF16, 75, 0},
		{ModuleDecodeF16, 0, 0},
		{ModuleDecodeF16Sm90, 89, 0},
		{ModuleDecodeF16Sm90, 90, 90},
		{ModuleDecodeF16Sm90, 100, 0},
		{"no_such_module", 90, 0},
		{"", 90, 0},
		{"../ptx/decode_f16", 90, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/cc%d", tt.module, tt.cc), func(t *testing.T) {
			image, arch, ok := SASS(tt.module, tt.cc)
			if tt.want == 0 {
				assert.False(t, ok)
				assert.Nil(t, image)
				assert.Zero(t, arch)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tt.want, arch)
			assert.True(t, bytes.HasPrefix(image, []byte("\x7fELF")), "image does not start with the ELF magic")
			mod, found := m.Module(tt.module)
			require.True(t, found)
			sm := fmt.Sprintf("sm_%d", arch)
			if ModuleArchSpecific(tt.module) {
				sm += "a"
			}
			i := slices.IndexFunc(mod.SASS, func(img SASSImage) bool { return img.Arch == sm })
			require.GreaterOrEqual(t, i, 0, "manifest.json lists no %s SASS for %s", sm, tt.module)
			sum := sha256.Sum256(image)
			assert.Equal(t, mod.SASS[i].SHA256, hex.EncodeToString(sum[:]))
		})
	}
}

// TestSASSSelection covers what the embedded files do not: a gap in the
// architectures, a cubin that does not decompress, and arch-specific
// (sm_90a) cubins.
func TestSASSSelection(t *testing.T) {
	gz := func(s string) *fstest.MapFile {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, err := zw.Write([]byte(s))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return &fstest.MapFile{Data: b.Bytes()}
	}
	fsys := fstest.MapFS{
		"a.ptx":             {Data: []byte(".version 7.8\n")},
		"a.sm_80.cubin.gz":  gz("\x7fELF a80"),
		"a.sm_89.cubin.gz":  gz("\x7fELF a89"),
		"b.ptx":             {Data: []byte(".version 7.8\n")},
		"b.sm_90.cubin.gz":  {Data: []byte("not gzip")},
		"b.sm_100.cubin.gz": gz("\x7fELF b100"),
		"c.ptx":             {Data: []byte(".version 8.0\n.target sm_90a\n")},
		"c.sm_90a.cubin.gz": gz("\x7fELF c90a"),
		"d.ptx":             {Data: []byte(".version 8.0\n.target sm_90a\n")},
		"d.sm_90a.cubin.gz": {Data: []byte("not gzip")},
	}
	tests := []struct {
		module string
		cc     int
		image  string // "": none
		arch   int
	}{
		{"a", 80, "\x7fELF a80", 80},
		{"a", 86, "\x7fELF a80", 80},
		{"a", 89, "\x7fELF a89", 89},
		{"a", 90, "", 0},
		{"b", 90, "", 0},
		{"b", 103, "\x7fELF b100", 100},
		{"b", 110, "", 0},
		{"a.sm_80", 80, "", 0},
		// An arch-specific cubin runs on its own capability only.
		{"c", 90, "\x7fELF c90a", 90},
		{"c", 89, "", 0},
		{"c", 91, "", 0},
		{"c", 100, "", 0},
		{"c", 120, "", 0},
		{"d", 90, "", 0},
	}
	for _, tt := range tests {
		image, arch, ok := sass(fsys, tt.module, tt.cc)
		assert.Equal(t, tt.image != "", ok, "%s at %d", tt.module, tt.cc)
		assert.Equal(t, tt.image, string(image), "%s at %d", tt.module, tt.cc)
		assert.Equal(t, tt.arch, arch, "%s at %d", tt.module, tt.cc)
	}
}
