package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

// verifyOptions are pagedkv verify's flags, checked.
type verifyOptions struct {
	N      int    // random shapes per op
	Seed   uint64 // 0: runVerify picks one
	Device int
}

// verifyFamily is one op family pagedkv verify counts apart: name is how the
// summary and the FAIL lines spell it, what says what it runs.
type verifyFamily struct{ name, what string }

// verifyFamilies are pagedkv verify's families, in the order it runs them
// and prints their counts. Every name an attention sweep records is here
// (TestVerifyFamilies).
var verifyFamilies = []verifyFamily{
	{"append", "Append, both caches bit for bit"},
	{"rope+cache", "RopeCache: rotated q and k, both caches"},
	{"mla", "MLARopeQuant and MLAConcatQ"},
	{"qkv+norm+rope", "QKVNormRope: q_out and both caches"},
	{"decode auto", "Decode as the runtime plans it"},
	{"decode single-pass", "same problem, one split"},
	{"decode forced split-K", "same problem, a forced count of 1..40 splits"},
	{"varlen auto", "Varlen as the runtime plans it"},
	{"varlen single-pass", "same problem, SPLIT_K_ATTN=0"},
	{"varlen split-K", fmt.Sprintf("same problem, %d splits forced (PlanVarlenWith); also vs single-pass", verifySplits)},
	{"sequence attention", "SequenceAttention: one causal sequence, head-major out"},
}

// verifySynopsis is pagedkv verify -h's text above the flags.
func verifySynopsis() string {
	var b strings.Builder
	b.WriteString(`pagedkv verify [flags]

Runs -n random shapes of every family against the float64 reference
(internal/ref), prints pass and fail counts per family, and exits 1 on any
failure. Families:

`)
	for _, f := range verifyFamilies {
		fmt.Fprintf(&b, "  %-22s %s\n", f.name, f.what)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// parseVerify parses and checks pagedkv verify's arguments (after "verify")
// without touching a device. Errors are a *usageError or a *helpRequest.
func parseVerify(args []string) (verifyOptions, error) {
	fs := newFlagSet("verify", verifySynopsis())
	n := fs.Int("n", 40, "random shapes per family, 1 or more")
	seed := fs.Uint64("seed", 0, "random seed (0: pick one and print it)")
	device := fs.Int("device", 0, "CUDA device ordinal")
	if err := parseFlags(fs, args); err != nil {
		return verifyOptions{}, err
	}
	o := verifyOptions{N: *n, Seed: *seed, Device: *device}
	if o.N < 1 {
		// No shapes would check nothing and still print all-pass.
		return verifyOptions{}, usagef("verify", "-n=%d is not allowed; allowed: 1 or more", o.N)
	}
	if err := checkDevice("verify", o.Device); err != nil {
		return verifyOptions{}, err
	}
	return o, nil
}

// tally counts passes and failures per family of verifyFamilies and writes
// each failure to log as it comes.
type tally struct {
	pass, fail map[string]int
	log        io.Writer
}

func newTally(log io.Writer) *tally {
	return &tally{pass: map[string]int{}, fail: map[string]int{}, log: log}
}

// record counts one case of family: a pass when err is nil. A family
// missing from verifyFamilies would never be printed, so it panics.
func (t *tally) record(family string, err error) {
	if !slices.ContainsFunc(verifyFamilies, func(f verifyFamily) bool { return f.name == family }) {
		panic(fmt.Sprintf("pagedkv verify: family %q is not in verifyFamilies", family))
	}
	if err != nil {
		t.fail[family]++
		fmt.Fprintf(t.log, "FAIL %s: %v\n", family, err)
		return
	}
	t.pass[family]++
}

// failures returns the failures of every family together.
func (t *tally) failures() int {
	n := 0
	for _, c := range t.fail {
		n += c
	}
	return n
}

// summary writes one line per family, every family of verifyFamilies in
// order (a family that ran nothing shows 0 and 0).
func (t *tally) summary(w io.Writer) {
	for _, f := range verifyFamilies {
		fmt.Fprintf(w, "%-24s pass %4d  fail %4d\n", f.name, t.pass[f.name], t.fail[f.name])
	}
}

func runVerify(args []string) error {
	o, err := parseVerify(args)
	if err != nil {
		return err
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	fmt.Printf("verify: seed %d\n", o.Seed)
	g := rand.New(rand.NewPCG(o.Seed, 99))

	r, err := pagedkv.Open(pagedkv.Options{Device: o.Device})
	if err != nil {
		return err
	}
	defer r.Close()
	// One more runtime on the same device (and primary context, so it runs
	// r's problems) plans varlen by its configuration, as an engine's would:
	// it never splits (SPLIT_K_ATTN=0). The forced split count goes through
	// PlanVarlenWith on r.
	single, err := pagedkv.Open(pagedkv.Options{Device: o.Device, Config: config.Options{SplitKAttn: ptr(config.SplitOff)}})
	if err != nil {
		return err
	}
	defer single.Close()

	s := r.Stream()
	t := newTally(os.Stderr)
	for range o.N {
		c := check.RandomAppendShape(g)
		p, err := check.NewAppendProblem(r, s, g, c)
		if err != nil {
			return err
		}
		t.record("append", p.RunAndCheck(r, s))
		if err := p.Arena.Free(); err != nil {
			return err
		}
	}
	for range o.N {
		c := check.RandomRopeShape(g)
		p, err := check.NewRopeProblem(r, s, g, c)
		if err != nil {
			return err
		}
		t.record("rope+cache", p.RunAndCheck(r, s))
		if err := p.Arena.Free(); err != nil {
			return err
		}
	}
	for range o.N {
		t.record("mla", check.RunMLA(r, s, g, check.RandomMLAShape(g)))
		t.record("qkv+norm+rope", check.RunQKV(r, s, g, check.RandomQKVShape(g)))
	}
	decode := decodeSweep(r)
	if err := decode.run(o.N, g, t); err != nil {
		return err
	}
	varlen := varlenSweep(r, single)
	if err := varlen.run(o.N, g, t); err != nil {
		return err
	}
	sequence := sequenceSweep(r)
	if err := sequence.run(o.N, g, t); err != nil {
		return err
	}
	fmt.Println()
	t.summary(os.Stdout)
	if n := t.failures(); n > 0 {
		return fmt.Errorf("verify: %d failure(s)", n)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
