package ptx

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// stale is the advice every failure of TestManifestCurrent ends with.
const stale = "ptx/ is stale: run `go run ./cmd/ptxgen` (needs nvcc 11.8)"

// repoRoot is the repository root as seen from this package's test working
// directory (ptx/).
const repoRoot = ".."

func fileSHA256(t *testing.T, path string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", false
	}
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), true
}

// TestManifestCurrent checks, without nvcc, that the embedded PTX was
// generated from the kernels_src/ in this tree: every source hash in the
// manifest matches, every .cu has a module and every module a .cu, the
// embedded PTX matches its recorded hash and entry points, and every cubin
// the manifest lists is embedded and decompresses to a CUDA ELF file of the
// recorded hash and size, with no other cubin embedded.
func TestManifestCurrent(t *testing.T) {
	m, err := ReadManifest()
	require.NoError(t, err)

	cus, err := filepath.Glob(filepath.Join(repoRoot, "kernels_src", "*.cu"))
	require.NoError(t, err)
	bySource := map[string]bool{}
	for _, mod := range m.Modules {
		bySource[mod.Source] = true
	}
	for _, cu := range cus {
		rel := "kernels_src/" + filepath.Base(cu)
		assert.True(t, bySource[rel], "%s has no module in manifest.json; %s", rel, stale)
	}

	embedded := Modules()
	var listed, listedSASS []string
	for _, mod := range m.Modules {
		listed = append(listed, mod.Name)
		for _, img := range mod.SASS {
			listedSASS = append(listedSASS, ptxfile.SASSFile(mod.Name, img.Arch))
		}
		t.Run(mod.Name, func(t *testing.T) {
			if _, ok := mod.Sources[mod.Source]; !ok || filepath.Ext(mod.Source) != ".cu" {
				t.Errorf("module %s has no .cu among its sources; %s", mod.Name, stale)
			}
			for _, path := range slices.Sorted(maps.Keys(mod.Sources)) {
				got, ok := fileSHA256(t, filepath.Join(repoRoot, filepath.FromSlash(path)))
				if !ok {
					t.Errorf("module %s: %s no longer exists; %s", mod.Name, path, stale)
					continue
				}
				if got != mod.Sources[path] {
					t.Errorf("module %s: %s changed since the PTX was generated; %s", mod.Name, path, stale)
				}
			}

			cc, err := mod.ComputeCapability()
			require.NoError(t, err)
			if got := ModuleComputeCapability(mod.Name); got != cc {
				t.Errorf("module %s: ModuleComputeCapability is %d, manifest.json arch %q needs %d; %s",
					mod.Name, got, mod.Arch, cc, stale)
			}
			assert.Equal(t, mod.ArchSpecific(), ModuleArchSpecific(mod.Name), "module %s", mod.Name)

			data, err := Module(mod.Name)
			if err != nil {
				t.Errorf("module %s: %v; %s", mod.Name, err, stale)
				return
			}
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != mod.PTXSHA256 {
				t.Errorf("module %s: %s.ptx does not match its manifest hash; %s", mod.Name, mod.Name, stale)
			}
			entries, err := Entries(data)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, mod.Entries) {
				t.Errorf("module %s: entry points in %s.ptx %v differ from manifest.json %v; %s",
					mod.Name, mod.Name, names, mod.Entries, stale)
			}

			for _, img := range mod.SASS {
				checkSASS(t, mod, img, cc)
			}
		})
	}
	slices.Sort(listed)
	assert.Equal(t, listed, embedded, "embedded *.ptx and manifest.json modules differ; %s", stale)

	// A cubin the manifest does not list is one SASS could still pick.
	// The recorded JIT cubins are jit.json's (TestJITRecordCurrent).
	embeddedSASS, err := fs.Glob(files, "*.cubin.gz")
	require.NoError(t, err)
	for _, file := range embeddedSASS {
		if !ptxfile.IsJITCubinFile(file) && !slices.Contains(listedSASS, file) {
			t.Errorf("%s is embedded but manifest.json lists no such SASS; %s", file, stale)
		}
	}
}

// checkSASS checks that module mod's embedded cubin img exists and
// decompresses to a CUDA ELF file of the recorded hash and size, for an
// architecture the module's PTX (which needs compute capability cc) can be
// assembled for.
func checkSASS(t *testing.T, mod ModuleInfo, img SASSImage, cc int) {
	t.Helper()
	file := ptxfile.SASSFile(mod.Name, img.Arch)
	arch, err := ptxfile.SASSArch(img.Arch)
	if err != nil {
		t.Errorf("module %s: manifest.json SASS: %v; %s", mod.Name, err, stale)
		return
	}
	if arch < cc {
		t.Errorf("module %s: manifest.json lists %s SASS, below the compute capability %d its PTX needs; %s", mod.Name, img.Arch, cc, stale)
	}
	// An arch-specific module's SASS is for its own capability only, and
	// only it has arch-specific SASS (which SASS would offer to no device
	// but that one).
	if specific := mod.ArchSpecific(); ptxfile.ArchSpecific(img.Arch) != specific || (specific && arch != cc) {
		t.Errorf("module %s: manifest.json lists %s SASS for a module of arch %q; %s", mod.Name, img.Arch, mod.Arch, stale)
	}
	gz, err := fs.ReadFile(files, file)
	if err != nil {
		t.Errorf("module %s, %s: %s is not embedded; %s", mod.Name, img.Arch, file, stale)
		return
	}
	cubin, err := gunzip(gz)
	if err != nil {
		t.Errorf("module %s, %s: %s does not decompress: %v; %s", mod.Name, img.Arch, file, err, stale)
		return
	}
	sum := sha256.Sum256(cubin)
	if hex.EncodeToString(sum[:]) != img.SHA256 || int64(len(cubin)) != img.Size {
		t.Errorf("module %s, %s: %s does not match its manifest hash and size; %s", mod.Name, img.Arch, file, stale)
		return
	}
	// debug/elf refuses cubins (their e_version is not EV_CURRENT), so read
	// the identification and e_machine by hand.
	if len(cubin) < 20 || !bytes.HasPrefix(cubin, []byte(elf.ELFMAG)) ||
		elf.Class(cubin[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(cubin[elf.EI_DATA]) != elf.ELFDATA2LSB ||
		elf.Machine(binary.LittleEndian.Uint16(cubin[18:])) != elf.EM_CUDA {
		t.Errorf("module %s, %s: %s is not a 64-bit CUDA ELF file", mod.Name, img.Arch, file)
	}
}
