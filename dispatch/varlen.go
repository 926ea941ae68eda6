package dispatch

import "math"

// The varlen kernels' geometry (kernels_src/varlen.cuh).
const (
	// VarlenThreads is the block size of the varlen and merge kernels
	// (kVarlenThreads).
	VarlenThreads = 128
	// VarlenMaxSplits is the largest varlen split count (kVarlenMaxSplits).
	VarlenMaxSplits = 64
	// VarlenSplitCostKeys is what one more split costs a varlen, in the
	// time one block takes to stream as many KV positions: its start,
	// and its share of the merge (which reads every split's partials).
	// VarlenMergeCostKeys is what splitting at all costs: the merge
	// kernel's launch. Measured together on an H100 (1×16 tokens over
	// 512–2048 positions, every forced split count): a 64-key tile of
	// 64 rows takes about 0.9 µs, a split 0.37 µs more, the merge launch
	// about 1.4 µs.
	VarlenSplitCostKeys = 24
	VarlenMergeCostKeys = 100
	// VarlenMinSplitSpan is the fewest KV positions a block must read
	// before its varlen splits at all. Below it a split saves the GPU at
	// most a few tiles, while the merge's second launch costs the host
	// about as much as the first: on an H100 VM a Varlen of 4 rows × 4
	// tokens over at most 404 positions took 10.6 µs of host time as two
	// launches, against 5.2 for a Decode. From 512 positions (one chunk
	// of 16 tokens) the split is the faster call even back to back.
	VarlenMinSplitSpan = 512
	// VarlenMaxAutoClusterSplits is the most splits of a count the model
	// chose that merge on chip (a forced count: MaxClusterSplits). On an
	// H100, one sequence's 16 tokens over 512 positions ran ×4 in 11.5 µs
	// as clusters against 12.5–13.2 with the merge launch, but ×8 over 1024
	// positions tied (14.3 against 14.3–14.6) and over 2048 lost (17.6
	// against 16.8–17.0): the on-chip merge reads every split's rows, one
	// more block of them per split.
	VarlenMaxAutoClusterSplits = 4
	// VarlenMaxSplitWave bounds VarlenPlan.SplitWave (the blocks a wave of
	// the GPU holds), so that the kernels' model stays in int32.
	VarlenMaxSplitWave = 1 << 20
)

// VarlenGeometry returns the packed (query token, query head) rows one
// block of varlen kernel computes and the KV positions of its K/V tiles
// (VarlenConfig in kernels_src/varlen.cuh), and whether kernel is a varlen
// kernel. The G query heads of a KV head share each K/V tile, so a block
// holds rows/G query tokens.
func VarlenGeometry(kernel string) (rows, keys int, ok bool) {
	g, ok := tables.varlenShape[kernel]
	return g.rows, g.keys, ok
}

// VarlenWGAlign is the alignment in bytes of the wgmma kernels' shared
// memory tiles (kVarlenWGAlign in kernels_src/varlen.cuh): they launch with
// that many more bytes and start at the first such boundary.
const VarlenWGAlign = 1024

// VarlenWGKernel reports whether kernel is a wgmma varlen kernel (entry
// suffix _wg or _wg_mods, the varlen_*_sm90a modules: sm_90a, compute
// capability 9.0 only), which PlanVarlen takes in place of the flash-layout
// kernels over a cache of the queries' type at head dims 64 and 128 (not
// forced keys) where DeviceFacts.WGMMA and Knobs.VarlenWGMMA allow.
func VarlenWGKernel(kernel string) bool { return tables.varlenShape[kernel].wg }

// Where an automatic plan (Knobs.VarlenWGMMA auto) takes the wgmma kernel
// (docs/design.md, the planner's rules): in place of a 64-row kernel from a
// longest KV (VarlenShape.MaxKVLen) of VarlenWGMinKV, in place of a
// 128-row one from VarlenWGMinKVLong where the sequences average
// VarlenWGMinTokens query tokens or more, and, without score modifiers,
// the 128-row kernel's blocks (row tiles × KV heads) fill at most
// VarlenWGMaxWaves waves of the device (its SMs × that kernel's blocks
// per SM): past that the 128-row kernel's lower cost per tile wins over
// the 64-row wgmma blocks' shorter last wave.
const (
	VarlenWGMinKV     = 1024
	VarlenWGMinKVLong = 2048
	VarlenWGMinTokens = 512
	VarlenWGMaxWaves  = 8
)

// The TensorCores notes of a varlen plan on a device with the wgmma
// kernels (DeviceFacts.WGMMA): which instructions the kernel runs, and why.
const (
	WGMMAOn       = "wgmma (VARLEN_WGMMA=1)"
	WGMMAAuto     = "wgmma (auto: measured faster at this KV and query length)"
	WGMMAOff      = "mma.sync (VARLEN_WGMMA=0)"
	WGMMAShort    = "mma.sync (auto: KV or queries too short for wgmma)"
	WGMMAWaves    = "mma.sync (auto: many waves of 128-row blocks, measured faster there)"
	WGMMANoKernel = "mma.sync (no wgmma kernel for this head dim, cache dtype or layout)"
	WGMMAKeys     = "mma.sync (K/V tile forced)"
)

// varlenCores returns the TensorCores note for s planned on kernel (the
// mma.sync kernel PlanVarlen chose before score modifiers, whose _mods twin
// the wgmma kernel's _mods twin replaces): "" where the device has no
// wgmma kernels.
func varlenCores(s *VarlenShape, dev *DeviceFacts, k *Knobs, kernel string) string {
	wg, ok := tables.varlenWG[kernel]
	switch {
	case !dev.WGMMA:
		return ""
	case !ok || VarlenSharedBytes(wg) > dev.MaxSharedPerBlockOptin:
		return WGMMANoKernel
	case k.VarlenKeys != 0:
		return WGMMAKeys
	case k.VarlenWGMMA == SplitOff:
		return WGMMAOff
	case k.VarlenWGMMA == SplitOn:
		return WGMMAOn
	}
	return varlenWGAuto(s, dev, kernel)
}

// varlenWGAuto returns the TensorCores note of an automatic choice for s
// between the wgmma kernel and kernel (64 or 128 packed rows a block) on
// dev: WGMMAAuto where the wgmma kernel is the faster.
func varlenWGAuto(s *VarlenShape, dev *DeviceFacts, kernel string) string {
	rows := tables.varlenShape[kernel].rows
	switch {
	case rows <= 64 && s.MaxKVLen >= VarlenWGMinKV:
		return WGMMAAuto
	case rows <= 64 || s.MaxKVLen < VarlenWGMinKVLong || s.NumTokens < VarlenWGMinTokens*s.NumSeqs:
		return WGMMAShort
	case s.Mods:
		return WGMMAAuto
	}
	blocks := int64(varlenTiles(s, s.NumQHeads/s.NumKVHeads, rows)) * int64(s.NumKVHeads)
	if blocks > int64(VarlenWGMaxWaves)*int64(dev.SMs)*int64(max(dev.Occupancy[kernel], 1)) {
		return WGMMAWaves
	}
	return WGMMAAuto
}

// varlenTiles returns the row tiles of rows packed rows that s has: those
// of its host query bounds, else those of the grid (an upper bound).
func varlenTiles(s *VarlenShape, group, rows int) int {
	if cu := s.HostCuSeqlensQ; len(cu) == s.NumSeqs+1 {
		return VarlenRowTiles(func(i int) int { return int(cu[i+1] - cu[i]) }, s.NumSeqs, group, rows)
	}
	return int(VarlenGridX(s.NumSeqs, s.NumTokens, group, rows))
}

// VarlenWGTwin returns the wgmma kernel that PlanVarlen may take in place
// of kernel (a flash-layout varlen kernel over a cache of the queries'
// type at head dims 64 and 128), and whether there is one.
func VarlenWGTwin(kernel string) (string, bool) {
	wg, ok := tables.varlenWG[kernel]
	return wg, ok
}

// varlenStages is the ring depth of every varlen kernel
// (VarlenConfig::kStages in kernels_src/varlen.cuh).
const varlenStages = 2

// varlenGeometry is what the planner and the launcher know of a varlen
// kernel.
type varlenGeometry struct {
	headDim, cacheSize, rows, keys int
	cluster                        bool // a _cluster twin (VarlenClusterKernel)
	wg                             bool // a wgmma kernel (VarlenWGKernel)
}

// VarlenShape describes one paged varlen attention launch, as the host
// knows it.
type VarlenShape struct {
	NumSeqs    int
	NumTokens  int // the query tokens of the batch (a graph: the most any replay has)
	NumQHeads  int
	NumKVHeads int
	HeadDim    int
	MaxKVLen   int // the largest KV length (pos_offset + q_len) of the batch, or a graph's capacity
	DType      DType
	CacheDType DType
	Layout     Layout // the caches' layout (the x-split and shuffle ones: blocks of x or more, which the root package checks)
	// HostCuSeqlensQ (optional): the host's copy of the batch's query
	// bounds ([NumSeqs+1], checked by the caller), so the planner counts the
	// row tiles the batch really has; without it, it plans for the grid.
	HostCuSeqlensQ []int32
	// Mods: the varlen modifies its scores (a sliding window, soft-cap,
	// sinks or ALiBi), which the _mods kernels do (VarlenModsKernel: the
	// flash layout, every cache dtype). SlidingWindow (> 0, with
	// Mods) bounds the KV a block reads to about the window, and the split
	// count follows that span instead of MaxKVLen.
	Mods          bool
	SlidingWindow int
}

// VarlenPlan is what the launcher does for a varlen. Its SplitK scratch
// holds partial outputs [NumTokens, NumQHeads, Splits, HeadDim], maxima and
// sums [NumTokens, NumQHeads, Splits]; a varlen needs no counters.
type VarlenPlan struct {
	Launch
	SplitK
	// SplitWave > 0 marks a split count the model chose (VarlenModelSplits):
	// the kernel then splits each row tile from its own KV range with the
	// same model, for SplitBlocks blocks a split in waves of SplitWave, and
	// Splits is only the most any tile takes. So a ragged batch splits each
	// sequence from its length, and a graph planned for a long KV capacity
	// and replayed over short lengths splits as an eager plan for those
	// lengths would (the splits a tile leaves exit at once, and the merge
	// skips them). 0: every tile takes all Splits (a forced count).
	SplitBlocks, SplitWave int
	// Cluster is the thread-block cluster depth along Grid.Z: 0 for an
	// ordinary launch (a split-K one merges in a second launch of the
	// merge kernel); Splits when Kernel is a _cluster twin
	// (VarlenClusterKernel) whose splits of each row tile form one cluster
	// and merge on chip, in the one launch and without scratch.
	Cluster uint32
	// DecodePrefix > 0 marks a plan for the rest of a mixed batch: the
	// runtime's Varlen runs the batch's first DecodePrefix sequences (one
	// query token each) as a batched decode first, and this plan for the
	// sequences after them. A plan without a Kernel has no rest: every
	// sequence is one token and the batch runs as the decode alone.
	DecodePrefix int
	// TensorCores says, on a device with the wgmma kernels
	// (DeviceFacts.WGMMA), which tensor-core instructions the kernel runs
	// and why (one of the WGMMA notes); "" elsewhere.
	TensorCores string
}

// PlanVarlen plans a paged varlen attention launch: Grid.X is
// VarlenGridX(NumSeqs, NumTokens, G, rows) row tiles of the kernel's
// rows (VarlenGeometry), Grid.Y the KV heads and Grid.Z the splits.
//
// The kernel: below head dim 256, batches whose sequences average fewer
// than 128 packed rows (q_len·G: decode rows of a mixed batch, speculative
// verify) take the _r64 kernel, whose 64-row blocks keep every warp
// computing; longer queries the 128-row kernel, which reads shared memory
// half as often per product. At head dim 128 over a 16-bit cache that is
// its 64-key twin (_k64, VarlenK64KernelName) where two of the twin's 96
// KiB blocks fit an SM (Occupancy: compute capability 9.0's 228 KB, the
// H100 and H200, where it ran long prefill 6–8% faster), else the 32-key
// kernel (compute capability 8.0's 164 KB holds one such block, where the
// 32-key kernel keeps two); Knobs.VarlenKeys forces either. With Mods the
// kernel is the _mods twin of that choice (VarlenModsKernel; a _k64
// choice's twin is the 32-key kernel's).
//
// Split-K (Splits > 1) comes in
// when the row tiles leave the GPU without a full wave of blocks and a block
// reads at least VarlenMinSplitSpan positions: few query tokens over a long
// cache. The count minimizes the launch's estimated time in KV positions:
// waves × the longest split's whole tiles, plus VarlenSplitCostKeys a split
// and VarlenMergeCostKeys for the merge (the fewest splits among equals).
// SplitK (SPLIT_K_ATTN) off forbids it, on forces it wherever the KV can be
// split; ForcedSplits forces the count (the runtime sets it only for
// PlanVarlenWith: PAGED_FLASH_SPLITS and PAGED_FLASH govern decode);
// PagedFlash is not read. The scratch (partials for every
// query row and split) is cut to ScratchLimitBytes by lowering the split
// count. Its splits merge on chip where the kernel has a _cluster twin
// (VarlenClusterKernel: compute capability 9.0, Knobs.Clusters, at most
// VarlenMaxAutoClusterSplits splits, MaxClusterSplits forced, whose
// clusters all fit the device at once; the plan then needs no scratch),
// else in a second launch (VarlenMergeKernelName).
// Errors wrap ErrInvalidShape.
func PlanVarlen(s VarlenShape, dev DeviceFacts, k Knobs) (VarlenPlan, error) {
	if err := validateVarlen(&s, &dev, &k); err != nil {
		return VarlenPlan{}, err
	}
	group := s.NumQHeads / s.NumKVHeads
	kernel, err := VarlenKernelName(s.DType, s.CacheDType, s.Layout, s.HeadDim, VarlenShortRows(s.NumTokens, s.NumSeqs, group))
	if err != nil {
		return VarlenPlan{}, err
	}
	if k64, ok := tables.varlenK64[kernel]; ok && (k.VarlenKeys == 64 ||
		k.VarlenKeys == 0 && dev.Occupancy[k64] >= 2 && VarlenSharedBytes(k64) <= dev.MaxSharedPerBlockOptin) {
		kernel = k64
	}
	cores := varlenCores(&s, &dev, &k, kernel)
	if cores == WGMMAOn || cores == WGMMAAuto {
		kernel = tables.varlenWG[kernel]
	}
	if s.Mods {
		// validateVarlen checked that there is a twin (every _wg kernel
		// has one).
		kernel = tables.varlenMods[kernel]
	}
	geo := tables.varlenShape[kernel]
	shared := VarlenSharedBytes(kernel)
	if shared > dev.MaxSharedPerBlockOptin {
		if k.VarlenKeys == 64 {
			return VarlenPlan{}, errf("dispatch: Knobs.VarlenKeys=64 needs %d bytes of shared memory per block at VarlenShape.HeadDim=%d; %s allows %d; allowed there: 0 or 32",
				shared, s.HeadDim, dev.Name, dev.MaxSharedPerBlockOptin)
		}
		return VarlenPlan{}, errf("dispatch: VarlenShape.HeadDim=%d with CacheDType=%v needs %d bytes of shared memory per block; %s allows %d",
			s.HeadDim, s.CacheDType, shared, dev.Name, dev.MaxSharedPerBlockOptin)
	}
	gridX := VarlenGridX(s.NumSeqs, s.NumTokens, group, geo.rows)
	if gridX > maxGridX {
		return VarlenPlan{}, errf("dispatch: VarlenShape.NumTokens=%d with %d sequences and GQA group %d needs %d row tiles; at most %d fit a grid",
			s.NumTokens, s.NumSeqs, group, gridX, maxGridX)
	}
	tiles := varlenTiles(&s, group, geo.rows)
	p := VarlenPlan{
		Launch: Launch{Kernel: kernel, Grid: Dim3{uint32(gridX), uint32(s.NumKVHeads), 1}, Block: Dim3{VarlenThreads, 1, 1},
			SharedBytes: uint32(shared)},
		SplitK:      single(),
		TensorCores: cores,
	}
	splits, reason := chooseVarlenSplits(&s, &dev, &k, kernel, geo.keys, tiles)
	p.RequestedSplits, p.Reason = splits, reason
	if reason == ReasonFillSMs {
		p.SplitBlocks, p.SplitWave = max(tiles, 1)*s.NumKVHeads, dev.SMs*max(dev.Occupancy[kernel], 1)
	}
	// Clusters: a count of 2..VarlenMaxAutoClusterSplits the model chose
	// (or a forced one up to MaxClusterSplits) whose clusters, one per row
	// tile and KV head, the device holds at once: a second wave of
	// clusters costs more than the merge launch saves (small-query 8×16
	// over 8192, ×4: 136.8 µs as clusters of a 62-cluster wave, against
	// 105.0; H100).
	twin, cluster := tables.varlenCluster[kernel]
	most := VarlenMaxAutoClusterSplits
	if reason == ReasonForced {
		most = MaxClusterSplits
	}
	cluster = cluster && splits > 1 && splits <= most && dev.Clusters && k.Clusters &&
		clusterWaveFits(&dev, twin, splits, max(tiles, 1)*s.NumKVHeads) && VarlenSharedBytes(twin) <= dev.MaxSharedPerBlockOptin
	if cluster {
		p.Kernel, p.Cluster, p.SharedBytes = twin, uint32(splits), uint32(VarlenSharedBytes(twin))
	} else if splits > 1 {
		rows := int64(s.NumTokens) * int64(s.NumQHeads)
		perSplit := rows * int64(s.HeadDim+2) * 4
		if k.ScratchLimitBytes > 0 && int64(splits)*perSplit > k.ScratchLimitBytes {
			splits = int(max(1, min(int64(splits), k.ScratchLimitBytes/perSplit)))
			p.Reason = ReasonScratchLimit
		}
	}
	p.Splits, p.Clamped = splits, splits != p.RequestedSplits
	p.Grid.Z = uint32(splits)
	if !cluster {
		p.ScratchFloats, p.MaxOffset, p.SumOffset = VarlenPlanScratch(s.NumTokens, s.NumQHeads, s.HeadDim, splits)
	}
	return p, nil
}

// VarlenShortRows reports whether a batch of numSeqs sequences and totalQ
// query tokens of GQA group group takes the _r64 kernel (PlanVarlen): its
// sequences average fewer than 128 packed rows.
func VarlenShortRows(totalQ, numSeqs, group int) bool {
	return int64(totalQ)*int64(group) < 128*int64(numSeqs)
}

// VarlenPlanScratch returns the f32 scratch of a varlen plan with splits
// splits and where its maxima and sums start (Plan.ScratchFloats,
// MaxOffset, SumOffset; all 0 for one split): partial outputs [tokens,
// heads, splits, headDim], then maxima and sums [tokens, heads, splits].
func VarlenPlanScratch(tokens, heads, headDim, splits int) (floats, maxOffset, sumOffset int64) {
	if splits < 2 {
		return 0, 0, 0
	}
	rows := int64(tokens) * int64(heads) * int64(splits)
	return rows * int64(headDim+2), rows * int64(headDim), rows * int64(headDim+1)
}

// chooseVarlenSplits returns the split count before the scratch limit, and
// why, for tiles row tiles of kernel (tiles of keys positions).
func chooseVarlenSplits(s *VarlenShape, dev *DeviceFacts, k *Knobs, kernel string, keys, tiles int) (int, string) {
	// span: the most KV positions one block reads; with a sliding window,
	// its rows' windows from the tile that holds the first one's start.
	span := s.MaxKVLen
	if s.SlidingWindow > 0 {
		rows, _, _ := VarlenGeometry(kernel)
		group := s.NumQHeads / s.NumKVHeads
		span = min(span, s.SlidingWindow+(rows+group-1)/group+keys)
	}
	tilesInSpan := (span + keys - 1) / keys
	most := min(VarlenMaxSplits, tilesInSpan)
	switch {
	case k.SplitK == SplitOff:
		return 1, ReasonSplitKOff
	case k.ForcedSplits > 0:
		// Whole tiles per split: more splits than K/V tiles would be empty.
		return max(1, min(k.ForcedSplits, most)), ReasonForced
	case s.MaxKVLen == 0:
		return 1, ReasonEmptyKV
	case most < 2:
		if k.SplitK == SplitOn {
			return 1, ReasonSplitOnShortKV
		}
		return 1, ReasonShortKV
	case span < VarlenMinSplitSpan && k.SplitK != SplitOn:
		return 1, ReasonShortKV
	}
	blocks := max(tiles, 1) * s.NumKVHeads
	wave := dev.SMs * max(dev.Occupancy[kernel], 1)
	if blocks >= wave {
		if k.SplitK == SplitOn {
			return 2, ReasonSplitOn
		}
		return 1, ReasonGridFills
	}
	modelSpan := span
	if k.SplitK == SplitOn {
		modelSpan = max(span, VarlenMinSplitSpan) // forced: split however short
	}
	best := VarlenModelSplits(tilesInSpan, modelSpan, keys, most, blocks, wave)
	switch {
	case k.SplitK == SplitOn:
		return max(best, 2), ReasonSplitOn
	case best == 1:
		return 1, ReasonShortKV
	}
	return best, ReasonFillSMs
}

// VarlenModelSplits is the split model PlanVarlen follows and the kernels
// apply on the device to each row tile (VarlenPlan.SplitWave;
// length_splits in kernels_src/varlen.cuh, which must agree): the count
// from 1 to min(most, tiles) that minimizes the launch's estimated time
// over tiles tiles of keys positions (span positions) for blocks blocks a
// split in waves of wave blocks, in KV positions: ⌈blocks·n/wave⌉ waves of
// the longest split's whole tiles, plus VarlenSplitCostKeys a split and
// VarlenMergeCostKeys for the merge (the fewest splits among equals). A
// span below VarlenMinSplitSpan, or blocks that fill a wave, keep 1.
func VarlenModelSplits(tiles, span, keys, most, blocks, wave int) int {
	if span < VarlenMinSplitSpan || blocks >= wave {
		return 1
	}
	cost := func(n int) int64 {
		waves := (int64(blocks)*int64(n) + int64(wave) - 1) / int64(wave)
		c := waves * int64((tiles+n-1)/n) * int64(keys)
		if n > 1 {
			c += int64(n*VarlenSplitCostKeys + VarlenMergeCostKeys)
		}
		return c
	}
	best, bestCost := 1, cost(1)
	for n := 2; n <= min(most, tiles); n++ {
		if c := cost(n); c < bestCost {
			best, bestCost = n, c
		}
	}
	return best
}

// VarlenGridX returns the row tiles of a varlen launch of blocks of rows
// packed rows: sequence s owns tiles from s + ⌊cu_seqlens_q[s]·G/rows⌋ on
// (tile_start in kernels_src/varlen.cuh), so numSeqs + ⌊totalQ·G/rows⌋
// cover every batch of up to totalQ tokens.
func VarlenGridX(numSeqs, totalQ, group, rows int) int64 {
	return int64(numSeqs) + int64(totalQ)*int64(group)/int64(rows)
}

// VarlenRowTiles returns the row tiles a batch with these query lengths
// really uses: Σ ⌈q_len·G/rows⌉.
func VarlenRowTiles(qLens func(s int) int, numSeqs, group, rows int) int {
	n := 0
	for s := range numSeqs {
		n += (qLens(s)*group + rows - 1) / rows
	}
	return n
}

// VarlenSharedBytes returns the dynamic shared memory of varlen kernel
// (VarlenSmem in kernels_src/varlen.cuh): the q tile, the ring's stages of
// one K and one V tile as stored, and for fp8 one K and one V tile widened
// to 16 bits; 0 for a kernel that is not a varlen kernel.
func VarlenSharedBytes(kernel string) int {
	g, ok := tables.varlenShape[kernel]
	if !ok {
		return 0
	}
	n := g.rows*g.headDim*2 + varlenStages*2*g.keys*g.headDim*g.cacheSize
	if g.cacheSize == 1 {
		n += 2 * g.keys * g.headDim * 2
	}
	if g.wg {
		// wgmma's tiles start on a 1024-byte boundary (kVarlenWGAlign).
		n += VarlenWGAlign
	}
	if g.cluster {
		// VarlenSmem::kClusterBytes: the staged rows (stride headDim + 4),
		// their maxima and sums, and the merge's weights.
		n = max(n, g.rows*(g.headDim+4+2+MaxClusterSplits)*4)
	}
	return n
}

// validateVarlen checks what PlanVarlen relies on.
func validateVarlen(s *VarlenShape, dev *DeviceFacts, k *Knobs) error {
	if _, err := VarlenKernelName(s.DType, s.CacheDType, s.Layout, s.HeadDim, false); err != nil {
		return err
	}
	switch {
	case s.NumSeqs < 1 || s.NumSeqs > math.MaxInt32:
		return errf("dispatch: VarlenShape.NumSeqs=%d is out of range; allowed: 1..%d", s.NumSeqs, math.MaxInt32)
	case s.NumTokens < 0 || s.NumTokens > math.MaxInt32:
		return errf("dispatch: VarlenShape.NumTokens=%d is out of range; allowed: 0..%d", s.NumTokens, math.MaxInt32)
	case s.NumKVHeads < 1 || s.NumKVHeads > 65535:
		return errf("dispatch: VarlenShape.NumKVHeads=%d is out of range; allowed: 1..65535", s.NumKVHeads)
	case s.NumQHeads < s.NumKVHeads || s.NumQHeads%s.NumKVHeads != 0 || s.NumQHeads/s.NumKVHeads > MaxGroupSize:
		return errf("dispatch: VarlenShape.NumQHeads=%d is not allowed; allowed: NumKVHeads=%d times a group of 1..%d", s.NumQHeads, s.NumKVHeads, MaxGroupSize)
	case s.MaxKVLen < 0 || s.MaxKVLen > MaxSeqTokens:
		return errf("dispatch: VarlenShape.MaxKVLen=%d is out of range; allowed: 0..%d", s.MaxKVLen, MaxSeqTokens)
	case len(s.HostCuSeqlensQ) != 0 && len(s.HostCuSeqlensQ) != s.NumSeqs+1:
		return errf("dispatch: VarlenShape.HostCuSeqlensQ has %d values; allowed: none, or NumSeqs+1=%d", len(s.HostCuSeqlensQ), s.NumSeqs+1)
	case s.Mods && s.Layout.Laid():
		return errf("dispatch: VarlenShape.Mods with Layout=%v is not supported; allowed: %v, %v (the modifiers have flash-row kernels only)", s.Layout, LayoutFlash, LayoutHND)
	case s.SlidingWindow < 0 || (s.SlidingWindow > 0 && !s.Mods):
		return errf("dispatch: VarlenShape.SlidingWindow=%d is not allowed; allowed: 0, or > 0 with Mods", s.SlidingWindow)
	case dev.SMs < 1:
		return errf("dispatch: DeviceFacts.SMs=%d is out of range; allowed: ≥ 1", dev.SMs)
	}
	return validateKnobs(k)
}
