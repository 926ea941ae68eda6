package dispatch

import "math"

// The geometry of qkv_norm_rope (kernels_src/qkv.cu). A unit is two 16-byte
// pieces of one head (elements 8c..8c+7 and HeadDim/2+8c..), HeadDim/16
// units per head.
const (
	// QKVUnitsPerThread is how many units one thread holds per pass
	// (kQKVUnits in kernels_src/qkv.cu).
	QKVUnitsPerThread = 4
	// QKVMaxThreads is the kernels' __launch_bounds__: the most threads per
	// token and per block.
	QKVMaxThreads = 256
	// qkvBlockThreads is how many threads a block gets at least, by putting
	// several tokens in it, when one token needs fewer.
	qkvBlockThreads = 128
)

// QKVShape describes one split QKV + norm + RoPE + cache launch.
type QKVShape struct {
	NumTokens             int
	NumQHeads, NumKVHeads int
	HeadDim               int   // a power of two from 16 to 256
	In                    DType // F16 or BF16
	Cache                 DType // In, or E4M3
}

// PlanQKV plans a split QKV + norm + RoPE + cache launch: Block.X threads per
// token, the fewest warps whose threads hold at most QKVUnitsPerThread units
// of the token each (at most QKVMaxThreads; larger tokens take several
// passes); Block.Y tokens per block, enough for qkvBlockThreads threads; one
// block per Block.Y tokens. NumTokens == 0 gives Grid.X == 0. Errors wrap
// ErrInvalidShape. On success it allocates nothing.
func PlanQKV(a QKVShape) (Plan, error) {
	switch {
	case a.NumTokens < 0 || a.NumTokens > math.MaxInt32:
		return Plan{}, errf("dispatch: QKVShape.NumTokens=%d is out of range; allowed: 0..%d", a.NumTokens, math.MaxInt32)
	case a.NumQHeads < 1 || a.NumQHeads > 1<<16:
		return Plan{}, errf("dispatch: QKVShape.NumQHeads=%d is out of range; allowed: 1..%d", a.NumQHeads, 1<<16)
	case a.NumKVHeads < 1 || a.NumKVHeads > 1<<16:
		return Plan{}, errf("dispatch: QKVShape.NumKVHeads=%d is out of range; allowed: 1..%d", a.NumKVHeads, 1<<16)
	case a.HeadDim < 16 || a.HeadDim > 256 || a.HeadDim&(a.HeadDim-1) != 0:
		return Plan{}, errf("dispatch: QKVShape.HeadDim=%d is not supported; supported: a power of two from 16 to 256", a.HeadDim)
	}
	kernel, err := QKVKernelName(a.In, a.Cache)
	if err != nil {
		return Plan{}, err
	}
	units := (a.NumQHeads + 2*a.NumKVHeads) * (a.HeadDim / 16)
	threads := min((units+QKVUnitsPerThread-1)/QKVUnitsPerThread, QKVMaxThreads)
	threads = (threads + 31) &^ 31
	perBlock := max(1, qkvBlockThreads/threads)
	return Plan{
		Kernel:          kernel,
		Grid:            Dim3{uint32((a.NumTokens + perBlock - 1) / perBlock), 1, 1},
		Block:           Dim3{uint32(threads), uint32(perBlock), 1},
		Splits:          1,
		RequestedSplits: 1,
	}, nil
}
