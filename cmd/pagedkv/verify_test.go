package main

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/internal/check"
)

// sweepPaths returns the family and agrees fields of a sweep's paths.
func sweepPaths[P any](w attnSweep[P]) (families, agrees []string) {
	for _, p := range w.paths {
		families = append(families, p.family)
		agrees = append(agrees, p.agrees)
	}
	return families, agrees
}

// TestVerifyFamilies checks that the attention sweeps record only families
// the summary prints, in its order, and compare only with earlier paths.
func TestVerifyFamilies(t *testing.T) {
	var names []string
	for _, f := range verifyFamilies {
		assert.NotContains(t, names, f.name, "duplicate family")
		assert.NotEmpty(t, f.what, f.name)
		names = append(names, f.name)
	}
	// The sweeps' closures are never called: no runtime needed.
	for _, tc := range []struct {
		name           string
		paths          func() (families, agrees []string)
		wantFamilies   []string
		wantComparison map[string]string
	}{
		{name: "decode", paths: func() ([]string, []string) { return sweepPaths(decodeSweep(nil)) },
			wantFamilies: []string{"decode auto", "decode single-pass", "decode forced split-K"}},
		{name: "varlen", paths: func() ([]string, []string) { return sweepPaths(varlenSweep(nil, nil)) },
			wantFamilies:   []string{"varlen auto", "varlen single-pass", "varlen split-K"},
			wantComparison: map[string]string{"varlen split-K": "varlen single-pass"}},
		{name: "sequence", paths: func() ([]string, []string) { return sweepPaths(sequenceSweep(nil)) },
			wantFamilies: []string{"sequence attention"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			families, agrees := tc.paths()
			assert.Equal(t, tc.wantFamilies, families)
			first := -1
			for i, f := range families {
				at := slices.Index(names, f)
				require.GreaterOrEqual(t, at, 0, "%q is not in verifyFamilies", f)
				if i == 0 {
					first = at
				}
				assert.Equal(t, first+i, at, "%q: verifyFamilies lists a sweep's paths together, in order", f)
				if agrees[i] != "" {
					assert.Contains(t, families[:i], agrees[i], "%q agrees with a later or unknown path", f)
				}
				assert.Equal(t, tc.wantComparison[f], agrees[i], f)
			}
		})
	}
}

func TestVerifyHelpListsFamilies(t *testing.T) {
	var help *helpRequest
	require.ErrorAs(t, func() error { _, err := parseVerify([]string{"-h"}); return err }(), &help)
	for _, f := range verifyFamilies {
		assert.Contains(t, help.Usage, "\n  "+f.name+" ", f.name)
	}
}

func TestTally(t *testing.T) {
	var log strings.Builder
	tl := newTally(&log)
	tl.record("append", nil)
	tl.record("varlen split-K", nil)
	tl.record("varlen split-K", errors.New("boom"))
	tl.record("varlen split-K", nil)
	assert.Equal(t, "FAIL varlen split-K: boom\n", log.String())
	assert.Equal(t, 1, tl.failures())
	var sum strings.Builder
	tl.summary(&sum)
	lines := strings.Split(strings.TrimSuffix(sum.String(), "\n"), "\n")
	require.Len(t, lines, len(verifyFamilies))
	assert.Equal(t, "append                   pass    1  fail    0", lines[0])
	assert.Equal(t, "decode auto              pass    0  fail    0", lines[slices.Index(familyNames(), "decode auto")])
	assert.Equal(t, "varlen split-K           pass    2  fail    1", lines[slices.Index(familyNames(), "varlen split-K")])
	assert.Panics(t, func() { tl.record("varlen", nil) }, "an unknown family would never be printed")
}

func familyNames() []string {
	var names []string
	for _, f := range verifyFamilies {
		names = append(names, f.name)
	}
	return names
}

func TestAgree(t *testing.T) {
	g := rand.New(rand.NewPCG(1, 2))
	want := attnResult{out: make([]float64, 1000), lse: []float32{0.5, 12, float32(math.Inf(-1))}}
	for i := range want.out {
		want.out[i] = g.NormFloat64()
	}
	// noisy returns want's output with relative L2 noise of about rel.
	noisy := func(rel float64) []float64 {
		out := make([]float64, len(want.out))
		for i, w := range want.out {
			out[i] = w + rel*g.NormFloat64()
		}
		return out
	}
	tol := agreeTolerance(pagedkv.F16)
	for _, tc := range []struct {
		name    string
		got     attnResult
		wantErr string
	}{
		{"identical", want, ""},
		{"within", attnResult{noisy(tol / 2), []float32{0.50004, 12.001, float32(math.Inf(-1))}}, ""},
		{"output", attnResult{noisy(tol * 2), want.lse}, "output relative L2 difference"},
		{"NaN output", attnResult{append([]float64{math.NaN()}, want.out[1:]...), want.lse}, "output relative L2 difference +Inf"},
		{"LSE", attnResult{want.out, []float32{0.5002, 12, float32(math.Inf(-1))}}, "LSE[0]=0.5002, want 0.5"},
		{"LSE relative", attnResult{want.out, []float32{0.5, 12.002, float32(math.Inf(-1))}}, "LSE[1]=12.002, want 12"},
		{"LSE -Inf", attnResult{want.out, []float32{0.5, 12, 0}}, "LSE[2]=0, want -Inf"},
		{"LSE NaN", attnResult{want.out, []float32{float32(math.NaN()), 12, float32(math.Inf(-1))}}, "LSE[0]=NaN"},
		{"LSE count", attnResult{want.out, want.lse[:2]}, "2 LSE values, want 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := agree(pagedkv.F16, want, tc.got)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// fakeShape names a fake problem in failure messages.
type fakeShape string

func (s fakeShape) String() string { return string(s) }

// TestAttnSweepRun runs the sweep loop on canned results: each path counts
// in its family, a failure names the shape and plan, and a path compares
// only with an earlier path that passed.
func TestAttnSweepRun(t *testing.T) {
	good := attnResult{out: []float64{1, 2, 3, 4}, lse: []float32{1, 2}}
	off := attnResult{out: []float64{1, 2, 3, 4.1}, lse: []float32{1, 2}} // passes its check, disagrees
	plan := planned{kernel: "paged_varlen_f16_hd64", splits: 5}
	canned := func(res attnResult, err error) func(int, *rand.Rand) (attnResult, planned, error) {
		return func(int, *rand.Rand) (attnResult, planned, error) { return res, plan, err }
	}
	for _, tc := range []struct {
		name          string
		single, split func(int, *rand.Rand) (attnResult, planned, error)
		checkErr      error // the reference check of the split path
		wantPass      map[string]int
		wantLog       []string
	}{
		{name: "all pass", single: canned(good, nil), split: canned(good, nil),
			wantPass: map[string]int{"varlen auto": 2, "varlen single-pass": 2, "varlen split-K": 2}},
		{name: "split disagrees", single: canned(good, nil), split: canned(off, nil),
			wantPass: map[string]int{"varlen auto": 2, "varlen single-pass": 2},
			wantLog:  []string{"FAIL varlen split-K: [paged_varlen_f16_hd64, 5 splits] shape7: against varlen single-pass: output relative L2 difference"}},
		{name: "single fails to run", single: canned(attnResult{}, errors.New("launch failed")), split: canned(off, nil),
			wantPass: map[string]int{"varlen auto": 2, "varlen split-K": 2},
			wantLog:  []string{"FAIL varlen single-pass: [paged_varlen_f16_hd64, 5 splits] shape7: launch failed"}},
		{name: "split fails its check", single: canned(good, nil), split: canned(off, nil), checkErr: errors.New("check: shape7: bad"),
			wantPass: map[string]int{"varlen auto": 2, "varlen single-pass": 2},
			wantLog:  []string{"FAIL varlen split-K: [paged_varlen_f16_hd64, 5 splits] check: shape7: bad"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			draws, runs := 0, 0
			w := attnSweep[int]{
				draw: func(*rand.Rand) (attnCase[int], error) {
					draws++
					return attnCase[int]{
						problem: draws, shape: fakeShape("shape7"), dtype: pagedkv.F16, arena: check.NewArena(nil),
						check: func(out []float64, _ []float32) error {
							if tc.checkErr != nil && &out[0] == &off.out[0] {
								return tc.checkErr
							}
							return nil
						},
					}, nil
				},
				paths: []attnPath[int]{
					{family: "varlen auto", run: func(p int, _ *rand.Rand) (attnResult, planned, error) {
						runs++
						assert.Equal(t, draws, p, "a path runs the problem just drawn")
						return good, planned{}, nil
					}},
					{family: "varlen single-pass", run: tc.single},
					{family: "varlen split-K", run: tc.split, agrees: "varlen single-pass"},
				},
			}
			var log strings.Builder
			tl := newTally(&log)
			require.NoError(t, w.run(2, rand.New(rand.NewPCG(1, 1)), tl))
			assert.Equal(t, 2, draws)
			assert.Equal(t, 2, runs)
			for _, f := range []string{"varlen auto", "varlen single-pass", "varlen split-K"} {
				assert.Equal(t, tc.wantPass[f], tl.pass[f], "passes of %s", f)
				assert.Equal(t, 2-tc.wantPass[f], tl.fail[f], "failures of %s", f)
			}
			lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
			if len(tc.wantLog) == 0 {
				assert.Empty(t, log.String())
				return
			}
			require.Len(t, lines, 2, log.String())
			for _, l := range lines {
				assert.True(t, strings.HasPrefix(l, tc.wantLog[0]), "got %q\nwant prefix %q", l, tc.wantLog[0])
			}
		})
	}
}
