package ref

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRelL2(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name      string
		got, want []float64
		rel       float64
		maxAbs    float64
	}{
		{"equal", []float64{1, -2, 3}, []float64{1, -2, 3}, 0, 0},
		{"empty", nil, nil, 0, 0},
		{"3-4-5", []float64{3, 4}, []float64{0, 0}, 5, 4},
		{"relative", []float64{1, 1}, []float64{0, 2}, math.Sqrt(2) / 2, 1},
		{"scaled", []float64{3.3, 4.4}, []float64{3, 4}, 0.1, 0.4},
		{"NaN in got", []float64{1, nan}, []float64{1, 2}, inf, inf},
		{"Inf in got", []float64{-inf, 2}, []float64{1, 2}, inf, inf},
		{"NaN where want is 0", []float64{nan}, []float64{0}, inf, inf},
		{"matching -Inf is left out", []float64{math.Inf(-1), 1.5}, []float64{math.Inf(-1), 1}, 0.5, 0.5},
		{"mismatched -Inf", []float64{0, 1}, []float64{math.Inf(-1), 1}, inf, inf},
		{"opposite infinities", []float64{inf}, []float64{math.Inf(-1)}, inf, inf},
		{"NaN matches NaN", []float64{nan, 2}, []float64{nan, 2}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.rel, RelL2(tc.got, tc.want), 1e-15)
			assert.InDelta(t, tc.maxAbs, MaxAbsDiff(tc.got, tc.want), 1e-15)
		})
	}
	assert.Panics(t, func() { RelL2([]float64{1}, nil) })
	assert.Panics(t, func() { MaxAbsDiff(nil, []float64{1}) })
}
