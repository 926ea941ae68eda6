package check

import (
	"math"
	"math/rand/v2"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// mods are random score modifiers on the device and as the reference takes
// them.
type mods struct {
	ref          ref.Mods
	sinks, alibi pagedkv.Buffer
}

// newMods draws sinks (logits around the scores' range, so that they
// matter: N(0, 1.5)) and ALiBi slopes (the geometric series of the ALiBi
// paper, 2^(−8(h+1)/heads), over numQHeads heads, in random order) when
// asked, uploads them on s into a, and returns them with window and
// softCap.
func newMods(a *Arena, s *pagedkv.Stream, g *rand.Rand, numQHeads, window int, softCap float32, sinks, alibi bool) (mods, error) {
	m := mods{ref: ref.Mods{SlidingWindow: window, SoftCap: float64(softCap)}}
	upload := func(v []float32) (pagedkv.Buffer, []float64, error) {
		b, err := Upload(a, s, v, 4)
		w := make([]float64, len(v))
		for i, x := range v {
			w[i] = float64(x)
		}
		return b, w, err
	}
	var err error
	if sinks {
		v := make([]float32, numQHeads)
		for i := range v {
			v[i] = float32(1.5 * g.NormFloat64())
		}
		if m.sinks, m.ref.Sinks, err = upload(v); err != nil {
			return m, err
		}
	}
	if alibi {
		v := make([]float32, numQHeads)
		for i, h := range g.Perm(numQHeads) {
			v[i] = float32(math.Pow(2, -8*float64(h+1)/float64(numQHeads)))
		}
		if m.alibi, m.ref.AlibiSlopes, err = upload(v); err != nil {
			return m, err
		}
	}
	return m, nil
}
