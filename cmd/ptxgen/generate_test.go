package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// fakeNVCC stands in for nvcc 11.8: --version, -M (one dependency line) and
// -ptx (a one-kernel PTX named after the source, whose header is what nvcc
// 11.8 writes: .version 7.8 and the .target of -arch).
const fakeNVCC = `#!/bin/sh
if [ "$1" = --version ]; then echo "Cuda compilation tools, release 11.8, V11.8.89"; exit 0; fi
out= src= arch= dep=
while [ $# -gt 0 ]; do
  case "$1" in
    -M) dep=1 ;;
    -arch=compute_*) arch=${1#-arch=compute_} ;;
    -o) out=$2; shift ;;
    -*) ;;
    *) src=$1 ;;
  esac
  shift
done
if [ -n "$dep" ]; then echo "x.o : $src"; exit 0; fi
name=$(basename "$src" .cu)
printf '//\n// fake nvcc\n//\n\n.version 7.8\n.target sm_%s\n.address_size 64\n\n.visible .entry %s_k(\n\t.param .u64 %s_k_param_0\n)\n{\n\tret;\n}\n' "$arch" "$name" "$name" >"$out"
`

// fakePTXAS returns a stand-in for a ptxas of version ("release X.Y,
// VX.Y.Z"): its "cubin" names the version, the -arch, code (what it makes
// of the PTX) and the .target of the PTX it read.
func fakePTXAS(version, code string) string {
	return `#!/bin/sh
if [ "$1" = --version ]; then echo "Cuda compilation tools, ` + version + `"; exit 0; fi
arch= in= out=
while [ $# -gt 0 ]; do
  case "$1" in
    -arch=*) arch=${1#-arch=} ;;
    -o) out=$2; shift ;;
    -*) ;;
    *) in=$1 ;;
  esac
  shift
done
{ printf '\177ELF ` + version + ` %s ` + code + `\n' "$arch"; grep '^\.target' "$in"; } >"$out"
`
}

// ptxgenFixture is a repository with a compute_80, a compute_90 and a
// compute_90a module, fake nvcc 11.8 (with its ptxas beside it) and fake
// sm_90a ptxases of two versions that make different code; the working
// directory is its root.
type ptxgenFixture struct {
	root, nvcc, ptxas124, ptxas125 string
}

func newPTXGenFixture(t *testing.T) ptxgenFixture {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("uses executable shell scripts")
	}
	root := t.TempDir()
	write := func(path, body string, mode os.FileMode) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(body), mode))
	}
	write(filepath.Join(root, "go.mod"), "module fixture\n", 0o644)
	for _, name := range []string{"tiny", "tiny_sm90", "tiny_sm90a"} {
		write(filepath.Join(root, kernelsDir, name+".cu"), `extern "C" __global__ void `+name+"_k(float *out) {}\n", 0o644)
	}
	tools := t.TempDir()
	f := ptxgenFixture{
		root:     root,
		nvcc:     filepath.Join(tools, "cuda118", "nvcc"),
		ptxas124: filepath.Join(tools, "cuda124", "ptxas"),
		ptxas125: filepath.Join(tools, "cuda125", "ptxas"),
	}
	write(f.nvcc, fakeNVCC, 0o755)
	write(filepath.Join(tools, "cuda118", "ptxas"), fakePTXAS("release 11.8, V11.8.89", "code"), 0o755)
	write(f.ptxas124, fakePTXAS("release 12.4, V12.4.131", "code"), 0o755)
	write(f.ptxas125, fakePTXAS("release 12.5, V12.5.40", "other code"), 0o755)
	t.Chdir(root)
	t.Setenv(ptxas90aEnv, "")
	return f
}

// runPTXGen runs ptxgen with args and returns its exit code, stdout and
// stderr.
func runPTXGen(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func gunzipFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	cubin, err := io.ReadAll(zr)
	require.NoError(t, err)
	return string(cubin)
}

// TestGenerateSM90a runs ptxgen end to end over a fixture holding every
// kind of module, with fake tools: the _sm90a module is compiled for
// compute_90, retargeted to PTX ISA 8.0 for sm_90a, assembled by the
// sm_90a ptxas for sm_90a only, and recorded as such; -check compares its
// cubin and names the sm_90a ptxas when it differs.
func TestGenerateSM90a(t *testing.T) {
	f := newPTXGenFixture(t)
	out := filepath.Join(f.root, "out")

	// No sm_90a ptxas: a clear error, nothing written.
	code, _, stderr := runPTXGen(t, "-nvcc", f.nvcc, "-o", out)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "kernels_src/tiny_sm90a.cu: sm_90a SASS needs a ptxas that reads PTX ISA 8.0 (release 12.4), not nvcc's; pass -ptxas90a PATH or set PTXAS_SM90A")
	assert.NoDirExists(t, out)

	code, stdout, stderr := runPTXGen(t, "-nvcc", f.nvcc, "-ptxas90a", f.ptxas124, "-o", out)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.Equal(t, "ptxgen: wrote out/: 3 modules, 3 entry points, 6 SASS images (nvcc and ptxas release 11.8, V11.8.89, sm_90a ptxas release 12.4, V12.4.131)\n", stdout)

	ptx, err := os.ReadFile(filepath.Join(out, "tiny_sm90a.ptx"))
	require.NoError(t, err)
	assert.Contains(t, string(ptx), "\n.version 8.0\n.target sm_90a\n")
	plain, err := os.ReadFile(filepath.Join(out, "tiny_sm90.ptx"))
	require.NoError(t, err)
	assert.Contains(t, string(plain), "\n.version 7.8\n.target sm_90\n", "a _sm90 module is not retargeted")

	data, err := os.ReadFile(filepath.Join(out, ptxfile.ManifestFile))
	require.NoError(t, err)
	m, err := ptxfile.ParseManifest(data)
	require.NoError(t, err)
	assert.Empty(t, m.PTXAS)
	archs := map[string][]string{}
	for _, mod := range m.Modules {
		for _, img := range mod.SASS {
			archs[mod.Name] = append(archs[mod.Name], img.Arch)
		}
	}
	assert.Equal(t, map[string][]string{
		"tiny": {"sm_80", "sm_86", "sm_89", "sm_90"}, "tiny_sm90": {"sm_90"}, "tiny_sm90a": {"sm_90a"},
	}, archs)
	sm90a, ok := m.Module("tiny_sm90a")
	require.True(t, ok)
	assert.Equal(t, "compute_90a", sm90a.Arch)
	assert.Equal(t, "release 12.4, V12.4.131", sm90a.PTXAS)
	assert.Equal(t, sha256Hex(ptx), sm90a.PTXSHA256, "the PTX hash covers the retargeted PTX")
	sm90, _ := m.Module("tiny_sm90")
	assert.Equal(t, "compute_90", sm90.Arch)
	assert.Empty(t, sm90.PTXAS)

	assert.Equal(t, "\x7fELF release 12.4, V12.4.131 sm_90a code\n.target sm_90a\n",
		gunzipFile(t, filepath.Join(out, "tiny_sm90a.sm_90a.cubin.gz")), "the sm_90a ptxas assembles the retargeted PTX")
	assert.Equal(t, "\x7fELF release 11.8, V11.8.89 sm_90 code\n.target sm_90\n",
		gunzipFile(t, filepath.Join(out, "tiny_sm90.sm_90.cubin.gz")))
	assert.NoFileExists(t, filepath.Join(out, "tiny_sm90a.sm_90.cubin.gz"))

	names, err := os.ReadFile(filepath.Join(out, namesFile))
	require.NoError(t, err)
	assert.Contains(t, string(names), "\tModuleTinySm90a = \"tiny_sm90a\"\n")
	assert.Contains(t, string(names), "\tModuleTinySm90a: 90,\n")
	assert.Contains(t, string(names), "\tTinySm90aK = \"tiny_sm90a_k\"\n")

	// -check: current, with the sm_90a ptxas from the environment.
	t.Setenv(ptxas90aEnv, f.ptxas124)
	code, stdout, stderr = runPTXGen(t, "-nvcc", f.nvcc, "-o", out, "-check")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "ptxgen: out/ is up to date\n", stdout)

	// Another sm_90a ptxas that makes other code: the cubin is named, and
	// that ptxas as the likely cause.
	code, _, stderr = runPTXGen(t, "-nvcc", f.nvcc, "-ptxas90a", f.ptxas125, "-o", out, "-check")
	assert.Equal(t, 1, code)
	assert.Equal(t, `ptxgen: warning: `+f.ptxas125+` is ptxas release 12.5, V12.5.40; the sm_90a SASS in ptx/ is meant to be assembled by ptxas 12.4 (release 12.4)
ptxgen: out/ is stale:
  module tiny_sm90a, sm_90a: tiny_sm90a.sm_90a.cubin.gz differs
  module tiny_sm90a: manifest.json record differs (sm_90a SASS changed)
ptxgen: the sm_90a ptxas is release 12.5, V12.5.40, not release 12.4: a different ptxas emits different sm_90a SASS, which is the likely cause
ptxgen: check failed
`, stderr)

	// Without a _sm90a module, no sm_90a ptxas is needed, to generate or
	// to check.
	require.NoError(t, os.Remove(filepath.Join(f.root, kernelsDir, "tiny_sm90a.cu")))
	t.Setenv(ptxas90aEnv, "")
	out2 := filepath.Join(f.root, "out2")
	code, stdout, stderr = runPTXGen(t, "-nvcc", f.nvcc, "-o", out2)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "ptxgen: wrote out2/: 2 modules, 2 entry points, 5 SASS images (nvcc and ptxas release 11.8, V11.8.89)\n", stdout)
	code, _, stderr = runPTXGen(t, "-nvcc", f.nvcc, "-o", out2, "-check")
	assert.Equal(t, 0, code, stderr)
}

// TestGenerateSM90aTools builds a tiny arch-specific kernel (setmaxnreg,
// which only sm_90a has) with the real tools: nvcc 11.8 on PATH and the
// sm_90a ptxas in $PTXAS_SM90A. It skips where either is missing.
func TestGenerateSM90aTools(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the CUDA tools are tested on Linux")
	}
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("no nvcc on PATH")
	}
	ptxas90a := os.Getenv(ptxas90aEnv)
	if ptxas90a == "" {
		t.Skip(ptxas90aEnv + " is not set")
	}
	if v, err := toolVersion(context.Background(), nvcc); err != nil || !isWantedVersion(v) {
		t.Skipf("nvcc is %q, not %s", v, wantNVCC)
	}
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "go.mod"), []byte("module fixture\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, kernelsDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, kernelsDir, "tiny_sm90a.cu"), []byte(`
extern "C" __global__ void __launch_bounds__(128) tiny_sm90a_k(float *out) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  out[threadIdx.x] = 1.0f;
}
`), 0o644))
	t.Chdir(root)
	out := filepath.Join(root, "out")
	code, stdout, stderr := runPTXGen(t, "-nvcc", nvcc, "-ptxas90a", ptxas90a, "-o", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "1 modules, 1 entry points, 1 SASS images")
	ptx, err := os.ReadFile(filepath.Join(out, "tiny_sm90a.ptx"))
	require.NoError(t, err)
	assert.Contains(t, string(ptx), "\n.version 8.0\n.target sm_90a\n")
	assert.True(t, strings.HasPrefix(gunzipFile(t, filepath.Join(out, "tiny_sm90a.sm_90a.cubin.gz")), "\x7fELF"))
	code, _, stderr = runPTXGen(t, "-nvcc", nvcc, "-ptxas90a", ptxas90a, "-o", out, "-check")
	assert.Equal(t, 0, code, "the sm_90a cubin is reproducible: %s", stderr)
}
