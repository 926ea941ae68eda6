package dispatch

import "math"

// The varlen kernels' geometry (kernels_src/varlen.cuh).
const (
	// VarlenThreads is the block size of the varlen and merge kernels
	// (kVarlenThreads).
	VarlenThreads = 128
	// VarlenRows is how many packed (query token, query head) rows one
	// varlen block computes (kVarlenRows): the G query heads of a KV head
	// share each K/V tile, so a block holds VarlenRows/G query tokens.
	VarlenRows = 64
	// VarlenMaxSplits is the largest varlen split count (kVarlenMaxSplits).
	VarlenMaxSplits = 64
	// VarlenMinSplitKeys is the fewest KV positions the planner gives one
	// split: four K/V tiles of 64 keys, so that a split streams long enough
	// to hide its start and the merge's extra traffic stays small.
	VarlenMinSplitKeys = 256
)

// VarlenShape describes one paged varlen attention launch, as the host
// knows it.
type VarlenShape struct {
	NumSeqs      int
	TotalQTokens int // the query tokens of the batch (a graph: the most any replay has)
	NumQHeads    int
	NumKVHeads   int
	HeadDim      int
	MaxKVLen     int // the largest KV length (pos_offset + q_len) of the batch, or a graph's capacity
	DType        DType
	CacheDType   DType
	// RowTiles (optional) is the number of row tiles the batch really has,
	// Σ ⌈q_len·G/VarlenRows⌉ over its sequences, when the host knows the
	// lengths; 0 plans for the grid's upper bound.
	RowTiles int
}

// PlanVarlen plans a paged varlen attention launch: Grid.X is
// VarlenGridX(NumSeqs, TotalQTokens, G) row tiles, Grid.Y the KV heads and
// Grid.Z the splits. Split-K (Splits > 1, merged by VarlenMergeKernel)
// comes in when the row tiles leave the GPU without a full wave of blocks
// and the KV is long enough to give each split VarlenMinSplitKeys
// positions: few query tokens over a long cache (speculative verify, small
// chunks). SPLIT_K_ATTN=0 forbids it, =1 forces it wherever the KV can be
// split, PAGED_FLASH_SPLITS forces the count. The scratch (partials for
// every query row and split) is cut to ScratchLimitBytes by lowering the
// split count. Errors wrap ErrInvalidShape.
func PlanVarlen(s VarlenShape, dev DeviceFacts, k Knobs) (Plan, error) {
	if err := validateVarlen(&s, &dev, &k); err != nil {
		return Plan{}, err
	}
	kernel, err := VarlenKernelName(s.DType, s.CacheDType, s.HeadDim)
	if err != nil {
		return Plan{}, err
	}
	shared := VarlenSharedBytes(s.HeadDim, s.CacheDType.Size())
	if shared > dev.MaxSharedPerBlockOptin {
		return Plan{}, errf("dispatch: VarlenShape.HeadDim=%d with CacheDType=%v needs %d bytes of shared memory per block; %s allows %d",
			s.HeadDim, s.CacheDType, shared, dev.Name, dev.MaxSharedPerBlockOptin)
	}
	group := s.NumQHeads / s.NumKVHeads
	gridX := VarlenGridX(s.NumSeqs, s.TotalQTokens, group)
	if gridX > maxGridX {
		return Plan{}, errf("dispatch: VarlenShape.TotalQTokens=%d with %d sequences and GQA group %d needs %d row tiles; at most %d fit a grid",
			s.TotalQTokens, s.NumSeqs, group, gridX, maxGridX)
	}
	p := Plan{
		Kernel: kernel, Grid: Dim3{uint32(gridX), uint32(s.NumKVHeads), 1}, Block: Dim3{VarlenThreads, 1, 1},
		SharedBytes: uint32(shared), Splits: 1, RequestedSplits: 1,
	}
	splits, reason := chooseVarlenSplits(&s, &dev, &k, kernel, int(gridX))
	p.RequestedSplits, p.Reason = splits, reason
	if splits > 1 {
		rows := int64(s.TotalQTokens) * int64(s.NumQHeads)
		perSplit := rows * int64(s.HeadDim+2) * 4
		if k.ScratchLimitBytes > 0 && int64(splits)*perSplit > k.ScratchLimitBytes {
			splits = int(min(int64(splits), k.ScratchLimitBytes/perSplit))
			p.Reason = ReasonScratchLimit
			if splits < 2 {
				splits = 1
			}
		}
	}
	p.Splits, p.Clamped = splits, splits != p.RequestedSplits
	if splits > 1 {
		rows := int64(s.TotalQTokens) * int64(s.NumQHeads) * int64(splits)
		p.Grid.Z = uint32(splits)
		p.ScratchFloats = rows * int64(s.HeadDim+2)
		p.MaxOffset = rows * int64(s.HeadDim)
		p.SumOffset = p.MaxOffset + rows
	}
	return p, nil
}

// chooseVarlenSplits returns the split count before the scratch limit, and
// why.
func chooseVarlenSplits(s *VarlenShape, dev *DeviceFacts, k *Knobs, kernel string, gridX int) (int, string) {
	maxByKV := min(VarlenMaxSplits, s.MaxKVLen/VarlenMinSplitKeys)
	switch {
	case !k.PagedFlash && k.ForcedSplits == 0 && k.SplitK != SplitOn:
		return 1, ReasonPagedFlashOff
	case k.SplitK == SplitOff:
		return 1, ReasonSplitKOff
	case k.ForcedSplits > 0:
		// Whole tiles per split: more splits than 64-key tiles would be empty.
		return max(1, min(k.ForcedSplits, VarlenMaxSplits, (s.MaxKVLen+63)/64)), ReasonForced
	case s.MaxKVLen == 0:
		return 1, ReasonEmptyKV
	case maxByKV < 2:
		if k.SplitK == SplitOn {
			return 1, ReasonSplitOnShortKV
		}
		return 1, ReasonShortKV
	}
	tiles := gridX
	if s.RowTiles > 0 {
		tiles = min(s.RowTiles, gridX)
	}
	blocks := int64(tiles) * int64(s.NumKVHeads)
	wave := int64(dev.SMs) * int64(max(dev.Occupancy[kernel], 1))
	if blocks >= wave {
		if k.SplitK == SplitOn {
			return 2, ReasonSplitOn
		}
		return 1, ReasonGridFills
	}
	splits := int(min(int64(maxByKV), (wave+blocks-1)/blocks))
	if k.SplitK == SplitOn {
		return max(splits, 2), ReasonSplitOn
	}
	return splits, ReasonFillSMs
}

// VarlenGridX returns the row tiles of a varlen launch: sequence s owns
// tiles from s + ⌊cu_seqlens_q[s]·G/VarlenRows⌋ on (tile_start in
// kernels_src/varlen.cuh), so numSeqs + ⌊totalQ·G/VarlenRows⌋ cover every
// batch of up to totalQ tokens.
func VarlenGridX(numSeqs, totalQ, group int) int64 {
	return int64(numSeqs) + int64(totalQ)*int64(group)/VarlenRows
}

// VarlenRowTiles returns the row tiles a batch with these query lengths
// really uses: Σ ⌈q_len·G/VarlenRows⌉.
func VarlenRowTiles(qLens func(s int) int, numSeqs, group int) int {
	n := 0
	for s := range numSeqs {
		n += (qLens(s)*group + VarlenRows - 1) / VarlenRows
	}
	return n
}

// VarlenSharedBytes returns the dynamic shared memory of a varlen kernel
// for headDim and a cache of cacheSize-byte elements (VarlenSmem in
// kernels_src/varlen.cuh): the q tile, two ring stages of one K and one V
// tile as stored, and for fp8 one K and one V tile widened to 16 bits.
func VarlenSharedBytes(headDim, cacheSize int) int {
	keys := 64
	if headDim > 128 {
		keys = 32
	}
	n := VarlenRows*headDim*2 + 2*2*keys*headDim*cacheSize
	if cacheSize == 1 {
		n += 2 * keys * headDim * 2
	}
	return n
}

// validateVarlen checks what PlanVarlen relies on.
func validateVarlen(s *VarlenShape, dev *DeviceFacts, k *Knobs) error {
	if _, err := VarlenKernelName(s.DType, s.CacheDType, s.HeadDim); err != nil {
		return err
	}
	switch {
	case s.NumSeqs < 1 || s.NumSeqs > math.MaxInt32:
		return errf("dispatch: VarlenShape.NumSeqs=%d is out of range; allowed: 1..%d", s.NumSeqs, math.MaxInt32)
	case s.TotalQTokens < 0 || s.TotalQTokens > math.MaxInt32:
		return errf("dispatch: VarlenShape.TotalQTokens=%d is out of range; allowed: 0..%d", s.TotalQTokens, math.MaxInt32)
	case s.NumKVHeads < 1 || s.NumKVHeads > 65535:
		return errf("dispatch: VarlenShape.NumKVHeads=%d is out of range; allowed: 1..65535", s.NumKVHeads)
	case s.NumQHeads < s.NumKVHeads || s.NumQHeads%s.NumKVHeads != 0 || s.NumQHeads/s.NumKVHeads > MaxGroupSize:
		return errf("dispatch: VarlenShape.NumQHeads=%d is not allowed; allowed: NumKVHeads=%d times a group of 1..%d", s.NumQHeads, s.NumKVHeads, MaxGroupSize)
	case s.MaxKVLen < 0 || s.MaxKVLen > MaxSeqTokens:
		return errf("dispatch: VarlenShape.MaxKVLen=%d is out of range; allowed: 0..%d", s.MaxKVLen, MaxSeqTokens)
	case s.RowTiles < 0:
		return errf("dispatch: VarlenShape.RowTiles=%d is negative", s.RowTiles)
	case dev.SMs < 1:
		return errf("dispatch: DeviceFacts.SMs=%d is out of range; allowed: ≥ 1", dev.SMs)
	}
	return validateKnobs(k)
}
