package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/ptx"
	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

func TestParseJITRecord(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		args    []string
		want    jitRecordOptions
		wantErr string
	}{
		{args: []string{"-out", dir}, want: jitRecordOptions{Out: dir, Compare: true}},
		{args: []string{"-out", "new", "-device=1", "-compare=false", "-allow-mismatch"},
			want: jitRecordOptions{Out: "new", Device: 1, AllowMismatch: true}},
		{args: []string{"-out", "d", "-modules", "varlen_bf16, decode_f16,varlen_bf16"},
			want: jitRecordOptions{Out: "d", Modules: []string{"varlen_bf16", "decode_f16"}, Compare: true}},
		{args: nil, wantErr: "pagedkv jit-record: -out is required; allowed: a folder to write into, e.g. -out $OUT/jit"},
		{args: []string{"-out", file}, wantErr: `pagedkv jit-record: -out="` + file + `" is not allowed; allowed: a folder, and this is a file`},
		{args: []string{"-out", "d", "-modules", "nope"},
			wantErr: `pagedkv jit-record: -modules: "nope" is not an embedded module; allowed: ` + strings.Join(ptx.Modules(), ", ")},
		{args: []string{"-out", "d", "-device=-1"}, wantErr: "pagedkv jit-record: -device=-1 is not allowed; allowed: 0 or more (a CUDA device ordinal)"},
		{args: []string{"-out", "d", "x"}, wantErr: `pagedkv jit-record: unexpected argument "x" (pagedkv jit-record -h lists the flags)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := parseJITRecord(tc.args)
			if tc.wantErr != "" {
				requireUsageError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestJITRecordHelp(t *testing.T) {
	_, err := parseJITRecord([]string{"-h"})
	var help *helpRequest
	require.ErrorAs(t, err, &help)
	text := strings.Join(strings.Fields(help.Usage), " ")
	assert.Contains(t, text, "Records the driver JIT's machine code for the modules whose embedded SASS is slower than the JIT's, for this GPU's architecture.")
	assert.Contains(t, text, "Copy DIR/* into ptx/")
}

// TestJITRecordModules checks which modules the recorder takes by default:
// on sm_90 every module ptx.JITFaster names there (each has sm_90 SASS),
// elsewhere none.
func TestJITRecordModules(t *testing.T) {
	assert.Equal(t, ptx.JITFasterModules(90), jitRecordModules(90))
	assert.NotEmpty(t, jitRecordModules(90))
	assert.Empty(t, jitRecordModules(89))
	assert.Empty(t, jitRecordModules(80))
	assert.Empty(t, jitRecordModules(100), "no SASS on sm_100: its modules load the PTX anyway")
}

func TestResourceMismatches(t *testing.T) {
	a := kernelResources{Regs: 159, SharedBytes: 16, MaxThreads: 256}
	b := kernelResources{Regs: 119, MaxThreads: 256}
	assert.Nil(t, resourceMismatches("m", map[string]kernelResources{"k": a}, nil), "not compared")
	assert.Empty(t, resourceMismatches("m", map[string]kernelResources{"k": a, "j": b}, map[string]kernelResources{"k": a, "j": b}))
	assert.Equal(t, []string{
		"m: j is missing from the recorded code",
		"m: k: recorded {Regs:159 LocalBytes:0 SharedBytes:16 ConstBytes:0 MaxThreads:256}, PTX load {Regs:119 LocalBytes:0 SharedBytes:0 ConstBytes:0 MaxThreads:256}",
	}, resourceMismatches("m", map[string]kernelResources{"k": a}, map[string]kernelResources{"k": b, "j": b}))
}

func TestRegsRange(t *testing.T) {
	assert.Equal(t, "-", regsRange(nil))
	assert.Equal(t, "128", regsRange(map[string]kernelResources{"a": {Regs: 128}, "b": {Regs: 128}}))
	assert.Equal(t, "109-119", regsRange(map[string]kernelResources{"a": {Regs: 119}, "b": {Regs: 109}, "c": {Regs: 112}}))
}

func TestMergeJITRecord(t *testing.T) {
	old := ptx.JITRecord{Images: []ptx.JITImage{
		{Module: "a", Arch: "sm_90", DriverVersion: 12080},
		{Module: "a", Arch: "sm_80", DriverVersion: 12080},
		{Module: "b", Arch: "sm_90", DriverVersion: 12080},
	}}
	got := mergeJITRecord(old, []ptx.JITImage{{Module: "a", Arch: "sm_90", DriverVersion: 13000}, {Module: "c", Arch: "sm_90", DriverVersion: 13000}})
	assert.Equal(t, []ptx.JITImage{
		{Module: "a", Arch: "sm_80", DriverVersion: 12080},
		{Module: "b", Arch: "sm_90", DriverVersion: 12080},
		{Module: "a", Arch: "sm_90", DriverVersion: 13000},
		{Module: "c", Arch: "sm_90", DriverVersion: 13000},
	}, got.Images)
	assert.Equal(t, 12080, old.Images[0].DriverVersion, "old is left as it was")
}

// TestWriteJITRecord checks the recorder's output folder: each cubin
// gzip-compressed without a name or time in its header (the same cubin
// always gives the same file), under the name ptx.JITCubin reads, and a
// jit.json that parses back.
func TestWriteJITRecord(t *testing.T) {
	cubin := []byte("\x7fELF cubin")
	rec := jitRecording{cubin: cubin, image: ptx.JITImage{Module: "varlen_bf16", Arch: "sm_90", DriverVersion: 13000,
		PTXSHA256: "p", SHA256: sha256Hex(cubin), Size: int64(len(cubin))}}
	dir := filepath.Join(t.TempDir(), "jit")
	require.NoError(t, writeJITRecord(dir, []jitRecording{rec}, ptx.JITRecord{Images: []ptx.JITImage{rec.image}}))

	gz, err := os.ReadFile(filepath.Join(dir, "varlen_bf16.sm_90.jit.cubin.gz"))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	assert.Empty(t, zr.Name)
	assert.Empty(t, zr.Comment)
	assert.True(t, zr.ModTime.IsZero())
	got, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.Equal(t, cubin, got)
	again, err := ptxfile.CompressCubin(cubin)
	require.NoError(t, err)
	assert.Equal(t, gz, again)

	data, err := os.ReadFile(filepath.Join(dir, ptxfile.JITFile))
	require.NoError(t, err)
	parsed, err := ptxfile.ParseJITRecord(data)
	require.NoError(t, err)
	assert.Equal(t, []ptx.JITImage{rec.image}, parsed.Images)
}
