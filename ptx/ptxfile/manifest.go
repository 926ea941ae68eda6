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
	// place of -arch=DefaultArch; for an arch-specific Arch (compute_90a)
	// that is -arch=<Arch without its "a"> (compute_90), and the PTX header's
	// .version and .target lines are then rewritten for the arch-specific
	// target (see ModuleInfo.Arch).
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
	// is not DefaultArch, e.g. "compute_90"; empty means DefaultArch. An
	// arch-specific architecture, "compute_90a", is PTX ISA 8.0 for
	// .target sm_90a: nvcc compiles it for compute_90 (PTX ISA 7.8, .target
	// sm_90), and those two header lines are rewritten. Its PTX and SASS
	// run only on compute capability 9.0 exactly (see RunsOn).
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
	// PTXAS is the version part of `ptxas --version` of the ptxas that
	// assembled this module's SASS when it is not the manifest's (an
	// arch-specific module's PTX ISA 8.0 needs a newer ptxas than nvcc
	// 11.8's), e.g. "release 12.4, V12.4.131"; empty means Manifest.PTXAS.
	PTXAS string `json:"ptxas,omitempty"`
}

// SASSImage describes one cubin: a module's PTX assembled by ptxas for one
// real architecture.
type SASSImage struct {
	Arch   string `json:"arch"`   // ptxas -arch, e.g. "sm_86"
	SHA256 string `json:"sha256"` // hex SHA-256 of the uncompressed cubin
	Size   int64  `json:"size"`   // bytes of the uncompressed cubin
}

// SASSFile returns the file name inside ptx/ of module's gzip-compressed
// cubin for arch ("sm_86"): "<module>.sm_86.cubin.gz"; for an arch-specific
// architecture, "<module>.sm_90a.cubin.gz".
func SASSFile(module, arch string) string { return module + "." + arch + ".cubin.gz" }

// minArchSpecific is the lowest compute capability with an arch-specific
// target (sm_90a).
const minArchSpecific = 90

// parseArch reads "<prefix><major><minor>" with an optional "a" for an
// arch-specific target (from sm_90a on), returning the compute capability
// as major*10+minor; ok is false for anything else.
func parseArch(arch, prefix string) (cc int, specific, ok bool) {
	digits, ok := strings.CutPrefix(arch, prefix)
	if !ok {
		return 0, false, false
	}
	digits, specific = strings.CutSuffix(digits, "a")
	cc, err := strconv.Atoi(digits)
	if err != nil || len(digits) < 2 || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" ||
		(specific && cc < minArchSpecific) {
		return 0, false, false
	}
	return cc, specific, true
}

// SASSArch returns the compute capability a real architecture ("sm_86",
// or the arch-specific "sm_90a") names, as major*10+minor (86, 90). An arch
// not of the form sm_<major><minor>[a] is an error.
func SASSArch(arch string) (int, error) {
	cc, _, ok := parseArch(arch, "sm_")
	if !ok {
		return 0, fmt.Errorf("ptxfile: arch %q is not sm_<major><minor>, e.g. sm_90, or sm_<major><minor>a, e.g. sm_90a", arch)
	}
	return cc, nil
}

// ArchSpecific reports whether arch, a virtual ("compute_90a") or real
// ("sm_90a") architecture, is arch-specific: code for it runs only on its
// own compute capability, neither on a later minor version nor on a later
// major one. A malformed arch is not.
func ArchSpecific(arch string) bool {
	prefix := "sm_"
	if strings.HasPrefix(arch, "compute_") {
		prefix = "compute_"
	}
	_, specific, ok := parseArch(arch, prefix)
	return ok && specific
}

// RunsOn reports whether code that needs compute capability need
// (major*10+minor) runs on a device of compute capability cc: at need or
// above, or, for arch-specific code, at need exactly. When it does not,
// reason says why, e.g. "needs compute capability 9.0 exactly (sm_90a),
// device is 10.0".
func RunsOn(need int, archSpecific bool, cc int) (ok bool, reason string) {
	switch {
	case archSpecific && cc != need:
		return false, fmt.Sprintf("needs compute capability %d.%d exactly (sm_%da), device is %d.%d",
			need/10, need%10, need, cc/10, cc%10)
	case cc < need:
		return false, fmt.Sprintf("needs compute capability %d.%d or newer, device is %d.%d",
			need/10, need%10, cc/10, cc%10)
	}
	return true, ""
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
// "compute_90" and for the arch-specific "compute_90a", 100 for
// "compute_100". An Arch not of the form compute_<major><minor>[a] is an
// error.
func (m ModuleInfo) ComputeCapability() (int, error) {
	arch := m.Arch
	if arch == "" {
		arch = DefaultArch
	}
	cc, _, ok := parseArch(arch, "compute_")
	if !ok {
		return 0, fmt.Errorf("ptxfile: module %s: arch %q is not compute_<major><minor>, e.g. compute_90, or compute_<major><minor>a, e.g. compute_90a", m.Name, m.Arch)
	}
	return cc, nil
}

// ArchSpecific reports whether the module's Arch is arch-specific
// ("compute_90a"): its PTX and SASS run only on compute capability
// ComputeCapability exactly.
func (m ModuleInfo) ArchSpecific() bool {
	return strings.HasPrefix(m.Arch, "compute_") && ArchSpecific(m.Arch)
}

// RunsOn reports whether the module runs on a device of compute capability
// cc (major*10+minor), and if not why (see the function RunsOn).
func (m ModuleInfo) RunsOn(cc int) (ok bool, reason string, err error) {
	need, err := m.ComputeCapability()
	if err != nil {
		return false, "", err
	}
	ok, reason = RunsOn(need, m.ArchSpecific(), cc)
	return ok, reason, nil
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
