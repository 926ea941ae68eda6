package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
)

// defaultBench is what pagedkv bench runs with no arguments.
func defaultBench() benchOptions {
	return benchOptions{Op: "all", Reps: 15, Sweep: true, Caches: []pagedkv.DType{pagedkv.F16, pagedkv.BF16, pagedkv.E4M3}}
}

// requireUsageError checks that err is a *usageError whose text is want.
func requireUsageError(t *testing.T, err error, want string) {
	t.Helper()
	var bad *usageError
	require.ErrorAs(t, err, &bad)
	assert.Equal(t, want, bad.Error())
}

func TestParseBench(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(*benchOptions)
	}{
		{nil, func(*benchOptions) {}},
		{[]string{"decode"}, func(o *benchOptions) { o.Op = "decode" }},
		{[]string{"varlen"}, func(o *benchOptions) { o.Op = "varlen" }},
		{[]string{"-op", "varlen", "-cache", "e4m3"}, func(o *benchOptions) { o.Op, o.Caches = "varlen", []pagedkv.DType{pagedkv.E4M3} }},
		{[]string{"cache"}, func(o *benchOptions) { o.Op = "append" }},
		{[]string{"-op", "copy"}, func(o *benchOptions) { o.Op = "copy" }},
		{[]string{"decode", "-quick", "-nosweep"}, func(o *benchOptions) { o.Op, o.Quick, o.Sweep = "decode", true, false }},
		{[]string{"-reps", "3"}, func(o *benchOptions) { o.Reps = 3 }},
		{[]string{"-cache", "e4m3"}, func(o *benchOptions) { o.Caches = []pagedkv.DType{pagedkv.E4M3} }},
		{[]string{"-cache", "bf16, f16"}, func(o *benchOptions) { o.Caches = []pagedkv.DType{pagedkv.BF16, pagedkv.F16} }},
		{[]string{"-json", "out.json", "-layouts", "-device", "1"}, func(o *benchOptions) { o.JSONPath, o.Layouts, o.Device = "out.json", true, 1 }},
		{[]string{"-shape", "e4m3 seqs=8 kv=8192$"}, func(o *benchOptions) { o.Shape = regexp.MustCompile("e4m3 seqs=8 kv=8192$") }},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			want := defaultBench()
			tc.want(&want)
			got, err := parseBench(tc.args)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}

func TestParseBenchErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-reps", "-5"}, "pagedkv bench: -reps=-5 is not allowed; allowed: 3 or more"},
		{[]string{"-reps=2"}, "pagedkv bench: -reps=2 is not allowed; allowed: 3 or more"},
		{[]string{"-op", "rope"}, `pagedkv bench: -op="rope" is not allowed; allowed: all, copy, append (or cache), decode, varlen`},
		{[]string{"prefill"}, `pagedkv bench: -op="prefill" is not allowed; allowed: all, copy, append (or cache), decode, varlen`},
		{[]string{"-cache", "fp8"}, `pagedkv bench: -cache="fp8" is not allowed; allowed: a comma-separated list of f16, bf16, e4m3, each at most once`},
		{[]string{"-cache", ""}, `pagedkv bench: -cache="" is not allowed; allowed: a comma-separated list of f16, bf16, e4m3, each at most once`},
		{[]string{"-cache", "f16,f16"}, `pagedkv bench: -cache="f16,f16" is not allowed; allowed: a comma-separated list of f16, bf16, e4m3, each at most once`},
		{[]string{"-cache", "f16,"}, `pagedkv bench: -cache="f16," is not allowed; allowed: a comma-separated list of f16, bf16, e4m3, each at most once`},
		{[]string{"-device", "-1"}, "pagedkv bench: -device=-1 is not allowed; allowed: 0 or more (a CUDA device ordinal)"},
		{[]string{"-reps", "x"}, `pagedkv bench: invalid value "x" for flag -reps: parse error (pagedkv bench -h lists the flags)`},
		{[]string{"-repz", "5"}, "pagedkv bench: flag provided but not defined: -repz (pagedkv bench -h lists the flags)"},
		{[]string{"decode", "copy"}, `pagedkv bench: unexpected argument "copy" (pagedkv bench -h lists the flags)`},
		{[]string{"-quick", "decode"}, `pagedkv bench: unexpected argument "decode" (pagedkv bench -h lists the flags)`},
		{[]string{"-shape", "seqs=(8"}, `pagedkv bench: -shape="seqs=(8" is not allowed; allowed: a Go regular expression (error parsing regexp: missing closing ): ` + "`seqs=(8`)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseBench(tc.args)
			requireUsageError(t, err, tc.want)
		})
	}
}

func TestParseVerify(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want verifyOptions
	}{
		{nil, verifyOptions{N: 40}},
		{[]string{"-n", "1", "-seed", "7", "-device", "2"}, verifyOptions{N: 1, Seed: 7, Device: 2}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := parseVerify(tc.args)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseVerifyErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "pagedkv verify: -n=0 is not allowed; allowed: 1 or more"},
		{[]string{"-n=-3"}, "pagedkv verify: -n=-3 is not allowed; allowed: 1 or more"},
		{[]string{"-device", "-2"}, "pagedkv verify: -device=-2 is not allowed; allowed: 0 or more (a CUDA device ordinal)"},
		{[]string{"-seed", "-1"}, `pagedkv verify: invalid value "-1" for flag -seed: parse error (pagedkv verify -h lists the flags)`},
		{[]string{"decode"}, `pagedkv verify: unexpected argument "decode" (pagedkv verify -h lists the flags)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseVerify(tc.args)
			requireUsageError(t, err, tc.want)
		})
	}
}

func TestParseInfo(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    infoOptions
		wantErr string
	}{
		{args: nil, want: infoOptions{}},
		{args: []string{"-device=3"}, want: infoOptions{Device: 3}},
		{args: []string{"-device", "-1"}, wantErr: "pagedkv info: -device=-1 is not allowed; allowed: 0 or more (a CUDA device ordinal)"},
		{args: []string{"modules"}, wantErr: `pagedkv info: unexpected argument "modules" (pagedkv info -h lists the flags)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := parseInfo(tc.args)
			if tc.wantErr != "" {
				requireUsageError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func([]string) error
		flags []string
	}{
		{"bench", func(a []string) error { _, err := parseBench(a); return err }, []string{"-op", "-json", "-reps", "-quick", "-nosweep", "-layouts", "-cache", "-shape", "-device"}},
		{"verify", func(a []string) error { _, err := parseVerify(a); return err }, []string{"-n", "-seed", "-device"}},
		{"info", func(a []string) error { _, err := parseInfo(a); return err }, []string{"-device"}},
	} {
		for _, arg := range []string{"-h", "-help"} {
			t.Run(tc.name+" "+arg, func(t *testing.T) {
				var help *helpRequest
				require.ErrorAs(t, tc.parse([]string{arg}), &help)
				assert.True(t, strings.HasPrefix(help.Usage, "usage: pagedkv "+tc.name), help.Usage)
				for _, f := range tc.flags {
					assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(f)+`( |$)`, help.Usage)
				}
				// Every flag is documented above, and there are no others.
				assert.Len(t, regexp.MustCompile(`(?m)^  -`).FindAllString(help.Usage, -1), len(tc.flags), help.Usage)
			})
		}
	}
}

func TestCheckJSONPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bench.json")
	require.NoError(t, os.WriteFile(file, []byte("{}\n"), 0o644))
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		path, wantErr string
	}{
		{path: ""},
		{path: filepath.Join(dir, "new.json")},
		{path: file},
		{path: dir, wantErr: fmt.Sprintf("pagedkv bench: -json=%q is not allowed; allowed: a file path, and this is a folder", dir)},
		{path: filepath.Join(missing, "b.json"), wantErr: fmt.Sprintf("pagedkv bench: -json=%q is not allowed; allowed: a file in an existing folder, and %s is not one", filepath.Join(missing, "b.json"), missing)},
		{path: filepath.Join(file, "b.json"), wantErr: fmt.Sprintf("pagedkv bench: -json=%q is not allowed; allowed: a file in an existing folder, and %s is not one", filepath.Join(file, "b.json"), file)},
	} {
		t.Run(tc.path, func(t *testing.T) {
			err := checkOutPath("bench", "-json", tc.path)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			requireUsageError(t, err, tc.wantErr)
		})
	}
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "{}\n", string(data), "checkOutPath must not touch an existing file")
}

// noDriverErr has the shape of driver.openLibrary's error: the driver's own
// advice, once.
var noDriverErr = fmt.Errorf("%w: could not open libcuda.so.1 (libcuda.so.1: cannot open shared object file: No such file or directory), "+
	"libcuda.so (libcuda.so: cannot open shared object file: No such file or directory); install an NVIDIA driver that supports "+
	"CUDA 11.8 or newer, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH", pagedkv.ErrNoDriver)

func TestExplain(t *testing.T) {
	noDevice := fmt.Errorf("pagedkv: %w", pagedkv.ErrNoDevice)
	other := errors.New("pagedkv: Options.Device=3 is out of range; this machine has devices 0..0")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no driver", noDriverErr, "pagedkv: " + noDriverErr.Error()},
		{"no device", noDevice, "pagedkv: the NVIDIA driver sees no CUDA device on this machine (pagedkv: cuda: no CUDA device)"},
		{"other", other, other.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explain(tc.err)
			assert.Equal(t, tc.want, got)
			assert.NotContains(t, got, "\n")
			assert.LessOrEqual(t, strings.Count(got, "LD_LIBRARY_PATH"), 1, "the advice is given once")
			assert.LessOrEqual(t, strings.Count(got, "11.8"), 1, "the advice is given once")
		})
	}
}

func TestNoGPUReason(t *testing.T) {
	_, ok := noGPUReason(nil)
	assert.False(t, ok)
	_, ok = noGPUReason(errors.New("pagedkv: device 0 (Tesla V100) has compute capability 7.0"))
	assert.False(t, ok, "an unusable GPU is a failure, not a missing one")
	reason, ok := noGPUReason(fmt.Errorf("cuda: cuInit: %w", pagedkv.ErrNoDevice))
	assert.True(t, ok)
	assert.Contains(t, reason, "no CUDA device")
}

func TestPrintNoGPU(t *testing.T) {
	cfg := config.Default()
	var out strings.Builder
	require.NoError(t, printNoGPU(&out, cfg, "the NVIDIA driver sees no CUDA device on this machine"))
	text := out.String()
	for _, k := range config.Keys() {
		v, _ := cfg.Value(k.File)
		assert.Regexp(t, `(?m)^  `+k.Env+` +`+regexp.QuoteMeta(v)+` +default$`, text)
	}
	require.NotEmpty(t, pagedkv.Modules())
	for _, m := range pagedkv.Modules() {
		assert.Regexp(t, `(?m)^  `+m+`  +[1-9][0-9]* entr(y  |ies)  needs compute capability [89]\.0( exactly \(sm_90a\))?$`, text)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	assert.Equal(t, "device     none: the NVIDIA driver sees no CUDA device on this machine", lines[len(lines)-1])
	assert.Equal(t, 1, strings.Count(text, "device     none"))
}

// TestBuildStamp checks the stamp's binary part: the first 12 hex digits of
// this executable's SHA-256 (the test binary has no VCS stamp).
func TestBuildStamp(t *testing.T) {
	stamp := buildStamp()
	assert.Regexp(t, `, binary [0-9a-f]{12}$`, stamp)
	assert.Equal(t, executableHash(), stamp[len(stamp)-12:])
}

func TestBenchWants(t *testing.T) {
	all := &bencher{}
	assert.True(t, all.wants("e4m3", "seqs=8 kv=8192"))
	one := &bencher{shape: regexp.MustCompile(`^e4m3 seqs=8 kv=8192$`)}
	assert.True(t, one.wants("e4m3", "seqs=8 kv=8192"))
	assert.False(t, one.wants("f16", "seqs=8 kv=8192"))
	assert.False(t, one.wants("e4m3", "seqs=8 kv=8192 64/4 heads"))
}
