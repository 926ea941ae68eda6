package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// verifySplits is the split count the varlen split-K family forces
// (PlanVarlenWith); the planner lowers it for KV too short to split so.
const verifySplits = 5

// attnSweep verifies one attention op: each case draws a random problem
// and runs it through every path, each path a family of its own; a path can
// also be held to agree with an earlier one on the same problem.
type attnSweep[P any] struct {
	draw  func(g *rand.Rand) (attnCase[P], error)
	paths []attnPath[P]
}

// attnCase is one drawn problem on the device.
type attnCase[P any] struct {
	problem P
	shape   fmt.Stringer
	dtype   pagedkv.DType
	arena   *check.Arena // freed after the case's last path
	// check compares one path's result with the float64 reference.
	check func(out []float64, lse []float32) error
}

// attnPath is one way through the op.
type attnPath[P any] struct {
	family string
	// run runs the problem on this path: outputs poisoned, the op launched,
	// the results fetched. g serves a path that draws a parameter per case.
	// plan is the plan it followed, as far as it is known, for the failure
	// message.
	run func(p P, g *rand.Rand) (res attnResult, plan planned, err error)
	// agrees names an earlier path of the sweep whose result this one must
	// match within agreeTolerance (two GPU paths agree more tightly than
	// either agrees with float64); "" for none.
	agrees string
}

// planned is the plan a path followed, as the failure message names it.
type planned struct {
	kernel string
	splits int
}

// attnResult is what an attention path produced.
type attnResult struct {
	out []float64
	lse []float32
}

func result(out []float64, lse []float32, err error) (attnResult, error) {
	return attnResult{out, lse}, err
}

// run verifies n cases, recording each path of each case in t. It stops
// only on an error that is not a verdict on the op: a problem it could not
// set up or free.
func (w *attnSweep[P]) run(n int, g *rand.Rand, t *tally) error {
	for range n {
		c, err := w.draw(g)
		if err != nil {
			return err
		}
		passed := map[string]attnResult{}
		for _, path := range w.paths {
			res, plan, err := path.run(c.problem, g)
			if err != nil {
				err = fmt.Errorf("%v: %w", c.shape, err)
			} else {
				err = c.check(res.out, res.lse)
			}
			// Compare only with an earlier path that passed: one that failed
			// is counted already, and its output says nothing.
			if want, ok := passed[path.agrees]; err == nil && ok {
				if err = agree(c.dtype, want, res); err != nil {
					err = fmt.Errorf("%v: against %s: %w", c.shape, path.agrees, err)
				}
			}
			if err == nil {
				passed[path.family] = res
			} else if plan.kernel != "" {
				err = fmt.Errorf("[%s, %d splits] %w", plan.kernel, plan.splits, err)
			}
			t.record(path.family, err)
		}
		if err := c.arena.Free(); err != nil {
			return err
		}
	}
	return nil
}

// agreeTolerance is the relative L2 error allowed between two GPU paths of
// one problem that must agree: half what either may have against float64.
func agreeTolerance(d pagedkv.DType) float64 { return check.Tolerance(d) / 2 }

// agree checks that got, from one GPU path, matches want, from another on
// the same problem: the output within agreeTolerance by relative L2, every
// LSE within 1e-4 (relative above 1), an infinite one exactly.
func agree(d pagedkv.DType, want, got attnResult) error {
	if e := ref.RelL2(got.out, want.out); !(e <= agreeTolerance(d)) {
		return fmt.Errorf("output relative L2 difference %.3g > %.3g", e, agreeTolerance(d))
	}
	if len(got.lse) != len(want.lse) {
		return fmt.Errorf("%d LSE values, want %d", len(got.lse), len(want.lse))
	}
	for i, w := range want.lse {
		g, w64 := float64(got.lse[i]), float64(w)
		// An infinite LSE (-Inf: no key attended) matches only itself: the
		// relative bound would be infinite too.
		if ok := g == w64 || (!math.IsInf(w64, 0) && math.Abs(g-w64) <= 1e-4*max(1, math.Abs(w64))); !ok {
			return fmt.Errorf("LSE[%d]=%g, want %g", i, got.lse[i], w)
		}
	}
	return nil
}

// decodeSweep verifies Decode on r: the planner's choice, then the same
// problem single-pass and with a random forced split count.
func decodeSweep(r *pagedkv.Runtime) attnSweep[*check.DecodeProblem] {
	forced := func(splits func(*rand.Rand) int) func(*check.DecodeProblem, *rand.Rand) (attnResult, planned, error) {
		return func(p *check.DecodeProblem, g *rand.Rand) (attnResult, planned, error) {
			k := dispatch.DefaultKnobs()
			k.ForcedSplits = splits(g)
			plan, err := r.PlanDecodeWith(&p.Args, k)
			if err != nil {
				return attnResult{}, planned{}, err
			}
			res, err := result(p.RunWithPlan(r, r.Stream(), plan))
			return res, planned{plan.Kernel, plan.Splits}, err
		}
	}
	return attnSweep[*check.DecodeProblem]{
		draw: func(g *rand.Rand) (attnCase[*check.DecodeProblem], error) {
			c := check.RandomDecodeShape(g)
			p, err := check.NewDecodeProblem(r, r.Stream(), g, c)
			if err != nil {
				return attnCase[*check.DecodeProblem]{}, err
			}
			if err := drawMods(g, c.MaxLen, true, func(w int, softCap float32, sinks, alibi bool) error {
				return p.SetMods(r.Stream(), g, w, softCap, sinks, alibi)
			}); err != nil {
				return attnCase[*check.DecodeProblem]{}, errors.Join(err, p.Arena.Free())
			}
			return attnCase[*check.DecodeProblem]{problem: p, shape: c, dtype: c.DType, arena: p.Arena, check: p.Check}, nil
		},
		paths: []attnPath[*check.DecodeProblem]{
			{family: "decode auto", run: func(p *check.DecodeProblem, _ *rand.Rand) (attnResult, planned, error) {
				plan, err := r.PlanDecode(r.Stream(), &p.Args)
				if err != nil {
					return attnResult{}, planned{}, err
				}
				res, err := result(p.Run(r, r.Stream()))
				return res, planned{plan.Kernel, plan.Splits}, err
			}},
			{family: "decode single-pass", run: forced(func(*rand.Rand) int { return 1 })},
			{family: "decode forced split-K", run: forced(func(g *rand.Rand) int { return 1 + g.IntN(40) })},
		},
	}
}

// drawMods gives a third of the problems it is called for random score
// modifiers (each on or off; a window of 1…maxLen only where window is
// set) through set.
func drawMods(g *rand.Rand, maxLen int, window bool, set func(window int, softCap float32, sinks, alibi bool) error) error {
	if g.IntN(3) != 0 {
		return nil
	}
	w, softCap := 0, float32(0)
	if window && g.IntN(2) == 0 {
		w = 1 + g.IntN(max(maxLen, 1))
	}
	if g.IntN(2) == 0 {
		softCap = 5 + 45*g.Float32()
	}
	return set(w, softCap, g.IntN(2) == 0, g.IntN(2) == 0)
}

// varlenMods gives a problem drawn on r random score modifiers
// (drawMods) where its kernels take them: the flash and HND layouts (any
// cache dtype), a window only under the causal mask.
func varlenMods(r *pagedkv.Runtime, p *check.VarlenProblem, g *rand.Rand) error {
	c := p.Shape
	if c.Layout.Laid() {
		return nil
	}
	return drawMods(g, c.MaxKV, c.Causal, func(w int, softCap float32, sinks, alibi bool) error {
		return p.SetMods(r.Stream(), g, w, softCap, sinks, alibi)
	})
}

// varlenSweep verifies Varlen: problems drawn on auto, run through the
// runtime's own plan on auto, then on single (SPLIT_K_ATTN=0), then with
// verifySplits splits forced on auto (PlanVarlenWith, VarlenWithPlan),
// which must also agree with single.
func varlenSweep(auto, single *pagedkv.Runtime) attnSweep[*check.VarlenProblem] {
	on := func(r *pagedkv.Runtime) func(*check.VarlenProblem, *rand.Rand) (attnResult, planned, error) {
		return func(p *check.VarlenProblem, _ *rand.Rand) (attnResult, planned, error) {
			plan, err := r.PlanVarlen(r.Stream(), &p.Args)
			if err != nil {
				return attnResult{}, planned{}, err
			}
			// Varlen, not VarlenWithPlan: the path under test plans for itself.
			res, err := result(p.Run(r, r.Stream()))
			return res, planned{plan.Kernel, plan.Splits}, err
		}
	}
	forced := func(p *check.VarlenProblem, _ *rand.Rand) (attnResult, planned, error) {
		k := dispatch.DefaultKnobs()
		k.ForcedSplits = verifySplits
		plan, err := auto.PlanVarlenWith(&p.Args, k)
		if err != nil {
			return attnResult{}, planned{}, err
		}
		res, err := result(p.RunWithPlan(auto, auto.Stream(), plan))
		return res, planned{plan.Kernel, plan.Splits}, err
	}
	return attnSweep[*check.VarlenProblem]{
		draw: func(g *rand.Rand) (attnCase[*check.VarlenProblem], error) {
			c := check.RandomVarlenShape(g)
			p, err := check.NewVarlenProblem(auto, auto.Stream(), g, c)
			if err != nil {
				return attnCase[*check.VarlenProblem]{}, err
			}
			if err := varlenMods(auto, p, g); err != nil {
				return attnCase[*check.VarlenProblem]{}, errors.Join(err, p.Arena.Free())
			}
			// One reference serves the three paths: it costs more than they do.
			reference := sync.OnceValues(p.Reference)
			checkRun := func(out []float64, lse []float32) error {
				wantOut, wantLSE := reference()
				return p.CheckReference(out, lse, wantOut, wantLSE)
			}
			return attnCase[*check.VarlenProblem]{problem: p, shape: c, dtype: c.DType, arena: p.Arena, check: checkRun}, nil
		},
		paths: []attnPath[*check.VarlenProblem]{
			{family: "varlen auto", run: on(auto)},
			{family: "varlen single-pass", run: on(single)},
			{family: "varlen split-K", run: forced, agrees: "varlen single-pass"},
		},
	}
}

// sequenceSweep verifies SequenceAttention on r: one causal sequence of
// 1…300 query tokens (one token runs the batched decode, more a varlen with
// a head-major output), against float64.
func sequenceSweep(r *pagedkv.Runtime) attnSweep[*check.VarlenProblem] {
	return attnSweep[*check.VarlenProblem]{
		draw: func(g *rand.Rand) (attnCase[*check.VarlenProblem], error) {
			c := check.RandomVarlenShape(g)
			c.Seqs, c.Causal = 1, true
			p, err := check.NewVarlenProblem(r, r.Stream(), g, c)
			if err != nil {
				return attnCase[*check.VarlenProblem]{}, err
			}
			if err := varlenMods(r, p, g); err != nil {
				return attnCase[*check.VarlenProblem]{}, errors.Join(err, p.Arena.Free())
			}
			return attnCase[*check.VarlenProblem]{problem: p, shape: c, dtype: c.DType, arena: p.Arena, check: p.Check}, nil
		},
		paths: []attnPath[*check.VarlenProblem]{
			{family: "sequence attention", run: func(p *check.VarlenProblem, _ *rand.Rand) (attnResult, planned, error) {
				res, err := result(p.RunSequence(r, r.Stream()))
				return res, planned{}, err
			}},
		},
	}
}
