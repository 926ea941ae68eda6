package ptxfile

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ManifestFile is the manifest's file name inside ptx/.
const ManifestFile = "manifest.json"

// DefaultArch is the virtual architecture (nvcc -arch) of a module whose
// ModuleInfo.Arch is empty: the PTX runs on compute capability 8.0 and newer.
const DefaultArch = "compute_80"

// Manifest records how every embedded PTX module, and the machine code
// (SASS) assembled from it, was produced.
type Manifest struct {
	// NVCC is the version part of `nvcc --version`, e.g. "release 11.8, V11.8.89".
	NVCC string `json:"nvcc"`
	// PTXAS is the version part of `ptxas --version` when it differs from
	// NVCC; empty means ptxas is the same release as nvcc.
	PTXAS string `json:"ptxas,omitempty"`
	// Flags are the nvcc flags every module was compiled with, in order,
	// except that a module with an Arch is compiled with -arch=<Arch> in
	// place of -arch=DefaultArch.
	Flags []string `json:"flags"`
	// PTXASFlags are the ptxas flags every SASS image was assembled with
	// from its module's PTX, in order, besides -arch=<SASSImage.Arch>.
	PTXASFlags []string     `json:"ptxas_flags,omitempty"`
	Modules    []ModuleInfo `json:"modules"`
}

// ModuleInfo describes one PTX module, <Name>.ptx, compiled from Source.
type ModuleInfo struct {
	Name   string `json:"name"`   // e.g. "decode_f16"
	Source string `json:"source"` // the .cu, relative to the repository root, e.g. "kernels_src/decode_f16.cu"
	// Arch is the virtual architecture the module was compiled for when it
	// is not DefaultArch, e.g. "compute_90"; empty means DefaultArch.
	Arch string `json:"arch,omitempty"`
	// Sources maps the .cu and every repository file it includes (paths
	// relative to the repository root, forward slashes) to the hex SHA-256
	// of its contents.
	Sources   map[string]string `json:"sources"`
	PTXSHA256 string            `json:"ptx_sha256"` // hex SHA-256 of <Name>.ptx
	Entries   []string          `json:"entries"`    // .entry names in the PTX, sorted
	// SASS lists the machine code assembled from <Name>.ptx, one image per
	// real architecture, sorted by architecture; each is embedded
	// gzip-compressed as SASSFile(Name, Arch).
	SASS []SASSImage `json:"sass,omitempty"`
}

// SASSImage describes one cubin: a module's PTX assembled by ptxas for one
// real architecture.
type SASSImage struct {
	Arch   string `json:"arch"`   // ptxas -arch, e.g. "sm_86"
	SHA256 string `json:"sha256"` // hex SHA-256 of the uncompressed cubin
	Size   int64  `json:"size"`   // bytes of the uncompressed cubin
}

// SASSFile returns the file name inside ptx/ of module's gzip-compressed
// cubin for arch ("sm_86"): "<module>.sm_86.cubin.gz".
func SASSFile(module, arch string) string { return module + "." + arch + ".cubin.gz" }

// SASSArch returns the compute capability a real architecture ("sm_86")
// names, as major*10+minor (86). An arch not of the form sm_<major><minor>
// is an error.
func SASSArch(arch string) (int, error) {
	digits, ok := strings.CutPrefix(arch, "sm_")
	cc, err := strconv.Atoi(digits)
	if !ok || err != nil || len(digits) < 2 || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("ptxfile: arch %q is not sm_<major><minor>, e.g. sm_90", arch)
	}
	return cc, nil
}

// Module returns the module with the given name.
func (m Manifest) Module(name string) (ModuleInfo, bool) {
	for _, mod := range m.Modules {
		if mod.Name == name {
			return mod, true
		}
	}
	return ModuleInfo{}, false
}

// ComputeCapability returns the compute capability the module's PTX needs,
// as major*10+minor: 80 for DefaultArch (an empty Arch), 90 for
// "compute_90", 100 for "compute_100". An Arch not of the form
// compute_<major><minor> is an error.
func (m ModuleInfo) ComputeCapability() (int, error) {
	arch := m.Arch
	if arch == "" {
		arch = DefaultArch
	}
	digits, ok := strings.CutPrefix(arch, "compute_")
	cc, err := strconv.Atoi(digits)
	if !ok || err != nil || len(digits) < 2 || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("ptxfile: module %s: arch %q is not compute_<major><minor>, e.g. compute_90", m.Name, m.Arch)
	}
	return cc, nil
}

// Marshal encodes m deterministically: modules sorted by name, entries
// sorted, SASS images sorted by architecture (sm_86 before sm_100), map keys
// sorted (encoding/json sorts them), two-space indentation and a trailing
// newline. m itself is not modified.
func (m Manifest) Marshal() ([]byte, error) {
	out := Manifest{NVCC: m.NVCC, PTXAS: m.PTXAS, Flags: slices.Clone(m.Flags), PTXASFlags: slices.Clone(m.PTXASFlags)}
	for _, mod := range m.Modules {
		mod.Sources = maps.Clone(mod.Sources)
		mod.Entries = slices.Sorted(slices.Values(mod.Entries))
		mod.SASS = slices.Clone(mod.SASS)
		slices.SortFunc(mod.SASS, func(a, b SASSImage) int {
			ca, _ := SASSArch(a.Arch) // 0, sorting first, for a malformed arch
			cb, _ := SASSArch(b.Arch)
			return cmp.Or(cmp.Compare(ca, cb), strings.Compare(a.Arch, b.Arch))
		})
		out.Modules = append(out.Modules, mod)
	}
	slices.SortFunc(out.Modules, func(a, b ModuleInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil { // Encode appends the trailing newline
		return nil, fmt.Errorf("ptxfile: encoding manifest: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseManifest decodes a manifest written by Marshal. Unknown fields are an
// error, so a manifest from a newer ptxgen is not half-read.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("ptxfile: decoding %s: %w", ManifestFile, err)
	}
	if dec.More() {
		return Manifest{}, fmt.Errorf("ptxfile: decoding %s: data after the manifest object", ManifestFile)
	}
	return m, nil
}
