package ptxfile

import (
	"bytes"
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

// Manifest records how every embedded PTX module was produced.
type Manifest struct {
	// NVCC is the version part of `nvcc --version`, e.g. "release 11.8, V11.8.89".
	NVCC string `json:"nvcc"`
	// Flags are the nvcc flags every module was compiled with, in order,
	// except that a module with an Arch is compiled with -arch=<Arch> in
	// place of -arch=DefaultArch.
	Flags   []string     `json:"flags"`
	Modules []ModuleInfo `json:"modules"`
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
// sorted, map keys sorted (encoding/json sorts them), two-space indentation
// and a trailing newline. m itself is not modified.
func (m Manifest) Marshal() ([]byte, error) {
	out := Manifest{NVCC: m.NVCC, Flags: slices.Clone(m.Flags)}
	for _, mod := range m.Modules {
		mod.Sources = maps.Clone(mod.Sources)
		mod.Entries = slices.Sorted(slices.Values(mod.Entries))
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
