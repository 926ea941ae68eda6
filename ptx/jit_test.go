package ptx

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// rerecord is the advice every failure of TestJITRecordCurrent ends with.
const rerecord = "harvest the JIT code again on a GPU of that architecture (STEPS=jitharvest scripts/gpu.sh, " +
	"then python3 scripts/jit_harvest.py), or delete the entry from ptx/jit.json and its .jit.cubin.gz " +
	"(that module then loads as if none had been recorded)"

// TestJITRecordCurrent checks, without a GPU, that every JIT cubin recorded
// in jit.json was made from the PTX embedded now: its ptx_sha256 is the
// SHA-256 of ptx/<module>.ptx. A PTX change without a new recording fails
// here, since the cubin would run the old code. Each cubin must also be
// embedded, decompress to a 64-bit CUDA ELF file of the recorded hash and
// size, and name a real architecture and a driver version; and no
// .jit.cubin.gz may be embedded that jit.json does not list.
func TestJITRecordCurrent(t *testing.T) {
	rec, err := ReadJITRecord()
	require.NoError(t, err)
	var listed []string
	for _, img := range rec.Images {
		file := ptxfile.JITCubinFile(img.Module, img.Arch)
		listed = append(listed, file)
		t.Run(img.Module+"/"+img.Arch, func(t *testing.T) {
			if _, err := ptxfile.SASSArch(img.Arch); err != nil {
				t.Errorf("jit.json: module %s: %v; %s", img.Module, err, rerecord)
			}
			if img.DriverVersion < 11080 {
				t.Errorf("jit.json: module %s, %s: driver_version %d is not a CUDA driver version (e.g. 13000); %s",
					img.Module, img.Arch, img.DriverVersion, rerecord)
			}
			data, err := Module(img.Module)
			if err != nil {
				t.Errorf("jit.json: module %s, %s: %v; %s", img.Module, img.Arch, err, rerecord)
				return
			}
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:]); got != img.PTXSHA256 {
				t.Errorf("jit.json: module %s, %s: ptx/%s.ptx changed since its JIT code was recorded "+
					"(ptx_sha256 %s, the PTX now %s); %s", img.Module, img.Arch, img.Module, img.PTXSHA256, got, rerecord)
			}
			checkJITCubin(t, img, file)
		})
	}
	embedded, err := fs.Glob(files, "*.jit.cubin.gz")
	require.NoError(t, err)
	for _, file := range embedded {
		if !slices.Contains(listed, file) {
			t.Errorf("%s is embedded but jit.json lists no such image; delete it or %s", file, rerecord)
		}
	}
}

// checkJITCubin checks that img's cubin, file, is embedded and decompresses
// to a 64-bit CUDA ELF file of the recorded hash and size.
func checkJITCubin(t *testing.T, img JITImage, file string) {
	t.Helper()
	gz, err := fs.ReadFile(files, file)
	if err != nil {
		t.Errorf("jit.json: module %s, %s: %s is not embedded; %s", img.Module, img.Arch, file, rerecord)
		return
	}
	cubin, err := gunzip(gz)
	if err != nil {
		t.Errorf("jit.json: module %s, %s: %s does not decompress: %v; %s", img.Module, img.Arch, file, err, rerecord)
		return
	}
	sum := sha256.Sum256(cubin)
	if hex.EncodeToString(sum[:]) != img.SHA256 || int64(len(cubin)) != img.Size {
		t.Errorf("jit.json: module %s, %s: %s does not match its recorded hash and size; %s", img.Module, img.Arch, file, rerecord)
		return
	}
	if len(cubin) < 20 || !bytes.HasPrefix(cubin, []byte(elf.ELFMAG)) ||
		elf.Class(cubin[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(cubin[elf.EI_DATA]) != elf.ELFDATA2LSB ||
		elf.Machine(binary.LittleEndian.Uint16(cubin[18:])) != elf.EM_CUDA {
		t.Errorf("jit.json: module %s, %s: %s is not a 64-bit CUDA ELF file", img.Module, img.Arch, file)
	}
}

// TestJITCubinSelection covers what the embedded files may not: an image
// for exactly the device's architecture only, its driver version, a cubin
// that does not decompress, and one recorded from other PTX.
func TestJITCubinSelection(t *testing.T) {
	gz := func(s string) *fstest.MapFile {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, err := zw.Write([]byte(s))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return &fstest.MapFile{Data: b.Bytes()}
	}
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	rec, err := JITRecord{Images: []JITImage{
		{Module: "a", Arch: "sm_90", DriverVersion: 13000, PTXSHA256: sum("// a")},
		{Module: "a", Arch: "sm_80", DriverVersion: 12040, PTXSHA256: sum("// a")},
		{Module: "b", Arch: "sm_90", DriverVersion: 13000, PTXSHA256: sum("// b")},
		{Module: "c", Arch: "sm_90", DriverVersion: 13000, PTXSHA256: sum("// c")},
		{Module: "e", Arch: "sm_90", DriverVersion: 13000, PTXSHA256: sum("// e, as it was")},
		{Module: "f", Arch: "sm_90", DriverVersion: 13000, PTXSHA256: sum("// f")},
	}}.Marshal()
	require.NoError(t, err)
	fsys := fstest.MapFS{
		"jit.json":                 {Data: rec},
		"a.sm_90.jit.cubin.gz":     gz("\x7fELF a90"),
		"a.sm_80.jit.cubin.gz":     gz("\x7fELF a80"),
		"b.sm_90.jit.cubin.gz":     {Data: []byte("not gzip")},
		"d.sm_90.jit.cubin.gz":     gz("\x7fELF d90, not in jit.json"),
		"a.sm_90.cubin.gz":         gz("\x7fELF ptxas a90"),
		"a.sm_90.jit.cubin.gz.bak": gz("\x7fELF"),
		"a.ptx":                    {Data: []byte("// a")},
		"b.ptx":                    {Data: []byte("// b")},
		"c.ptx":                    {Data: []byte("// c")},
		"d.ptx":                    {Data: []byte("// d")},
		"e.ptx":                    {Data: []byte("// e, changed since")},
		"e.sm_90.jit.cubin.gz":     gz("\x7fELF e90"),
		"f.sm_90.jit.cubin.gz":     gz("\x7fELF f90, no PTX"),
	}
	tests := []struct {
		module string
		arch   int
		image  string // "": none
		driver int
	}{
		{"a", 90, "\x7fELF a90", 13000},
		{"a", 80, "\x7fELF a80", 12040},
		{"a", 86, "", 0}, // the JIT's code is for one device: no fallback to sm_80
		{"a", 100, "", 0},
		{"b", 90, "", 0}, // does not decompress
		{"c", 90, "", 0}, // listed but not embedded
		{"d", 90, "", 0}, // embedded but not listed
		{"e", 90, "", 0}, // recorded from other PTX
		{"f", 90, "", 0}, // no such module
		{"a.sm_90", 90, "", 0},
		{"", 90, "", 0},
		{"a", 0, "", 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.module, tt.arch), func(t *testing.T) {
			image, driver, ok := jitCubin(fsys, tt.module, tt.arch)
			assert.Equal(t, tt.image != "", ok)
			assert.Equal(t, tt.image, string(image))
			assert.Equal(t, tt.driver, driver)
		})
	}
	_, _, ok := jitCubin(fstest.MapFS{}, "a", 90)
	assert.False(t, ok, "no jit.json")
}

func TestJITFasterModules(t *testing.T) {
	mods := JITFasterModules(90)
	assert.True(t, slices.IsSorted(mods))
	assert.Contains(t, mods, ModuleVarlenBf16)
	for _, m := range mods {
		assert.True(t, JITFaster(m, 90), m)
		assert.Contains(t, Modules(), m, "JITFaster names a module that is not embedded")
	}
	assert.Empty(t, JITFasterModules(89))
}
