// Package tests holds the integration tests that need an NVIDIA GPU. Each
// test skips with one line when there is no driver or no device.
package tests

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

// open returns a Runtime on device 0 with opts applied, or skips the test
// when this machine has no usable GPU.
func open(t testing.TB, opts config.Options) *pagedkv.Runtime {
	t.Helper()
	return openDevice(t, 0, opts)
}

func openDevice(t testing.TB, device int, opts config.Options) *pagedkv.Runtime {
	t.Helper()
	r, err := pagedkv.Open(pagedkv.Options{Device: device, Config: opts})
	if errors.Is(err, pagedkv.ErrNoDriver) || errors.Is(err, pagedkv.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

// rng returns a generator seeded from PAGEDKV_TEST_SEED or at random, and
// logs the seed so that a failure can be replayed.
func rng(t testing.TB) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv(config.EnvTestSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "PAGEDKV_TEST_SEED")
		seed = v
	}
	t.Logf("seed %d (set PAGEDKV_TEST_SEED to replay)", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// arena returns an arena freed at the end of the test.
func arena(t testing.TB, r *pagedkv.Runtime) *check.Arena {
	t.Helper()
	a := check.NewArena(r)
	t.Cleanup(func() { require.NoError(t, a.Free()) })
	return a
}

// decodeProblem builds a decode problem freed at the end of the test.
func decodeProblem(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, g *rand.Rand, c check.DecodeShape) *check.DecodeProblem {
	t.Helper()
	p, err := check.NewDecodeProblem(r, s, g, c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Arena.Free()) })
	return p
}

// download copies n elements of a device buffer back on s.
func download[T any](t testing.TB, s *pagedkv.Stream, b pagedkv.Buffer, n int) []T {
	t.Helper()
	out := make([]T, n)
	require.NoError(t, pagedkv.Download(s, out, b))
	return out
}

func ptr[T any](v T) *T { return &v }

// captureDecode captures one decode of a on s into a graph (reserve first
// unless a has a Workspace); a failed decode or capture fails the test with
// msg. The caller closes the graph.
func captureDecode(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, a *pagedkv.DecodeArgs, msg ...any) *pagedkv.Graph {
	t.Helper()
	require.NoError(t, s.BeginCapture())
	err := r.Decode(s, a)
	graph, endErr := s.EndCapture()
	require.NoError(t, err, msg...)
	require.NoError(t, endErr)
	return graph
}

// captureVarlen captures one varlen of a on s into a graph (the caller
// reserves first unless a has a Workspace); a failed varlen or capture fails
// the test with msg. The caller closes the graph.
func captureVarlen(t testing.TB, r *pagedkv.Runtime, s *pagedkv.Stream, a *pagedkv.VarlenArgs, msg ...any) *pagedkv.Graph {
	t.Helper()
	require.NoError(t, s.BeginCapture())
	err := r.Varlen(s, a)
	graph, endErr := s.EndCapture()
	require.NoError(t, err, msg...)
	require.NoError(t, endErr)
	return graph
}
