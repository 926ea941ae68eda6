// Command ptxgen regenerates ptx/ from kernels_src/: it compiles every
// kernels_src/*.cu with nvcc into ptx/<name>.ptx, assembles that PTX with
// ptxas into machine code (SASS) for each real architecture the module can
// run on, stored gzip-compressed as ptx/<name>.sm_XX.cubin.gz, and writes
// ptx/manifest.json (source hashes, nvcc and ptxas versions and flags, PTX
// hashes, entry points and SASS hashes per module) and ptx/names.go (a
// constant per module and entry point).
//
// A module's kind follows the suffix of its source's name, and the manifest
// records its "arch" (ptx.ModuleComputeCapability and ptx.ModuleRunsOn read
// it):
//
//   - kernels_src/<name>.cu: compiled with -arch=compute_80, so it loads on
//     every supported GPU; SASS for sm_80, sm_86, sm_89 and sm_90.
//   - kernels_src/<name>_sm90.cu: compiled with -arch=compute_90 (all other
//     flags the same), for kernels that use sm_90 features such as
//     thread-block clusters; it loads on compute capability 9.0 and newer.
//     SASS for sm_90 only.
//   - kernels_src/<name>_sm90a.cu: arch "compute_90a", for kernels that use
//     Hopper-only instructions (wgmma, setmaxnreg). nvcc 11.8 knows no
//     compute_90a, so it is compiled with -arch=compute_90 and the PTX
//     header's two lines ".version 7.8" and ".target sm_90" become
//     ".version 8.0" and ".target sm_90a" (generation fails unless each
//     occurs exactly once); that PTX is what ptx/ holds and the manifest
//     hashes. It loads on compute capability 9.0 only (neither 8.x nor
//     10.x), and needs a CUDA 12.0 or newer driver for PTX ISA 8.0. SASS
//     for sm_90a only, as ptx/<name>.sm_90a.cubin.gz.
//
// The SASS is assembled with ptxas -arch=sm_XX -O3 from the generated PTX,
// not from the .cu, so it is exactly what that PTX assembles to, and loading
// it skips the driver's JIT (seconds per module on a machine whose JIT cache
// is cold); ptx.SASS picks the image for a device. The ptxas beside nvcc
// (11.8) assembles every module but the *_sm90a ones, whose PTX ISA 8.0 it
// cannot read: those are assembled by CUDA 12.4's ptxas (Debian trixie's
// non-free nvidia-cuda-toolkit 12.4.131, unpacked as .ci/run does), given
// by -ptxas90a or $PTXAS_SM90A. Generation fails, naming both, when a
// *_sm90a module exists and neither is given; without such a module
// neither is needed. The manifest records that ptxas's version per module.
//
// Usage, from anywhere inside the repository:
//
//	go run ./cmd/ptxgen [-nvcc PATH] [-ptxas90a PATH] [-o DIR] [-check]
//
// ptx/jit.json and the ptx/<name>.sm_XX.jit.cubin.gz it lists are not
// ptxgen's: they hold the driver JIT's code, which only a GPU can make
// (harvested from its JIT cache: scripts/jit_harvest.py). ptxgen leaves
// them in place and -check does not compare them; the ptx tests check each
// against the PTX it was made from.
//
// -check regenerates into a temporary folder and compares it with ptx/ (or
// DIR), naming every module (and, for SASS, architecture) that differs, is
// missing or is extra, and exits 1 if anything does. Cubins, sm_90a ones
// included, are compared decompressed, so a Go release whose compress/gzip
// writes other bytes does not make ptx/ stale. The embedded PTX is built
// with nvcc 11.8 (PTX ISA 7.8, which every driver from 520 on can JIT) and
// assembled with its ptxas, the sm_90a SASS with ptxas 12.4; another nvcc
// or ptxas version is a warning, and under -check it is named as the likely
// cause of any difference.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
)

// wantNVCC is the nvcc release the committed PTX is built with.
const wantNVCC = "release 11.8"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ptxgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nvccFlag := fs.String("nvcc", "", "path of nvcc (default: nvcc on PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin)")
	ptxas90aFlag := fs.String("ptxas90a", "", "path of the ptxas (CUDA 12.4's) that assembles the *_sm90a modules' SASS (default: $"+ptxas90aEnv+"; needed only when such a module exists)")
	outFlag := fs.String("o", "", "output folder (default: ptx/ under the repository root)")
	check := fs.Bool("check", false, "regenerate into a temporary folder and fail if the output folder differs")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./cmd/ptxgen [-nvcc PATH] [-ptxas90a PATH] [-o DIR] [-check]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ptxgen: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}

	if err := runErr(ctx, *nvccFlag, *ptxas90aFlag, *outFlag, *check, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "ptxgen: %v\n", err)
		return 1
	}
	return 0
}

func runErr(ctx context.Context, nvccPath, ptxas90aPath, outDir string, check bool, stdout, stderr io.Writer) error {
	root, err := findRoot()
	if err != nil {
		return err
	}
	if outDir == "" {
		outDir = filepath.Join(root, "ptx")
	} else if outDir, err = filepath.Abs(outDir); err != nil {
		return err
	}
	nvcc, err := findNVCC(nvccPath)
	if err != nil {
		return err
	}
	version, err := toolVersion(ctx, nvcc)
	if err != nil {
		return err
	}
	ptxas, err := findPTXAS(nvcc)
	if err != nil {
		return err
	}
	ptxasVersion, err := toolVersion(ctx, ptxas)
	if err != nil {
		return err
	}
	versionOK := isWantedVersion(version)
	if !versionOK {
		fmt.Fprintf(stderr, "ptxgen: warning: %s is nvcc %s; ptx/ is meant to be built with nvcc 11.8 (%s), whose PTX every driver from 520 on can load\n",
			nvcc, version, wantNVCC)
	}
	ptxasOK := isWantedVersion(ptxasVersion)
	if !ptxasOK {
		fmt.Fprintf(stderr, "ptxgen: warning: %s is ptxas %s; the SASS in ptx/ is meant to be assembled by ptxas 11.8 (%s)\n",
			ptxas, ptxasVersion, wantNVCC)
	}
	ptxas90a, err := findPTXAS90a(ptxas90aPath)
	if err != nil {
		return err
	}
	ptxas90aVersion := ""
	if ptxas90a != "" {
		if ptxas90aVersion, err = toolVersion(ctx, ptxas90a); err != nil {
			return err
		}
		if !strings.HasPrefix(ptxas90aVersion, wantPTXAS90a+",") {
			fmt.Fprintf(stderr, "ptxgen: warning: %s is ptxas %s; the sm_90a SASS in ptx/ is meant to be assembled by ptxas 12.4 (%s)\n",
				ptxas90a, ptxas90aVersion, wantPTXAS90a)
		}
	}

	g := generator{root: root, nvcc: nvcc, version: version, ptxas: ptxas, ptxasVersion: ptxasVersion,
		ptxas90a: ptxas90a, ptxas90aVersion: ptxas90aVersion}
	if !check {
		m, err := g.generate(ctx, outDir)
		if err != nil {
			return err
		}
		entries, images, specific := 0, 0, false
		for _, mod := range m.Modules {
			entries += len(mod.Entries)
			images += len(mod.SASS)
			specific = specific || mod.ArchSpecific()
		}
		tools := "nvcc and ptxas " + version
		if ptxasVersion != version {
			tools = "nvcc " + version + ", ptxas " + ptxasVersion
		}
		if specific {
			tools += ", sm_90a ptxas " + ptxas90aVersion
		}
		fmt.Fprintf(stdout, "ptxgen: wrote %s: %d modules, %d entry points, %d SASS images (%s)\n",
			relOrAbs(root, outDir), len(m.Modules), entries, images, tools)
		return nil
	}

	tmp, err := os.MkdirTemp("", "ptxgen-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := g.generate(ctx, tmp); err != nil {
		return err
	}
	diffs, err := compareDirs(outDir, tmp)
	if err != nil {
		return err
	}
	shown := relOrAbs(root, outDir)
	if len(diffs) == 0 {
		fmt.Fprintf(stdout, "ptxgen: %s is up to date\n", shown)
		return nil
	}
	fmt.Fprintf(stderr, "ptxgen: %s is stale:\n", shown)
	for _, d := range diffs {
		fmt.Fprintf(stderr, "  %s\n", d)
	}
	if causes := likelyCauses(version, ptxasVersion, ptxas90aVersion); len(causes) > 0 {
		for _, c := range causes {
			fmt.Fprintf(stderr, "ptxgen: %s\n", c)
		}
		return errors.New("check failed")
	}
	return errors.New("check failed: run `go run ./cmd/ptxgen` and commit the result")
}

// likelyCauses names each tool whose version is not the one ptx/ is built
// with, as the likely cause of a difference -check found: nvcc and its
// ptxas (which must be 11.8), and the sm_90a ptxas (12.4; "" when none was
// given, which no module then needed).
func likelyCauses(nvccVersion, ptxasVersion, ptxas90aVersion string) []string {
	var causes []string
	if !isWantedVersion(nvccVersion) {
		causes = append(causes, fmt.Sprintf("this nvcc is %s, not %s: a different nvcc emits different PTX, which is the likely cause", nvccVersion, wantNVCC))
	}
	if !isWantedVersion(ptxasVersion) {
		causes = append(causes, fmt.Sprintf("this ptxas is %s, not %s: a different ptxas emits different SASS, which is the likely cause", ptxasVersion, wantNVCC))
	}
	if ptxas90aVersion != "" && !strings.HasPrefix(ptxas90aVersion, wantPTXAS90a+",") {
		causes = append(causes, fmt.Sprintf("the sm_90a ptxas is %s, not %s: a different ptxas emits different sm_90a SASS, which is the likely cause", ptxas90aVersion, wantPTXAS90a))
	}
	return causes
}

// findRoot walks up from the working directory to the folder holding go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or above it; run ptxgen inside the repository")
		}
		dir = parent
	}
}

// relOrAbs returns path relative to root when it lies inside root.
func relOrAbs(root, path string) string {
	if rel, err := filepath.Rel(root, path); err == nil && filepath.IsLocal(rel) {
		return filepath.ToSlash(rel) + "/"
	}
	return path
}
