package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// kernelsDir is where the CUDA sources live, relative to the repository root.
const kernelsDir = "kernels_src"

// nvccFlags are the flags every module is compiled with, recorded in the
// manifest. No fast-math: it changes results. A module with its own arch
// (see archSuffixes) swaps the -arch flag and keeps the rest.
var nvccFlags = []string{"-ptx", "-arch=" + ptxfile.DefaultArch, "-O3", "-std=c++17", "-I" + kernelsDir}

// archSuffixes maps a module-name suffix to the virtual architecture such a
// module is compiled for instead of ptxfile.DefaultArch, as the manifest
// records it; a name matches the first suffix it ends with.
//
//   - kernels_src/decode_f16_sm90a.cu becomes decode_f16_sm90a.ptx for
//     compute_90a, for kernels that use Hopper-only instructions (wgmma,
//     setmaxnreg): nvcc 11.8 knows no compute_90a, so it compiles for
//     compute_90 and retargetPTX rewrites the header to PTX ISA 8.0 and
//     .target sm_90a. Such PTX and its sm_90a SASS run on compute
//     capability 9.0 only.
//   - kernels_src/decode_f16_sm90.cu becomes decode_f16_sm90.ptx, compiled
//     with -arch=compute_90, for kernels that use sm_90 features
//     (thread-block clusters, distributed shared memory).
//
// Every other module stays DefaultArch, so its PTX keeps loading on every
// supported GPU.
var archSuffixes = []struct{ suffix, arch string }{
	{"_sm90a", "compute_90a"},
	{"_sm90", "compute_90"},
}

// moduleArch returns the arch module name is compiled for, or "" for
// ptxfile.DefaultArch (which is how the manifest records it).
func moduleArch(name string) string {
	for _, a := range archSuffixes {
		if strings.HasSuffix(name, a.suffix) {
			return a.arch
		}
	}
	return ""
}

// nvccArch returns the -arch nvcc compiles a module of arch for: arch
// itself, except that an arch-specific arch (compute_90a), which nvcc 11.8
// does not know, is compiled for its base (compute_90) and retargeted.
func nvccArch(arch string) string {
	if ptxfile.ArchSpecific(arch) {
		return strings.TrimSuffix(arch, "a")
	}
	return arch
}

// flagsFor returns nvccFlags with -arch set for arch (see nvccArch; ""
// keeps the default).
func flagsFor(arch string) []string {
	flags := slices.Clone(nvccFlags)
	if arch == "" {
		return flags
	}
	for i, f := range flags {
		if strings.HasPrefix(f, "-arch=") {
			flags[i] = "-arch=" + nvccArch(arch)
		}
	}
	return flags
}

// ptxRetarget is how the header of the PTX nvcc 11.8 writes for an
// arch-specific module's base arch becomes that of the arch-specific one:
// each line, matched whole, is replaced.
type ptxRetarget struct {
	version, target         string // what nvcc writes, e.g. ".version 7.8", ".target sm_90"
	wantVersion, wantTarget string // what they become, e.g. ".version 8.0", ".target sm_90a"
}

// retargets holds the header rewrite of each arch-specific arch: sm_90a
// needs PTX ISA 8.0, where nvcc 11.8 writes 7.8 for compute_90. The body
// is valid PTX 8.0 as it stands, since 8.0 only adds to 7.8.
var retargets = map[string]ptxRetarget{
	"compute_90a": {".version 7.8", ".target sm_90", ".version 8.0", ".target sm_90a"},
}

// retargetPTX returns ptx, compiled for nvccArch(arch), with its header
// rewritten for arch: for an arch-specific arch, its .version and .target
// lines, each of which must occur exactly once; any other arch returns ptx
// as it is.
func retargetPTX(ptx []byte, arch string) ([]byte, error) {
	if !ptxfile.ArchSpecific(arch) {
		return ptx, nil
	}
	r, ok := retargets[arch]
	if !ok {
		return nil, fmt.Errorf("no PTX header rewrite for arch %s", arch)
	}
	lines := bytes.Split(ptx, []byte("\n"))
	for _, sub := range [][2]string{{r.version, r.wantVersion}, {r.target, r.wantTarget}} {
		var at []int
		for i, l := range lines {
			if string(l) == sub[0] {
				at = append(at, i)
			}
		}
		if len(at) != 1 {
			return nil, fmt.Errorf("retargeting the PTX for %s: it has %d lines %q, not exactly one (nvcc %s writes one for -arch=%s)",
				arch, len(at), sub[0], strings.TrimPrefix(wantNVCC, "release "), nvccArch(arch))
		}
		lines[at[0]] = []byte(sub[1])
	}
	return bytes.Join(lines, []byte("\n")), nil
}

const installHint = `nvcc not found on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin (or use -nvcc PATH); ` +
	`to install it on Debian, add "contrib non-free" to the Components of /etc/apt/sources.list.d/debian.sources, ` +
	`then apt-get install nvidia-cuda-toolkit (nvcc 11.8)`

// findNVCC returns the nvcc to use: the -nvcc flag, else nvcc on PATH, else
// $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc.
func findNVCC(flagPath string) (string, error) {
	if flagPath != "" {
		p, err := exec.LookPath(flagPath)
		if err != nil {
			return "", fmt.Errorf("-nvcc %s: %w", flagPath, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("nvcc"); err == nil {
		return p, nil
	}
	var candidates []string
	if home := os.Getenv("CUDA_HOME"); home != "" {
		candidates = append(candidates, filepath.Join(home, "bin", "nvcc"))
	}
	candidates = append(candidates, "/usr/local/cuda/bin/nvcc")
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New(installHint)
}

var versionRE = regexp.MustCompile(`release (\d+\.\d+), V(\d+\.\d+\.\d+)`)

// toolVersion returns the "release X.Y, VX.Y.Z" part of `tool --version`,
// which nvcc and ptxas both print.
func toolVersion(ctx context.Context, tool string) (string, error) {
	out, err := exec.CommandContext(ctx, tool, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w\n%s", tool, err, out)
	}
	v := versionRE.Find(out)
	if v == nil {
		return "", fmt.Errorf("%s --version: no \"release X.Y, VX.Y.Z\" in its output:\n%s", tool, out)
	}
	return string(v), nil
}

func isWantedVersion(version string) bool {
	return strings.HasPrefix(version, wantNVCC+",")
}

// compile runs nvcc in root on src (relative to root) with flags, writing
// the PTX to out.
func compile(ctx context.Context, nvcc, root string, flags []string, src, out string) error {
	args := append(slices.Clone(flags), "-o", out, src)
	cmd := exec.CommandContext(ctx, nvcc, args...)
	cmd.Dir = root
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nvcc %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(output))
	}
	return nil
}

// dependencies returns src and every file it includes that lies inside root,
// as sorted root-relative paths with forward slashes. It asks nvcc itself
// (-M, with the module's compile flags, arch included, so __CUDA_ARCH__
// tests resolve as they do for the PTX) so the list follows the preprocessor
// exactly; system and CUDA headers fall outside root and are dropped.
func dependencies(ctx context.Context, nvcc, root string, flags []string, src string) ([]string, error) {
	args := []string{"-M"}
	for _, f := range flags {
		if f != "-ptx" {
			args = append(args, f)
		}
	}
	args = append(args, src)
	cmd := exec.CommandContext(ctx, nvcc, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nvcc %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	paths, err := parseDepfile(stdout.String())
	if err != nil {
		return nil, fmt.Errorf("nvcc %s: %w", strings.Join(args, " "), err)
	}
	seen := map[string]bool{filepath.ToSlash(src): true}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		seen[filepath.ToSlash(rel)] = true
	}
	deps := make([]string, 0, len(seen))
	for p := range seen {
		deps = append(deps, p)
	}
	slices.Sort(deps)
	return deps, nil
}

// parseDepfile reads make-style dependency output ("target : dep dep \
// dep …") and returns the prerequisites. Backslash-newline continues a line
// and "\ " is a space inside a path.
func parseDepfile(s string) ([]string, error) {
	s = strings.ReplaceAll(s, "\\\r\n", " ")
	s = strings.ReplaceAll(s, "\\\n", " ")
	var deps []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		// The target never contains ": " while a Windows drive letter would
		// be "C:\", so split at the first ": " or a trailing ":".
		colon := strings.Index(line, ": ")
		if colon < 0 {
			if !strings.HasSuffix(strings.TrimSpace(line), ":") {
				return nil, fmt.Errorf("unexpected dependency line %q", line)
			}
			continue
		}
		var cur strings.Builder
		flush := func() {
			if cur.Len() > 0 {
				deps = append(deps, cur.String())
				cur.Reset()
			}
		}
		rest := line[colon+2:]
		for i := 0; i < len(rest); i++ {
			c := rest[i]
			switch {
			case c == '\\' && i+1 < len(rest) && (rest[i+1] == ' ' || rest[i+1] == '#'):
				cur.WriteByte(rest[i+1])
				i++
			case c == '$' && i+1 < len(rest) && rest[i+1] == '$':
				cur.WriteByte('$')
				i++
			case c == ' ' || c == '\t':
				flush()
			default:
				cur.WriteByte(c)
			}
		}
		flush()
	}
	return deps, nil
}
