package ref

import (
	"fmt"
	"math"
)

// elementDiff returns |got-want| for one element pair, treating non-finite
// values strictly: a NaN or infinity in got against a finite want is +Inf;
// a non-finite want matches only the identical value in got (the same
// infinity, or any NaN against a NaN), which counts as no difference and is
// reported by ok=false so the caller can leave it out of norms.
func elementDiff(got, want float64) (diff float64, ok bool) {
	switch {
	case math.IsNaN(want):
		if math.IsNaN(got) {
			return 0, false
		}
		return math.Inf(1), true
	case math.IsInf(want, 0):
		if got == want {
			return 0, false
		}
		return math.Inf(1), true
	case math.IsNaN(got) || math.IsInf(got, 0):
		return math.Inf(1), true
	}
	return math.Abs(got - want), true
}

func checkLens(op string, got, want []float64) {
	if len(got) != len(want) {
		panic(fmt.Sprintf("ref: %s: len(got)=%d, len(want)=%d", op, len(got), len(want)))
	}
}

// RelL2 returns the relative L2 error ‖got−want‖₂ / ‖want‖₂, or ‖got‖₂ when
// ‖want‖₂ is 0. Any NaN or infinity in got where want is finite makes it +Inf.
// Elements where want is not finite (the -Inf lse of an empty sequence, say)
// must be matched exactly by got — the same infinity, or a NaN for a NaN —
// and are then left out of both norms; otherwise the result is +Inf.
// It panics if the lengths differ.
func RelL2(got, want []float64) float64 {
	checkLens("RelL2", got, want)
	var diffSq, wantSq, gotSq float64
	for i := range got {
		diff, ok := elementDiff(got[i], want[i])
		if math.IsInf(diff, 1) {
			return math.Inf(1)
		}
		if !ok {
			continue
		}
		diffSq += diff * diff
		wantSq += want[i] * want[i]
		gotSq += got[i] * got[i]
	}
	if wantSq == 0 {
		return math.Sqrt(gotSq)
	}
	return math.Sqrt(diffSq) / math.Sqrt(wantSq)
}

// MaxAbsDiff returns max_i |got[i]−want[i]|, 0 for empty slices. Non-finite
// values are treated as in RelL2: a mismatch is +Inf, an exact match of a
// non-finite want counts as 0. It panics if the lengths differ.
func MaxAbsDiff(got, want []float64) float64 {
	checkLens("MaxAbsDiff", got, want)
	var worst float64
	for i := range got {
		diff, _ := elementDiff(got[i], want[i])
		worst = math.Max(worst, diff)
	}
	return worst
}
