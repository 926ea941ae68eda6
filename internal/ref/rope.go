package ref

import (
	"fmt"
	"math"
)

// RopeRotate applies rotary position embedding in float64 to x
// [tokens, heads, headDim] (token t at positions[t]) and returns the result.
// cosSin is [maxPos, 2·rot]: each row rot cosines, then rot sines; rot is
// headDim (one value per element) or headDim/2 (one per rotated pair). NeoX
// rotates halves (x[j], x[j+headDim/2]); otherwise GPT-J rotates interleaved
// pairs (x[2i], x[2i+1]). For a pair (x1, x2) at elements (e1, e2):
// out[e1] = x1·cos(e1) − x2·sin(e1), out[e2] = x2·cos(e2) + x1·sin(e2), where
// cos(e) is the table's value for element e (rot = headDim) or for the pair
// (rot = headDim/2). A position outside the table panics.
func RopeRotate(x []float64, heads, headDim int, positions []int64, cosSin []float32, rot int, neox bool) []float64 {
	if rot != headDim && rot != headDim/2 {
		panic(fmt.Sprintf("ref: RopeRotate: rot=%d, want %d or %d", rot, headDim, headDim/2))
	}
	maxPos := len(cosSin) / (2 * rot)
	out := make([]float64, len(x))
	half := headDim / 2
	for t, pos := range positions {
		if pos < 0 || int(pos) >= maxPos {
			panic(fmt.Sprintf("ref: RopeRotate: token %d has position %d, the table has %d rows", t, pos, maxPos))
		}
		row := cosSin[int(pos)*2*rot:]
		for h := range heads {
			base := (t*heads + h) * headDim
			for j := range half {
				e1, e2 := 2*j, 2*j+1
				if neox {
					e1, e2 = j, j+half
				}
				c1, c2 := j, j
				if rot == headDim {
					c1, c2 = e1, e2
				}
				x1, x2 := x[base+e1], x[base+e2]
				out[base+e1] = x1*float64(row[c1]) - x2*float64(row[rot+c1])
				out[base+e2] = x2*float64(row[c2]) + x1*float64(row[rot+c2])
			}
		}
	}
	return out
}

// RMSNormHeads returns x [tokens, heads, dim] with every head scaled by
// w[d] / sqrt(mean(x²) + eps), in float64.
func RMSNormHeads(x []float64, heads, dim int, w []float64, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/dim; r++ {
		row := x[r*dim : (r+1)*dim]
		ss := 0.0
		for _, v := range row {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+eps)
		for d, v := range row {
			out[r*dim+d] = v * inv * w[d]
		}
	}
	return out
}
