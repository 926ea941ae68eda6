package ptx

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// files holds every generated module as <name>.ptx, its machine code as
// <name>.sm_XX.cubin.gz or, arch-specific, <name>.sm_XXa.cubin.gz (one
// gzip-compressed cubin per architecture listed in the module's manifest
// record), and manifest.json; and, recorded on GPUs
// rather than generated, jit.json with the <name>.sm_XX.jit.cubin.gz it lists
// (see JITCubin).
//
//go:embed *.ptx *.cubin.gz manifest.json jit.json
var files embed.FS

// Module returns the PTX text of the named module (a Module* constant, e.g.
// ModuleDecodeF16). An unknown name is an error listing the known ones. The
// returned slice is the caller's to keep or modify.
func Module(name string) ([]byte, error) { return module(files, name) }

// SASS returns the machine code of module for a device of compute capability cc
// (major*10+minor, e.g. 90): the embedded arch-specific cubin for exactly
// that capability (sm_90a on 9.0) if there is one, else the cubin of the
// highest architecture the device runs (same major version, minor ≤ the
// device's), decompressed, with that architecture (e.g. 86, or 90 for
// sm_90a); ok is false when the module has none the device can run (then
// load its PTX).
//
// Compute_80 modules carry sm_80, sm_86, sm_89 and sm_90 cubins, the
// *_sm90 modules sm_90 only and the arch-specific *_sm90a modules sm_90a
// only (see the manifest), so Ampere, Ada and Hopper get SASS and anything
// newer loads the PTX; an sm_90a cubin is never offered to a device other
// than 9.0. An unknown module name is ok
// false, as is (which the ptx tests rule out) a cubin that does not
// decompress. Each call decompresses afresh; the image is the caller's.
func SASS(module string, cc int) (image []byte, arch int, ok bool) { return sass(files, module, cc) }

// jitFaster lists, per architecture, the modules whose embedded SASS ran
// measurably slower than the code the driver's JIT makes of their PTX. On
// the H200 (driver 13.0, 2026-12-01: pagedkv bench with each load path in
// one device call) ptxas 11.8's sm_90 code for the varlen kernels takes
// 9.5-16.9% longer on every bench row (16-bit and fp8 caches) and for the
// fp8 decode kernels 2-4% longer on most rows, while the 16-bit decode,
// cache, RoPE, QKV and MLA modules run within ±2%. The varlen modules over
// the x-split and shuffle layouts, the varlen _mods modules (the same
// kernels with score modifiers) and the fp8 decode modules for the other
// layouts (_laid) are the same kernels with other loaders or a few more
// instructions per score and are listed with them, unmeasured, as are the
// varlen cluster modules (_sm90: the same kernels, merging on chip). For head
// dims 80-192 (the _dims modules; H100, driver 13.0, 2026-12-06) ptxas's
// varlen code took 2-14% longer on bf16 prefill 8x2048, while its decode
// code ran within 1.2% of the JIT's and keeps its SASS. The varlen
// modules for head dim 120 (_hd120), for modifiers over fp8 caches
// (_e4m3_mods) and for fp8 caches at head dims 96 and 192 (_e4m3_dims), and
// the fp8 decode modules with modifiers or at those head dims, are the same
// kernels again and are listed with their families, unmeasured. On the H100
// and the H200 (driver 13000) the JIT makes byte-identical sm_90 code, so
// an image recorded on either serves both.
var jitFaster = map[int][]string{
	90: {
		"decode_bf16_e4m3", "decode_bf16_e4m3_sm90", "decode_f16_e4m3", "decode_f16_e4m3_sm90",
		"decode_bf16_e4m3_laid", "decode_bf16_e4m3_laid_sm90", "decode_f16_e4m3_laid", "decode_f16_e4m3_laid_sm90",
		"decode_bf16_e4m3_mods", "decode_f16_e4m3_mods", "decode_bf16_e4m3_dims", "decode_f16_e4m3_dims",
		"varlen_bf16", "varlen_bf16_e4m3", "varlen_f16", "varlen_f16_e4m3",
		"varlen_bf16_layouts", "varlen_f16_layouts", "varlen_bf16_mods", "varlen_f16_mods",
		"varlen_bf16_dims", "varlen_f16_dims", "varlen_bf16_sm90", "varlen_f16_sm90",
		"varlen_bf16_hd120", "varlen_f16_hd120", "varlen_bf16_e4m3_mods", "varlen_f16_e4m3_mods",
		"varlen_bf16_e4m3_dims", "varlen_f16_e4m3_dims",
	},
}

// JITFaster reports whether module's SASS for architecture arch (e.g. 90)
// was measured slower than the driver's JIT of its PTX, so that the JIT's
// code is the faster choice there: recorded (JITCubin), or else made at
// load time (a few seconds per module without the driver's JIT cache).
func JITFaster(module string, arch int) bool { return slices.Contains(jitFaster[arch], module) }

// JITFasterModules returns the modules JITFaster reports for architecture
// arch (e.g. 90), sorted: the ones whose JIT code is recorded there.
func JITFasterModules(arch int) []string { return slices.Sorted(slices.Values(jitFaster[arch])) }

// JITCubin returns the machine code the driver's JIT made of module's PTX
// on a GPU of compute capability arch (major*10+minor, e.g. 90), as
// harvested from its JIT cache into jit.json, decompressed, with the
// version of the driver that made it (cuDriverGetVersion, e.g. 13000): the
// cubin needs that driver or a newer one. ok is false when none is recorded
// for exactly that architecture (the JIT's code is made for one device), for
// an unknown module, and (which the ptx tests rule out) for a cubin that
// does not decompress or was recorded from other PTX than the embedded
// module's (a build between ptxgen and a new harvest: the module then
// loads as if none were recorded, never as code of older PTX). Each call
// decompresses afresh; the image is the caller's.
func JITCubin(module string, arch int) (image []byte, driverVersion int, ok bool) {
	return jitCubin(files, module, arch)
}

// ReadJITRecord decodes the embedded jit.json.
func ReadJITRecord() (JITRecord, error) { return readJITRecord(files) }

// Modules returns the names of the embedded modules, sorted.
func Modules() []string { return modules(files) }

// ReadManifest decodes the embedded manifest.json.
func ReadManifest() (Manifest, error) { return readManifest(files) }

func module(fsys fs.FS, name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return nil, fmt.Errorf("ptx: module %q is not a module name; known modules: %s",
			name, strings.Join(modules(fsys), ", "))
	}
	data, err := fs.ReadFile(fsys, name+".ptx")
	if err != nil {
		return nil, fmt.Errorf("ptx: unknown module %q; known modules: %s",
			name, strings.Join(modules(fsys), ", "))
	}
	return data, nil
}

func sass(fsys fs.FS, module string, cc int) ([]byte, int, bool) {
	if module == "" || strings.ContainsAny(module, `/\.`) || cc <= 0 {
		return nil, 0, false
	}
	// A cubin for sm_XYa runs on compute capability X.Y only.
	if gz, err := fs.ReadFile(fsys, ptxfile.SASSFile(module, fmt.Sprintf("sm_%da", cc))); err == nil {
		image, err := gunzip(gz)
		if err != nil {
			return nil, 0, false
		}
		return image, cc, true
	}
	// A cubin for sm_XY runs on compute capability X.Z for Z ≥ Y only.
	for arch := cc; arch >= cc/10*10; arch-- {
		gz, err := fs.ReadFile(fsys, ptxfile.SASSFile(module, fmt.Sprintf("sm_%d", arch)))
		if err != nil {
			continue
		}
		image, err := gunzip(gz)
		if err != nil {
			return nil, 0, false
		}
		return image, arch, true
	}
	return nil, 0, false
}

func jitCubin(fsys fs.FS, module string, arch int) ([]byte, int, bool) {
	if module == "" || strings.ContainsAny(module, `/\.`) || arch <= 0 {
		return nil, 0, false
	}
	rec, err := readJITRecord(fsys)
	if err != nil {
		return nil, 0, false
	}
	sm := fmt.Sprintf("sm_%d", arch)
	img, ok := rec.Image(module, sm)
	if !ok {
		return nil, 0, false
	}
	src, err := fs.ReadFile(fsys, module+".ptx")
	if err != nil {
		return nil, 0, false
	}
	if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != img.PTXSHA256 {
		return nil, 0, false
	}
	gz, err := fs.ReadFile(fsys, ptxfile.JITCubinFile(module, sm))
	if err != nil {
		return nil, 0, false
	}
	image, err := gunzip(gz)
	if err != nil {
		return nil, 0, false
	}
	return image, img.DriverVersion, true
}

func readJITRecord(fsys fs.FS) (JITRecord, error) {
	data, err := fs.ReadFile(fsys, ptxfile.JITFile)
	if err != nil {
		return JITRecord{}, fmt.Errorf("ptx: %w", err)
	}
	r, err := ptxfile.ParseJITRecord(data)
	if err != nil {
		return JITRecord{}, fmt.Errorf("ptx: %w", err)
	}
	return r, nil
}

func gunzip(gz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	image, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	return image, zr.Close()
}

func modules(fsys fs.FS) []string {
	paths, err := fs.Glob(fsys, "*.ptx")
	if err != nil {
		return nil // only for a malformed pattern, which "*.ptx" is not
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(p, ".ptx")
	}
	slices.Sort(names)
	return names
}

func readManifest(fsys fs.FS) (Manifest, error) {
	data, err := fs.ReadFile(fsys, ptxfile.ManifestFile)
	if err != nil {
		return Manifest{}, fmt.Errorf("ptx: %w", err)
	}
	m, err := ptxfile.ParseManifest(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("ptx: %w", err)
	}
	return m, nil
}
