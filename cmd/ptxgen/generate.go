package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// namesFile is the generated Go file of module and entry-point constants.
const namesFile = "names.go"

type generator struct {
	root         string // repository root; nvcc runs here
	nvcc         string
	version      string // nvcc's "release X.Y, VX.Y.Z"
	ptxas        string
	ptxasVersion string // ptxas's "release X.Y, VX.Y.Z"
	// ptxas90a assembles the arch-specific (sm_90a) modules, whose PTX ISA
	// 8.0 nvcc 11.8's ptxas cannot read; "" when none was given, which
	// fails generation if such a module exists.
	ptxas90a        string
	ptxas90aVersion string // its "release X.Y, VX.Y.Z"
}

// module is one compiled .cu and the SASS assembled from its PTX.
type module struct {
	info ptxfile.ModuleInfo // SASS included
	ptx  []byte
	sass [][]byte // gzip-compressed cubins, in the order of info.SASS
}

// generate compiles every kernels_src/*.cu and writes <name>.ptx, the
// <name>.sm_XX.cubin.gz that ptxas assembles from that PTX for each of the
// module's sassTargets, manifest.json and names.go into outDir, removing
// *.ptx and *.cubin.gz files there that it no longer produces, except the
// recorded JIT cubins (*.jit.cubin.gz, listed in jit.json), which only a
// GPU can make and which it leaves, like jit.json, as they are. nvcc and
// ptxas run in parallel, at most GOMAXPROCS at a time, each module's ptxas
// jobs as soon as its PTX is ready; every failing module and architecture is
// reported. Nothing is written unless everything succeeded.
func (g generator) generate(ctx context.Context, outDir string) (ptxfile.Manifest, error) {
	srcs, err := filepath.Glob(filepath.Join(g.root, kernelsDir, "*.cu"))
	if err != nil {
		return ptxfile.Manifest{}, err
	}
	if len(srcs) == 0 {
		return ptxfile.Manifest{}, fmt.Errorf("no %s/*.cu under %s", kernelsDir, g.root)
	}
	slices.Sort(srcs)
	if g.ptxas90a == "" {
		var need []string
		for _, src := range srcs {
			if ptxfile.ArchSpecific(moduleArch(strings.TrimSuffix(filepath.Base(src), ".cu"))) {
				need = append(need, filepath.ToSlash(filepath.Join(kernelsDir, filepath.Base(src))))
			}
		}
		if len(need) > 0 {
			return ptxfile.Manifest{}, fmt.Errorf("%s: sm_90a SASS needs a ptxas that reads PTX ISA 8.0 (%s), not nvcc's; %s",
				strings.Join(need, ", "), wantPTXAS90a, ptxas90aHint)
		}
	}

	work, err := os.MkdirTemp("", "ptxgen-")
	if err != nil {
		return ptxfile.Manifest{}, err
	}
	defer os.RemoveAll(work)

	modules := make([]module, len(srcs))
	errs := make([]error, len(srcs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := strings.TrimSuffix(filepath.Base(src), ".cu")
			rel := filepath.ToSlash(filepath.Join(kernelsDir, filepath.Base(src)))
			modules[i], errs[i] = g.buildAll(ctx, sem, work, name, rel)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return ptxfile.Manifest{}, err
	}

	m := ptxfile.Manifest{NVCC: g.version, Flags: slices.Clone(nvccFlags), PTXASFlags: slices.Clone(ptxasFlags)}
	if g.ptxasVersion != g.version {
		m.PTXAS = g.ptxasVersion
	}
	for _, mod := range modules {
		m.Modules = append(m.Modules, mod.info)
	}
	manifest, err := m.Marshal()
	if err != nil {
		return ptxfile.Manifest{}, err
	}
	names, err := renderNames(m)
	if err != nil {
		return ptxfile.Manifest{}, err
	}

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return ptxfile.Manifest{}, err
	}
	keep := map[string]bool{}
	write := func(file string, data []byte) error {
		keep[file] = true
		return os.WriteFile(filepath.Join(outDir, file), data, 0o644)
	}
	for _, mod := range modules {
		if err := write(mod.info.Name+".ptx", mod.ptx); err != nil {
			return ptxfile.Manifest{}, err
		}
		for i, img := range mod.info.SASS {
			if err := write(ptxfile.SASSFile(mod.info.Name, img.Arch), mod.sass[i]); err != nil {
				return ptxfile.Manifest{}, err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(outDir, ptxfile.ManifestFile), manifest, 0o644); err != nil {
		return ptxfile.Manifest{}, err
	}
	if err := os.WriteFile(filepath.Join(outDir, namesFile), names, 0o644); err != nil {
		return ptxfile.Manifest{}, err
	}
	if err := removeStale(outDir, keep); err != nil {
		return ptxfile.Manifest{}, err
	}
	return m, nil
}

// removeStale removes the *.ptx and *.cubin.gz files in outDir that keep
// does not name, except the recorded JIT cubins (*.jit.cubin.gz).
func removeStale(outDir string, keep map[string]bool) error {
	for _, pattern := range []string{"*.ptx", "*.cubin.gz"} {
		stale, err := filepath.Glob(filepath.Join(outDir, pattern))
		if err != nil {
			return err
		}
		for _, p := range stale {
			if !keep[filepath.Base(p)] && !ptxfile.IsJITCubinFile(filepath.Base(p)) {
				if err := os.Remove(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// buildAll compiles one module (holding a slot of sem while nvcc runs), then
// assembles its PTX for each of its sassTargets in parallel (each ptxas job
// holding a slot of its own). Errors name the module, and the architecture
// where ptxas failed.
func (g generator) buildAll(ctx context.Context, sem chan struct{}, work, name, src string) (module, error) {
	sem <- struct{}{}
	mod, err := g.build(ctx, work, name, src)
	<-sem
	if err != nil {
		return module{}, fmt.Errorf("module %s: %w", name, err)
	}
	archs, err := sassTargets(mod.info)
	if err != nil {
		return module{}, err // names the module
	}
	ptxas := g.ptxas
	if mod.info.ArchSpecific() {
		if g.ptxas90a == "" { // generate checks this first
			return module{}, fmt.Errorf("module %s: no sm_90a ptxas; %s", name, ptxas90aHint)
		}
		ptxas = g.ptxas90a
		mod.info.PTXAS = g.ptxas90aVersion
	}
	mod.info.SASS = make([]ptxfile.SASSImage, len(archs))
	mod.sass = make([][]byte, len(archs))
	errs := make([]error, len(archs))
	var wg sync.WaitGroup
	for i, arch := range archs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			mod.info.SASS[i], mod.sass[i], errs[i] = g.assemble(ctx, ptxas, work, name, arch)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("module %s, %s: %w", name, arch, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return module{}, err
	}
	return mod, nil
}

// assemble runs ptxas on the module's PTX in work (<name>.ptx, written by
// build) for arch, and returns the cubin's manifest record and the cubin
// compressed.
func (g generator) assemble(ctx context.Context, ptxas, work, name, arch string) (ptxfile.SASSImage, []byte, error) {
	out := name + "." + arch + ".cubin"
	if err := assemble(ctx, ptxas, work, arch, name+".ptx", out); err != nil {
		return ptxfile.SASSImage{}, nil, err
	}
	cubin, err := os.ReadFile(filepath.Join(work, out))
	if err != nil {
		return ptxfile.SASSImage{}, nil, err
	}
	if !bytes.HasPrefix(cubin, []byte("\x7fELF")) {
		return ptxfile.SASSImage{}, nil, fmt.Errorf("ptxas wrote %s, which is not an ELF file", out)
	}
	// ptxas 11.8's and 12.4's cubins are reproducible as they come (the
	// same bytes from two builds and from two source paths), so nothing is
	// normalized; as for the PTX, a path inside one fails generation
	// rather than making the output differ from machine to machine.
	for _, p := range []string{g.root, work} {
		if bytes.Contains(cubin, []byte(p)) {
			return ptxfile.SASSImage{}, nil, fmt.Errorf("the cubin contains the path %q, so it is not reproducible; teach ptxgen to normalize it", p)
		}
	}
	gz, err := compressCubin(cubin)
	if err != nil {
		return ptxfile.SASSImage{}, nil, err
	}
	return ptxfile.SASSImage{Arch: arch, SHA256: sha256Hex(cubin), Size: int64(len(cubin))}, gz, nil
}

// build compiles one module into work (as <name>.ptx) and collects its
// manifest record, all but the SASS.
func (g generator) build(ctx context.Context, work, name, src string) (module, error) {
	out := filepath.Join(work, name+".ptx")
	arch := moduleArch(name)
	flags := flagsFor(arch)
	if err := compile(ctx, g.nvcc, g.root, flags, src, out); err != nil {
		return module{}, err
	}
	ptx, err := os.ReadFile(out)
	if err != nil {
		return module{}, err
	}
	// An arch-specific module's header is rewritten here, so the PTX that
	// is hashed, embedded and assembled is the retargeted one.
	if ptxfile.ArchSpecific(arch) {
		if ptx, err = retargetPTX(ptx, arch); err != nil {
			return module{}, err
		}
		if err := os.WriteFile(out, ptx, 0o644); err != nil {
			return module{}, err
		}
	}
	// nvcc 11.8's PTX is reproducible as it comes: its header comment holds
	// only the compiler build ID and version, never a date or a path, and
	// the output is byte-identical whatever the working directory, output
	// path or source path. So nothing is normalized. This guard keeps it so:
	// if a future nvcc starts embedding paths, generation fails here rather
	// than producing PTX that differs from machine to machine.
	for _, p := range []string{g.root, work} {
		if bytes.Contains(ptx, []byte(p)) {
			return module{}, fmt.Errorf("the PTX contains the path %q, so it is not reproducible; teach ptxgen to normalize it", p)
		}
	}
	entries, err := ptxfile.EntryNames(ptx)
	if err != nil {
		return module{}, err
	}
	if len(entries) == 0 {
		return module{}, fmt.Errorf("%s defines no kernel (.entry); is its extern \"C\" __global__ missing?", src)
	}
	slices.Sort(entries)

	deps, err := dependencies(ctx, g.nvcc, g.root, flags, src)
	if err != nil {
		return module{}, err
	}
	sources := make(map[string]string, len(deps))
	for _, d := range deps {
		data, err := os.ReadFile(filepath.Join(g.root, filepath.FromSlash(d)))
		if err != nil {
			return module{}, err
		}
		sources[d] = sha256Hex(data)
	}
	return module{
		info: ptxfile.ModuleInfo{
			Name:      name,
			Source:    src,
			Arch:      arch,
			Sources:   sources,
			PTXSHA256: sha256Hex(ptx),
			Entries:   entries,
		},
		ptx: ptx,
	}, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// renderNames writes names.go: a constant per module (ModuleDecodeF16) and
// per entry point (PagedDecodeF16Hd128), so a typo in a kernel name is a
// compile error rather than a failed cuModuleGetFunction, and the map behind
// ptx.ModuleComputeCapability.
func renderNames(m ptxfile.Manifest) ([]byte, error) {
	used := map[string]string{} // Go name → what it names, to catch collisions
	claim := func(goName, what string) error {
		if prev, ok := used[goName]; ok {
			return fmt.Errorf("%s and %s both become the Go constant %s", prev, what, goName)
		}
		used[goName] = what
		return nil
	}

	var b bytes.Buffer
	b.WriteString("// Code generated by cmd/ptxgen; DO NOT EDIT.\n\npackage ptx\n\n")
	b.WriteString("// Module names: the argument of Module.\nconst (\n")
	for _, mod := range m.Modules {
		goName := "Module" + camel(mod.Name)
		if err := claim(goName, "module "+mod.Name); err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\t%s = %q\n", goName, mod.Name)
	}
	b.WriteString(")\n")
	defaultCC, err := ptxfile.ModuleInfo{}.ComputeCapability()
	if err != nil {
		return nil, err
	}
	b.WriteString("\n// moduleComputeCapability maps each module whose PTX needs more than\n" +
		"// the default compute capability to what it needs (major*10+minor);\n" +
		"// see ModuleComputeCapability.\nvar moduleComputeCapability = map[string]int{\n")
	for _, mod := range m.Modules {
		cc, err := mod.ComputeCapability()
		if err != nil {
			return nil, err
		}
		if cc != defaultCC {
			fmt.Fprintf(&b, "\tModule%s: %d,\n", camel(mod.Name), cc)
		}
	}
	b.WriteString("}\n")
	for _, mod := range m.Modules {
		fmt.Fprintf(&b, "\n// Entry points of %s.ptx (%s).\nconst (\n", mod.Name, mod.Source)
		for _, e := range mod.Entries {
			goName := camel(e)
			if goName == "" || !isUpperLetter(goName[0]) {
				return nil, fmt.Errorf("entry point %s of module %s has no usable Go name", e, mod.Name)
			}
			if err := claim(goName, "entry point "+e); err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "\t%s = %q\n", goName, e)
		}
		b.WriteString(")\n")
	}
	return format.Source(b.Bytes())
}

// camel turns snake_case into CamelCase: cache_append_flash_f16 →
// CacheAppendFlashF16.
func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

func isUpperLetter(c byte) bool { return 'A' <= c && c <= 'Z' }
