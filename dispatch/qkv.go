package dispatch

import "math"

// The geometry of qkv_norm_rope (kernels_src/qkv.cu). A unit is two pieces
// of up to 8 elements of one head (elements 8c..8c+7 and HeadDim/2+8c..),
// ceil(HeadDim/16) units per head on a group of QKVHeadLanes lanes.
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

// QKVStagesMax is the deepest ring the kernel uses (kQKVMaxStages); the
// planner asks for qkvStages and falls back to 2 where the device's shared
// memory cannot hold them.
const (
	QKVStagesMax = 4
	qkvStages    = 3
	// qkvBlocksPerSM is how many blocks per SM the grid aims for: each block
	// takes a run of token groups, at most qkvMaxRun, so that long launches
	// pipeline within a block and short ones still spread over the SMs.
	qkvBlocksPerSM = 8
	qkvMaxRun      = 16
)

// QKVShape describes one split QKV + norm + RoPE + cache launch.
type QKVShape struct {
	NumTokens             int
	NumQHeads, NumKVHeads int
	HeadDim               int   // a multiple of 8 from 16 to 256
	RotDim                int   // HeadDim or HeadDim/2: floats per cos/sin row
	DType                 DType // F16 or BF16
	CacheDType            DType // DType, or E4M3
	// Layout: the cache layout (the x-split and shuffle ones have token-minor
	// V); BlockSize: tokens per page (0 counts as 1); NumSeqs: how many
	// sequences the tokens belong to (0 counts as 1).
	Layout    Layout
	BlockSize int
	NumSeqs   int
}

// QKVTileBytesMax bounds the page tile of a _tile kernel (QKVTileTokens):
// C slots of K rows in shared memory beside the ring. 16 KiB keeps four
// blocks of three 12.8 KB stages per SM on compute capability 9.0, as the
// plain kernel runs: a tile that cost blocks measured slower than no tile.
const QKVTileBytesMax = 16 << 10

// QKVTileMaxThreads is the most threads a block of a _tile kernel may
// have (kQKVTileThreads in kernels_src/qkv.cu, whose launch bounds hold
// those kernels to 168 registers).
const QKVTileMaxThreads = 128

// QKVTileTokens returns how many slots of a page (a chunk) a QKVNormRope
// prefill into the x-split or shuffle layout stages in shared memory before
// writing their K rows whole, or 0 for none: the most of 16, 8, 4 and 2
// that divides BlockSize and whose tile of C·NumKVHeads·HeadDim cache
// elements fits QKVTileBytesMax. Each K piece of the chunk is then C·16
// contiguous bytes, whole 32-byte sectors from 2 slots on.
func QKVTileTokens(a QKVShape) int {
	if !a.Layout.Laid() {
		return 0
	}
	for _, c := range []int{16, 8, 4, 2} {
		if a.BlockSize >= c && a.BlockSize%c == 0 && qkvTileBytes(&a, c) <= QKVTileBytesMax {
			return c
		}
	}
	return 0
}

// qkvTileBytes is the shared memory of a page tile of c slots: their K
// rows, NumKVHeads·HeadDim cache elements each.
func qkvTileBytes(a *QKVShape, c int) int { return c * a.NumKVHeads * a.HeadDim * a.CacheDType.Size() }

// qkvGeometry returns a qkv_norm_rope block's threads per token, tokens per
// block and ring stage bytes when it writes heads heads of a token.
func qkvGeometry(heads int, a *QKVShape) (threads, perBlock, stage int) {
	units := heads * QKVHeadLanes(a.HeadDim)
	threads = min((units+QKVUnitsPerThread-1)/QKVUnitsPerThread, QKVMaxThreads)
	threads = (threads + 31) &^ 31
	perBlock = max(1, qkvBlockThreads/threads)
	return threads, perBlock, QKVStageBytes(threads, perBlock, a.RotDim)
}

// QKVValuesMinTokens is how many tokens per sequence, on average, make
// PlanQKV write V into a laid cache with a launch of its own (TokenPlan.
// Values): qkv_norm_rope then leaves V alone, and qkv_values writes it as
// an append does, 8 or 16 consecutive rows of a page per thread pair as
// whole 16-byte pieces (through shared memory for 16-bit caches), where
// qkv_norm_rope stores each token's V element by element, 2 bytes per
// 32-byte sector. Below it (decode steps: one token per sequence) the
// rows are scattered anyway and the second launch would only add its cost.
// 16 is one page run of the token path.
const QKVValuesMinTokens = 16

// QKVHeadLanes is how many lanes (and units) one head takes: its
// ceil(headDim/16) units rounded up to a power of two, so that a head's
// lanes sit in one warp and reduce its norm with shuffles; the lanes past
// its units idle. headDim/16 for a power of two.
func QKVHeadLanes(headDim int) int {
	units := (headDim + 15) / 16
	lanes := 1
	for lanes < units {
		lanes *= 2
	}
	return lanes
}

// QKVStageBytes is the shared memory of one ring stage of a qkv_norm_rope
// block of threads·tokens threads (QKVStage in kernels_src/qkv.cu): 16 bytes
// for each of a thread's 2·QKVUnitsPerThread pieces, each token's cos and sin
// rows, and 16 bytes of position and block id per token.
func QKVStageBytes(threads, tokens, rotDim int) int {
	return threads*tokens*2*QKVUnitsPerThread*16 + tokens*rotDim*8 + tokens*16
}

// QKVSharedBytesMax bounds the dynamic shared memory of any qkv_norm_rope
// plan on a device whose blocks may opt in to optin bytes: qkvStages stages
// of at most QKVMaxThreads threads' pieces and 4 tokens' (one warp each)
// 256-float rows, and never more than optin (PlanQKV refuses more).
func QKVSharedBytesMax(optin int) int {
	stage := QKVMaxThreads*2*QKVUnitsPerThread*16 + 4*256*8 + 4*16
	return min(qkvStages*stage, optin)
}

// PlanQKV plans a split QKV + norm + RoPE + cache launch (the _split kernel
// when HeadDim is not a multiple of 16, see QKVKernelName): Block.X threads
// per token, the fewest warps whose threads hold at most QKVUnitsPerThread
// units (QKVHeadLanes per head) of the token each (at most QKVMaxThreads; larger tokens take several
// passes); Block.Y tokens per block, enough for qkvBlockThreads threads.
// The ceil(NumTokens/Block.Y) token groups are dealt out in runs of up to
// qkvMaxRun groups, as short as keeps qkvBlocksPerSM blocks per SM, one run
// per block; SharedBytes holds qkvStages ring stages (2 where the device
// cannot hold them), and the page tile of a _tile kernel. A prefill into the
// x-split or shuffle layout (QKVValuesMinTokens tokens per sequence or more)
// writes V by qkv_values (Values) and q and K by the _tile kernel with
// TileTokens slots (QKVTileTokens) where its tile fits beside two stages
// and its block has at most QKVTileMaxThreads threads, else by the plain
// kernel. NumTokens == 0 gives Grid.X == 0. Errors wrap
// ErrInvalidShape. On success it allocates nothing.
func PlanQKV(a QKVShape, dev DeviceFacts) (TokenPlan, error) {
	switch {
	case a.NumTokens < 0 || a.NumTokens > math.MaxInt32:
		return TokenPlan{}, errf("dispatch: QKVShape.NumTokens=%d is out of range; allowed: 0..%d", a.NumTokens, math.MaxInt32)
	case a.NumQHeads < 1 || a.NumQHeads > 1<<16:
		return TokenPlan{}, errf("dispatch: QKVShape.NumQHeads=%d is out of range; allowed: 1..%d", a.NumQHeads, 1<<16)
	case a.NumKVHeads < 1 || a.NumKVHeads > 1<<16:
		return TokenPlan{}, errf("dispatch: QKVShape.NumKVHeads=%d is out of range; allowed: 1..%d", a.NumKVHeads, 1<<16)
	case a.HeadDim < 16 || a.HeadDim > 256 || a.HeadDim%8 != 0:
		return TokenPlan{}, errf("dispatch: QKVShape.HeadDim=%d is not supported; supported: a multiple of 8 from 16 to 256", a.HeadDim)
	case a.RotDim != a.HeadDim && a.RotDim != a.HeadDim/2:
		return TokenPlan{}, errf("dispatch: QKVShape.RotDim=%d is not allowed; allowed: HeadDim=%d or HeadDim/2=%d", a.RotDim, a.HeadDim, a.HeadDim/2)
	case dev.SMs < 1:
		return TokenPlan{}, errf("dispatch: DeviceFacts.SMs=%d is out of range; allowed: 1 or more", dev.SMs)
	}
	kernel, err := QKVKernelName(a.DType, a.CacheDType, a.HeadDim)
	if err != nil {
		return TokenPlan{}, err
	}
	// Into the x-split and shuffle layouts a prefill leaves V to
	// qkv_values, and stages K in page chunks in a _tile kernel where its
	// tile fits.
	values := a.Layout.Laid() && a.NumTokens >= QKVValuesMinTokens*max(a.NumSeqs, 1)
	heads := a.NumQHeads + 2*a.NumKVHeads
	if values {
		heads -= a.NumKVHeads // qkv_values writes V
	}
	threads, perBlock, stage := qkvGeometry(heads, &a)
	tileTokens, tileBytes := 0, 0
	if tk, ok := tables.qkvTile[kernel]; values && ok && threads*perBlock <= QKVTileMaxThreads {
		if tileTokens = QKVTileTokens(a); tileTokens > 0 {
			tileBytes = qkvTileBytes(&a, tileTokens)
			if 2*stage+tileBytes <= dev.MaxSharedPerBlockOptin {
				kernel = tk
			} else {
				tileTokens, tileBytes = 0, 0
			}
		}
	}
	stages := qkvStages
	if stages*stage+tileBytes > dev.MaxSharedPerBlockOptin {
		stages = 2
	}
	if stages*stage > dev.MaxSharedPerBlockOptin {
		return TokenPlan{}, errf("dispatch: QKVShape with %d heads of HeadDim=%d needs %d bytes of shared memory per block; %s allows %d",
			a.NumQHeads+2*a.NumKVHeads, a.HeadDim, stages*stage, dev.Name, dev.MaxSharedPerBlockOptin)
	}
	groups := (a.NumTokens + perBlock - 1) / perBlock
	run := min(max((groups+qkvBlocksPerSM*dev.SMs-1)/(qkvBlocksPerSM*dev.SMs), 1), qkvMaxRun)
	plan := TokenPlan{Launch: Launch{
		Kernel:      kernel,
		Grid:        Dim3{uint32((groups + run - 1) / run), 1, 1},
		Block:       Dim3{uint32(threads), uint32(perBlock), 1},
		SharedBytes: uint32(stages*stage + tileBytes),
	}, TileTokens: tileTokens}
	if values {
		rows, err := planRows(AppendShape{NumTokens: a.NumTokens, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim},
			qkvValuesKernel(a.DType, a.CacheDType), AppendGroupTokens)
		if err != nil {
			return TokenPlan{}, err
		}
		plan.Values = rows.Launch
	}
	return plan, nil
}
