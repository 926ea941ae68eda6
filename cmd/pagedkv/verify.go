package main

import (
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
)

// verifyOptions are pagedkv verify's flags, checked.
type verifyOptions struct {
	N      int    // random shapes per op
	Seed   uint64 // 0: runVerify picks one
	Device int
}

// parseVerify parses and checks pagedkv verify's arguments (after "verify")
// without touching a device. Errors are a *usageError or a *helpRequest.
func parseVerify(args []string) (verifyOptions, error) {
	fs := newFlagSet("verify", "pagedkv verify [flags]")
	n := fs.Int("n", 40, "random shapes per op, 1 or more")
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
	s := r.Stream()
	pass, fail := map[string]int{}, map[string]int{}
	record := func(op string, err error) {
		if err != nil {
			fail[op]++
			fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", op, err)
			return
		}
		pass[op]++
	}

	for range o.N {
		c := check.RandomAppendShape(g)
		p, err := check.NewAppendProblem(r, s, g, c)
		if err != nil {
			return err
		}
		record("append", p.RunAndCheck(r, s))
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
		record("rope+cache", p.RunAndCheck(r, s))
		if err := p.Arena.Free(); err != nil {
			return err
		}
	}
	for range o.N {
		record("mla", check.RunMLA(r, s, g, check.RandomMLAShape(g)))
		record("qkv+norm+rope", check.RunQKV(r, s, g, check.RandomQKVShape(g)))
	}
	for range o.N {
		c := check.RandomDecodeShape(g)
		p, err := check.NewDecodeProblem(r, s, g, c)
		if err != nil {
			return err
		}
		out, lse, err := p.Run(r, s)
		if err == nil {
			err = p.Check(out, lse)
		}
		record("decode auto", err)
		// The same problem through single-pass and a random forced split count.
		for _, forced := range []int{1, 1 + g.IntN(40)} {
			k := dispatch.DefaultKnobs()
			k.ForcedSplits = forced
			op := "decode single-pass"
			if forced > 1 {
				op = "decode forced split-K"
			}
			plan, err := r.PlanDecodeWith(&p.Args, p.Args.MaxKVLen, k)
			if err == nil {
				out, lse, err = p.RunWithPlan(r, s, plan)
			}
			if err == nil {
				err = p.Check(out, lse)
			}
			record(op, err)
		}
		if err := p.Arena.Free(); err != nil {
			return err
		}
	}
	total := 0
	fmt.Println()
	for _, op := range []string{"append", "rope+cache", "mla", "qkv+norm+rope", "decode auto", "decode single-pass", "decode forced split-K"} {
		fmt.Printf("%-24s pass %4d  fail %4d\n", op, pass[op], fail[op])
		total += fail[op]
	}
	if total > 0 {
		return fmt.Errorf("verify: %d failure(s)", total)
	}
	return nil
}
