package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// ptxasFlags are the flags every SASS image is assembled with, besides
// -arch=sm_XX, recorded in the manifest: the same optimization level nvcc
// uses.
var ptxasFlags = []string{"-O3"}

// sassArchs are the real architectures ptxgen assembles SASS for, as
// compute capabilities (major*10+minor): Ampere (8.0, 8.6), Ada (8.9) and
// Hopper (9.0). A cubin runs only on its own major version, at its minor
// version or above, so these cover every supported GPU up to Hopper; others
// (Blackwell) JIT the PTX.
var sassArchs = []int{80, 86, 89, 90}

// sassTargets returns the ptxas architectures ("sm_80", …) mod's PTX is
// assembled for: every one of sassArchs at or above the compute capability
// its PTX needs, or, for an arch-specific module, its own arch-specific
// architecture if that capability is one of sassArchs. A compute_80 module
// gets sm_80, sm_86, sm_89 and sm_90; a compute_90 (*_sm90) module sm_90
// only; a compute_90a (*_sm90a) module sm_90a only.
func sassTargets(mod ptxfile.ModuleInfo) ([]string, error) {
	cc, err := mod.ComputeCapability()
	if err != nil {
		return nil, err
	}
	if mod.ArchSpecific() {
		if !slices.Contains(sassArchs, cc) {
			return nil, nil
		}
		return []string{fmt.Sprintf("sm_%da", cc)}, nil
	}
	var archs []string
	for _, a := range sassArchs {
		if a >= cc {
			archs = append(archs, fmt.Sprintf("sm_%d", a))
		}
	}
	return archs, nil
}

// findPTXAS returns the ptxas that ships with nvcc, as an absolute path:
// the one beside nvcc, else the one beside the file nvcc links to (a CUDA
// install linked into /usr/local/bin). Debian's nvidia-cuda-toolkit has both
// in /usr/bin. The SASS must come from the same release as the PTX, so no
// other ptxas is looked for.
func findPTXAS(nvcc string) (string, error) {
	dirs := []string{filepath.Dir(nvcc)}
	if target, err := filepath.EvalSymlinks(nvcc); err == nil && filepath.Dir(target) != dirs[0] {
		dirs = append(dirs, filepath.Dir(target))
	}
	for _, d := range dirs {
		if p, err := exec.LookPath(filepath.Join(d, "ptxas")); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("no ptxas beside %s (looked in %s): the SASS is assembled with the ptxas of the nvcc that built the PTX; "+
		"a CUDA toolkit (Debian's nvidia-cuda-toolkit included) installs both in one folder", nvcc, strings.Join(dirs, ", "))
}

// wantPTXAS90a is the ptxas release the sm_90a SASS in ptx/ is assembled
// with: nvcc 11.8's ptxas does not know PTX ISA 8.0 or sm_90a.
const wantPTXAS90a = "release 12.4"

// ptxas90aEnv names the environment variable that gives the sm_90a ptxas
// when -ptxas90a does not.
const ptxas90aEnv = "PTXAS_SM90A"

// ptxas90aHint says where the sm_90a ptxas comes from.
const ptxas90aHint = "pass -ptxas90a PATH or set " + ptxas90aEnv + " to CUDA 12.4's ptxas " +
	"(Debian trixie's non-free nvidia-cuda-toolkit 12.4.131, extracted with apt-get download and dpkg -x as .ci/run does)"

// findPTXAS90a returns the ptxas that assembles arch-specific (sm_90a)
// modules, as an absolute path: the -ptxas90a flag, else $PTXAS_SM90A, else
// "" (then generation fails if any module needs it). A path given that is
// not an executable is an error.
func findPTXAS90a(flagPath string) (string, error) {
	path, from := flagPath, "-ptxas90a"
	if path == "" {
		path, from = os.Getenv(ptxas90aEnv), ptxas90aEnv
	}
	if path == "" {
		return "", nil
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", from, path, err)
	}
	return filepath.Abs(p)
}

// assemble runs ptxas in dir on the PTX file in (relative to dir) for arch
// ("sm_86"), writing the cubin to out (relative to dir).
func assemble(ctx context.Context, ptxas, dir, arch, in, out string) error {
	args := append([]string{"-arch=" + arch}, ptxasFlags...)
	args = append(args, in, "-o", out)
	cmd := exec.CommandContext(ctx, ptxas, args...)
	cmd.Dir = dir
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ptxas %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(output))
	}
	return nil
}

// compressCubin gzips a cubin reproducibly (ptxfile.CompressCubin): the
// same cubin always gives the same bytes with one Go release, and -check
// compares cubins decompressed for the others.
func compressCubin(cubin []byte) ([]byte, error) { return ptxfile.CompressCubin(cubin) }

// cubinDigest decompresses a .cubin.gz and returns the cubin's hex SHA-256
// and size, the values its manifest record holds.
func cubinDigest(gz []byte) (string, int64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	n, err := io.Copy(h, zr)
	if err != nil {
		return "", 0, err
	}
	if err := zr.Close(); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// splitSASSFile splits a file name made by ptxfile.SASSFile,
// "<module>.<arch>.cubin.gz", into module and arch; ok is false for any
// other name.
func splitSASSFile(file string) (module, arch string, ok bool) {
	stem, ok := strings.CutSuffix(file, ".cubin.gz")
	if !ok {
		return "", "", false
	}
	dot := strings.LastIndexByte(stem, '.')
	if dot <= 0 || dot == len(stem)-1 {
		return "", "", false
	}
	return stem[:dot], stem[dot+1:], true
}
