package dispatch

import (
	"fmt"
	"math"
)

// Tunables of the split heuristic. Each comment says what its value trades
// and gives one H200 measurement behind it; docs/design.md collects them.
// Benchmarks that need another split count force it through Knobs.
const (
	// SplitCostTokens is what one more split costs (its block's fixed work
	// and its share of the merge), in KV tokens streamed by one block. A
	// split decode then takes about kv/s + SplitCostTokens·s, least at
	// s = √(kv / SplitCostTokens): fewer splits leave each block a longer
	// stream, more add fixed work and merging. Forced split counts ignore
	// it. At 32 the rule gives the best forced split count of seqs=1 at
	// every kv: 4, 8, 16, 32 at kv 512…32768 (H200, 2026-11-29).
	SplitCostTokens = 32.0
	// ClusterSplitCostTokens is SplitCostTokens for splits that merge on
	// chip in a thread-block cluster: the merge costs less, so more splits
	// pay. seqs=1, kv=512 takes 7.2 µs as 8 clustered splits against 8.0
	// as the 4 that SplitCostTokens would give (H200, 2026-11-29).
	ClusterSplitCostTokens = 8.0
	// ClusterMaxSplitTokens is the longest split, in KV tokens, that still
	// runs as a cluster: the on-chip merge saves a short split the global
	// merge's round trips, but a long one streams faster in the plain
	// kernel (seqs=8, kv=8192 takes 73.1 µs with 4 global splits against
	// 78.0 with 3 (2731 tokens) in clusters: H200, 2026-11-29). At 2048
	// tokens clusters still win: the same shape as ×4 clusters 70.6 µs
	// against 73.2 as ×4 global (H200, 2026-12-01), and group 16 (64/4
	// heads, seqs=8, kv=8192) as ×6 clusters (1366 tokens) 46.6 µs against
	// 53.8 as the ×8 global merge a limit of 1024 would leave it (H200,
	// 2026-12-02).
	ClusterMaxSplitTokens = 2048
	// OneWaveRingBytes is the ring depth, in bytes of K and V rows per warp,
	// of a decode launch whose grid fits in one wave (every block resident
	// at once): at least two stages, at most the deep ring of
	// DecodeSharedBytes. Such grids stream faster from the shallower ring
	// (2 stages at head dim 128, 16-bit: seqs=32, kv=2048 67.4 µs against
	// 68.9 with 3, both at 2 blocks per SM; H200, 2026-12-02). A grid of several
	// waves keeps the deep ring, where the shallow one loses, unless its
	// blocks are short (ShallowRingMaxTokens).
	OneWaveRingBytes = 16 << 10
	// OneWaveRingBytesFP8 is OneWaveRingBytes for fp8 caches: 3 stages of 4
	// KiB per warp at head dim 128 instead of 4, so that 4 blocks share an
	// SM instead of 3; fp8 blocks are bound by their math (the e4m3
	// moves), and more warps per SM hide it (seqs=32, kv=8192 153.7 →
	// 146.8 µs: H200, 2026-12-01).
	OneWaveRingBytesFP8 = 12 << 10
	// ShallowRingMaxTokens: a grid of several waves whose blocks each stream
	// at most this many KV tokens also gets the one-wave ring, when that
	// ring lets more of its blocks share an SM (DeviceFacts.ShallowOccupancy)
	// than the deep one: a short block's ramp and drain are a large part of
	// its life, and a third block per SM hides them, while long blocks
	// stream faster from the deep ring. Narrow kernels, seqs=128, kv=512:
	// 73.4 µs against 76.4 with the deep ring (H200, 2026-11-29).
	ShallowRingMaxTokens = 1024
	// BalanceMinChunkTokens is the shortest split a balanced plan cuts: the
	// √ rule's optimum for a 2048-token sequence is 8 splits of 256 (a value
	// derived from SplitCostTokens, not swept).
	BalanceMinChunkTokens = 256
	// BalanceRaggedRatio: an eager batch whose host lengths give
	// NumSeqs × max > BalanceRaggedRatio × Σ lengths is ragged, and the
	// automatic plan is balanced. A uniform batch gives 1, the bench's
	// ragged batches 1.82 and 42.9; 1.5, between them, is not swept.
	BalanceRaggedRatio = 1.5
	// BalanceGraphMinSeqs is the smallest batch whose graph plan, or eager
	// plan without host lengths, is balanced: neither knows the lengths, so
	// one long sequence among short ones would otherwise set a single-pass
	// wave's time. A smaller batch keeps the plan for its capacity: that plan
	// cuts every sequence into as many splits as the capacity's √ rule
	// gives, from the sequence's own length, so a long sequence among few is
	// spread over the GPU already, and the balanced plan's extra launch and
	// global merge cost more than they save (seqs=1 kv=512 18.6 µs balanced
	// against 7.4 with ×8 clusters: H200, 2026-12-01).
	BalanceGraphMinSeqs = 16
)

// BalanceMaxSeqs is the most sequences a balanced plan serves: one block
// partitions the batch from all its lengths (DecodePartitionKernel), 128
// sequences per pass.
const BalanceMaxSeqs = 512

// MaxSeqTokens bounds MaxBlocksPerSeq·BlockSize: the kernels hold token
// positions in int32, and their split arithmetic reaches up to MaxSplits−1
// pages and a tile past the table's end, so a bound well below 2^31 keeps
// every one of them exact.
const MaxSeqTokens = 1 << 30

// DecodePartitionKernel writes a balanced plan's work list before its decode
// launch (kernels_src/partition.cu): one block of DecodeThreads.
const DecodePartitionKernel = "decode_partition"

// MaxSplits is the largest split count any plan uses: the decode kernel's
// fused merge keeps one weight per split and head in shared memory
// (kMaxSplits in kernels_src/decode.cuh).
const MaxSplits = 64

// MaxClusterSplits is the most splits that run as one thread-block cluster:
// the portable cluster size limit (kMaxClusterSplits in
// kernels_src/decode.cuh).
const MaxClusterSplits = 8

// Threads per block of each kernel family.
const (
	DecodeThreads = 128
	TokenThreads  = 128 // per-token kernels (RoPE + cache, MLA helpers)
	AppendThreads = 128 // cache append and gather (__launch_bounds__ in kernels_src/cache.cu)
)

// maxGridY is CUDA's limit on gridDim.y and gridDim.z.
const maxGridY = 65535

// Reasons a plan gives for its split count. SplitK.Reason is always one of these
// (or "" for plans without a split decision), so planning allocates nothing.
const (
	ReasonPagedFlashOff      = "forced single-pass (PAGED_FLASH=0)"
	ReasonSplitKOff          = "forced single-pass (SPLIT_K_ATTN=0)"
	ReasonForced             = "forced split count (PAGED_FLASH_SPLITS)"
	ReasonForcedClamped      = "forced split count clamped to the number of pages"
	ReasonForcedRounded      = "forced split count rounded to whole pages per split"
	ReasonForcedScratchLimit = "forced split count reduced by the scratch limit"
	ReasonEmptyKV            = "no KV to split (MaxKVLen=0)"
	ReasonShortKV            = "auto: KV too short to split"
	ReasonGridFills          = "auto: grid fills the GPU"
	ReasonFillSMs            = "auto: split to fill SMs"
	ReasonSplitOn            = "split-K forced on (SPLIT_K_ATTN=1)"
	ReasonSplitOnShortKV     = "split-K forced on (SPLIT_K_ATTN=1) but KV too short to split"
	ReasonScratchLimit       = "auto: scratch limit reduced splits"
	ReasonClusterWave        = "auto: clusters of splits, one wave"
	ReasonBalancedRagged     = "auto: ragged batch, each sequence split from its own length"
	ReasonBalancedGraph      = "auto: graph capture, each sequence split from its length at replay"
	ReasonBalancedNoLens     = "auto: no host lengths, each sequence split from its device length"
	ReasonBalanceOn          = "balanced (DECODE_BALANCE=1)"
)

// SplitMode says whether decode may use split-K. It mirrors
// config.SplitMode, the knob as users spell it ("auto", "0", "1"), which
// cannot use this type (config does not import dispatch): the root package
// maps SplitAuto, SplitOff and SplitOn to their namesakes here
// (TestSplitModesMirror checks it); a mode added here needs one there.
type SplitMode uint8

// The split modes (SPLIT_K_ATTN auto, 0, 1).
const (
	SplitAuto SplitMode = iota // the heuristic decides
	SplitOff                   // always single-pass
	SplitOn                    // at least 2 splits whenever the KV is long enough
)

// String returns "auto", "off" or "on".
func (m SplitMode) String() string {
	switch m {
	case SplitAuto:
		return "auto"
	case SplitOff:
		return "off"
	case SplitOn:
		return "on"
	}
	return fmt.Sprintf("SplitMode(%d)", uint8(m))
}

// Knobs are the configuration the planner obeys. The zero value forces
// single-pass (PagedFlash false); start from DefaultKnobs.
type Knobs struct {
	PagedFlash        bool      // PAGED_FLASH; false forces the single-pass kernel
	ForcedSplits      int       // PAGED_FLASH_SPLITS; 0 = auto, else clamped to 1..min(MaxSplits, pages)
	SplitK            SplitMode // SPLIT_K_ATTN for varlen; a decode plan obeys it when a caller sets it (PlanDecodeWith), the runtime leaves it auto for decode
	ScratchLimitBytes int64     // SCRATCH_LIMIT_BYTES; 0 = no limit on one plan's scratch
	Clusters          bool      // DECODE_CLUSTERS (VARLEN_CLUSTERS for varlen); false keeps split-K merges in global memory
	Narrow            bool      // DECODE_NARROW; false keeps groups up to NarrowMaxGroup on the wide kernels
	Balance           SplitMode // DECODE_BALANCE: auto, off, or on (balanced whenever split-K is allowed)
	// VarlenKeys: the K/V tile of a 128-row varlen kernel that has a
	// 64-key twin (head dim 128, 16-bit caches): 0 = the planner's (see
	// PlanVarlen), 32 or 64 forces it and the mma.sync kernels (tests and
	// benchmarks; no environment variable sets it).
	VarlenKeys int
	// VarlenWGMMA (VARLEN_WGMMA): where the device has the wgmma kernels
	// (DeviceFacts.WGMMA, VarlenWGKernel), auto takes them where they
	// measured faster (VarlenWGMinKV, VarlenWGMinKVLong, VarlenWGMinTokens,
	// VarlenWGMaxWaves), on wherever they apply, off never.
	VarlenWGMMA SplitMode
}

// DefaultKnobs returns the knobs of an unconfigured runtime: paged flash on,
// automatic split count, no scratch limit, clusters where the device has them,
// narrow kernels for small groups, the wgmma varlen kernels where the device
// has them and they are the faster.
func DefaultKnobs() Knobs {
	return Knobs{PagedFlash: true, Clusters: true, Narrow: true}
}

// Dim3 is a CUDA grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// DeviceFacts are what the planner needs to know about the GPU, gathered once
// when the runtime loads.
type DeviceFacts struct {
	Name                   string
	SMs                    int // streaming multiprocessors
	MaxSharedPerBlockOptin int // bytes of dynamic shared memory a block may opt in to
	// Clusters reports thread-block clusters (compute capability 9.0 and
	// newer), which the cluster decode kernels need.
	Clusters bool
	// WGMMA reports that the wgmma varlen kernels (VarlenWGKernel; sm_90a
	// modules, compute capability 9.0 exactly) loaded on the device.
	WGMMA bool
	// ActiveClusters maps a cluster decode kernel to how many clusters of
	// each size (index 1..MaxClusterSplits) fit on the device at once
	// (cuOccupancyMaxActiveClusters at its launch block and shared memory).
	// A missing entry is estimated from Occupancy; an entry without room for
	// two-block clusters keeps the planner off clusters for that kernel.
	ActiveClusters map[string][]int
	// Occupancy maps a kernel entry name to the most blocks of it that can be
	// resident on one SM at its launch block size
	// (cuOccupancyMaxActiveBlocksPerMultiprocessor). A missing entry counts as 1.
	Occupancy map[string]int
	// ShallowOccupancy is the same for a decode kernel launched with the
	// one-wave ring (DecodeOneWaveSharedBytes). A missing entry counts as
	// no more than Occupancy.
	ShallowOccupancy map[string]int
}

// DecodeShape describes one paged decode launch.
type DecodeShape struct {
	NumSeqs    int // sequences in the batch, one query token each
	NumQHeads  int
	NumKVHeads int
	HeadDim    int
	BlockSize  int // tokens per KV-cache page
	// MaxKVLen is the largest KV length in the batch as the caller declares
	// it, or KV_CAPACITY when planning for CUDA-graph capture. The kernels
	// read the actual lengths from device memory.
	MaxKVLen        int
	MaxBlocksPerSeq int // columns of the block table
	DType           DType
	CacheDType      DType // DType, or E4M3 for an fp8 cache
	// HostKVLens is the host's copy of the batch's kv lengths (optional;
	// NumSeqs of them when set, each at most MaxKVLen): with it an eager
	// plan sees a ragged batch and balances it, and a uniform one runs
	// without the balanced plan's partition and merge. Without them an
	// eager plan of BalanceGraphMinSeqs or more sequences is balanced, as a
	// graph's is.
	HostKVLens []int32
	// Graph: the plan is for a CUDA graph, whose replays may see any lengths
	// up to MaxKVLen; the automatic plan is then balanced.
	Graph bool
	// Layout is the caches' layout: fp8 caches in the x-split and shuffle
	// layouts take the _laid kernels (DecodeLayoutKernel), except with Mods,
	// whose kernels read every layout.
	Layout Layout
	// Mods: the decode modifies its scores (a sliding window, soft-cap,
	// sinks or ALiBi), which the _mods kernels do (DecodeModsKernel; every
	// cache dtype and layout, never as clusters). SlidingWindow > 0 is
	// the window: each query reads at most its last SlidingWindow tokens
	// (one page more, for alignment), so the plan splits that much, and a
	// batch is never balanced (its partition would split whole lengths).
	Mods          bool
	SlidingWindow int
}

// DecodePlan is what the launcher does for a decode. Its SplitK scratch
// holds partial outputs [NumSeqs, NumQHeads, Splits, HeadDim], maxima and
// sums [NumSeqs, NumQHeads, Splits] (a balanced plan: one row per work item
// and query head instead).
type DecodePlan struct {
	Launch
	SplitK
	// Cluster is the thread-block cluster depth along Grid.Z: 0 for an
	// ordinary launch; Splits (2..MaxClusterSplits) when the splits of each
	// (sequence, KV head) run as one cluster and merge on chip, with no
	// scratch and no counters.
	Cluster uint32

	// BalanceMinPages > 0 marks a balanced plan: Grid.Y is a number of work
	// items (NumSeqs plus BalanceWave, the items one wave runs per KV head).
	// DecodePartitionKernel first splits each sequence from its real kv
	// length into at most Splits splits of at least BalanceMinPages pages,
	// as few as keep the GPU busy, and writes the work list, int32
	// [Grid.Y][4] at WorkOffset (floats from the start of the scratch,
	// 16-byte aligned); the decode's block (x, y) then computes item y. Its
	// partials have one row per item and query head.
	BalanceMinPages int
	BalanceWave     int
	WorkOffset      int64
}

// Balanced reports whether p is a balanced plan.
func (p *DecodePlan) Balanced() bool { return p.BalanceMinPages > 0 }

// PlanDecode plans a paged decode launch. It returns an error wrapping
// ErrInvalidShape, naming the field, when the shape, device facts or knobs
// cannot be planned for. On success it allocates nothing.
func PlanDecode(s DecodeShape, dev DeviceFacts, k Knobs) (DecodePlan, error) {
	if err := validateDecode(&s, &dev, &k); err != nil {
		return DecodePlan{}, err
	}
	group := s.NumQHeads / s.NumKVHeads
	if !k.Narrow {
		group = MaxGroupSize // the wide kernels serve every group
	}
	qi, vi, hi, _ := decodeIndex(s.DType, s.CacheDType, s.HeadDim, group)
	kernel := tables.decode[qi][vi][hi]
	if name := tables.sm90[qi][vi][hi]; name != "" && dev.Clusters && !s.Mods {
		kernel = name // the same kernel built for compute_90
	}
	if s.Mods {
		kernel = tables.mods[kernel] // every decode kernel has a _mods twin
		k.Clusters = false
		if w := s.SlidingWindow; w > 0 {
			s.MaxKVLen = min(s.MaxKVLen, w+max(s.BlockSize, 16))
			s.HostKVLens = nil
			k.Balance = SplitOff
		}
	}
	shared := KernelSharedBytes(kernel, dev.MaxSharedPerBlockOptin)
	if shared > dev.MaxSharedPerBlockOptin {
		return DecodePlan{}, errf("dispatch: DecodeShape.HeadDim=%d with CacheDType=%v needs %d bytes of shared memory per block; %s allows %d",
			s.HeadDim, s.CacheDType, shared, dev.Name, dev.MaxSharedPerBlockOptin)
	}

	clusterKernel := tables.cluster[qi][vi][hi]
	if s.Mods || clusterKernel == "" {
		// No cluster twin (the _mods kernels, the head dims between the
		// powers of two): the kernel is its own occupancy twin.
		clusterKernel = kernel
		k.Clusters = false
	}
	kernel, clusterKernel = DecodeLayoutKernel(kernel, s.Layout), DecodeLayoutKernel(clusterKernel, s.Layout)
	ragged, long := s.hostStats()
	if len(s.HostKVLens) == 0 {
		// A graph replays lengths its capture never sees, and an eager
		// call without host lengths gives only their maximum: the
		// capacity or MaxKVLen stands in for their mean (see planBalanced).
		long = s.MaxKVLen > ShallowRingMaxTokens
	}
	if reason, ok := chooseBalanced(&s, &k, ragged); ok {
		// A balanced plan over the scratch limit falls back to the usual one.
		if p := planBalanced(&s, &dev, kernel, clusterKernel, shared, reason, long); k.ScratchLimitBytes <= 0 || p.ScratchFloats*4 <= k.ScratchLimitBytes {
			return p, nil
		}
	}
	splits, requested, reason := chooseSplits(&s, &dev, &k, kernel, clusterKernel)
	// Clusters: a forced split count (or one the scratch limit cut) of 2..8
	// runs as clusters, which need no scratch; an automatic one only where
	// chooseClusterSplits finds them worth it.
	cluster := false
	if dev.Clusters && k.Clusters && clustersFit(&dev, clusterKernel) && splits <= MaxClusterSplits {
		switch reason {
		case ReasonGridFills, ReasonFillSMs, ReasonSplitOn:
			if n, why := chooseClusterSplits(&s, &dev, clusterKernel, kernel); n > 1 {
				splits, requested, reason, cluster = n, n, why, true
			}
		default:
			cluster = splits > 1
		}
	}

	if shallowRing(&s, &dev, splits, kernel, clusterKernel) {
		shared = DecodeOneWaveSharedBytes(kernel, dev.MaxSharedPerBlockOptin)
	}

	p := DecodePlan{
		Launch: Launch{
			Kernel:      kernel,
			Grid:        Dim3{uint32(s.NumKVHeads), uint32(s.NumSeqs), uint32(splits)},
			Block:       Dim3{DecodeThreads, 1, 1},
			SharedBytes: uint32(shared),
		},
		SplitK: SplitK{Splits: splits, RequestedSplits: requested, Clamped: splits != requested, Reason: reason},
	}
	if cluster {
		p.Kernel = clusterKernel
		p.Cluster = uint32(splits)
	} else if splits > 1 {
		rows := int64(s.NumSeqs) * int64(s.NumQHeads) * int64(splits)
		p.Counters = int64(s.NumSeqs) * int64(s.NumKVHeads)
		p.ScratchFloats = rows * int64(s.HeadDim+2)
		p.MaxOffset = rows * int64(s.HeadDim)
		p.SumOffset = p.MaxOffset + rows
	}
	return p, nil
}

// chooseBalanced reports whether s gets a balanced plan, and why; ragged is
// s.hostStats()'s. Forcing single-pass or a split count wins over it
// (PlanDecode also falls back when the plan's scratch would exceed the limit).
func chooseBalanced(s *DecodeShape, k *Knobs, ragged bool) (string, bool) {
	// The partition kernel sums the batch's pages in an int32.
	if !k.PagedFlash || k.SplitK == SplitOff || k.ForcedSplits > 0 || k.Balance == SplitOff ||
		s.NumSeqs > BalanceMaxSeqs || s.MaxKVLen == 0 || int64(s.NumSeqs)*int64(s.MaxBlocksPerSeq) > math.MaxInt32 {
		return "", false
	}
	switch {
	case k.Balance == SplitOn:
		return ReasonBalanceOn, true
	case s.Graph && s.NumSeqs >= BalanceGraphMinSeqs:
		return ReasonBalancedGraph, true
	case len(s.HostKVLens) == 0 && s.NumSeqs >= BalanceGraphMinSeqs:
		return ReasonBalancedNoLens, true
	case ragged:
		return ReasonBalancedRagged, true
	}
	return "", false
}

// hostStats returns whether s's host lengths make it a ragged batch (NumSeqs
// × the longest above BalanceRaggedRatio × their sum) and whether their mean
// is above ShallowRingMaxTokens (a balanced plan then takes the deep ring:
// see planBalanced); false, false without them.
func (s *DecodeShape) hostStats() (ragged, long bool) {
	if len(s.HostKVLens) != s.NumSeqs || s.NumSeqs < 2 {
		return false, false
	}
	var sum, most int64
	for _, n := range s.HostKVLens {
		sum += int64(n)
		most = max(most, int64(n))
	}
	return float64(most)*float64(s.NumSeqs) > BalanceRaggedRatio*float64(sum), sum > int64(ShallowRingMaxTokens)*int64(s.NumSeqs)
}

// DecodeKey is all of a DecodeShape that PlanDecode reads: of the host
// lengths only how many there are and whether they make the batch ragged.
// Two shapes PlanDecode accepts with equal keys get equal plans from equal
// device facts and knobs, so a caller that plans every step may reuse a
// plan by its key (the tunables above are part of the planner: set them
// before planning starts, as they say).
// The key is comparable and costs one pass over the host lengths.
type DecodeKey struct {
	NumSeqs, NumQHeads, NumKVHeads, HeadDim int
	BlockSize, MaxKVLen, MaxBlocksPerSeq    int
	DType, CacheDType                       DType
	Layout                                  Layout
	HostKVLens                              int // len(HostKVLens)
	Ragged, Graph                           bool
	LongMean                                bool // the host lengths' mean is above ShallowRingMaxTokens
	Mods                                    bool
	SlidingWindow                           int
}

// Key returns s's DecodeKey.
func (s *DecodeShape) Key() DecodeKey {
	ragged, long := s.hostStats()
	return DecodeKey{
		NumSeqs: s.NumSeqs, NumQHeads: s.NumQHeads, NumKVHeads: s.NumKVHeads, HeadDim: s.HeadDim,
		BlockSize: s.BlockSize, MaxKVLen: s.MaxKVLen, MaxBlocksPerSeq: s.MaxBlocksPerSeq,
		DType: s.DType, CacheDType: s.CacheDType, Layout: s.Layout, HostKVLens: len(s.HostKVLens), Ragged: ragged, Graph: s.Graph,
		LongMean: long, Mods: s.Mods, SlidingWindow: s.SlidingWindow,
	}
}

// balancedWave returns how many items of a balanced plan run at once per KV
// head: the device's block slots (SMs × blocks per SM) over the KV heads.
func balancedWave(s *DecodeShape, dev *DeviceFacts, occ int) int {
	sms := 1
	if dev != nil {
		sms = dev.SMs
	}
	return max(sms*occ/s.NumKVHeads, 1)
}

// BalancedItems returns the work items of a balanced plan (see
// partition_work in kernels_src/decode.cuh): one wave for a batch of fewer
// sequences than a wave holds, so that the grid has no block beyond the
// wave (unused blocks past a wave cost a one-wave decode up to 18%: H200,
// 2026-12-01, seqs=32 kv=32768 1157 µs with 81 items against 987 with 33);
// else one wave of splits beside the sequences. Plans that vary the wave
// are built with it.
func BalancedItems(numSeqs, wave int) int {
	if numSeqs < wave {
		return wave
	}
	return min(numSeqs+wave, maxGridY)
}

// BalancedItemsValid reports whether a balanced plan of items work items and
// wave items per wave serves numSeqs sequences: the partition's promise
// (every split has an item) holds.
func BalancedItemsValid(numSeqs, items, wave int) bool {
	if wave < 1 || items < numSeqs || items > maxGridY {
		return false
	}
	if numSeqs < wave {
		return items >= wave
	}
	return items >= numSeqs+wave
}

// SetBalancedItems gives balanced plan p items work items for s: Grid.Y,
// the counters and the scratch layout (partials, one row per item and query
// head, then the work list, 16-byte aligned).
func (p *DecodePlan) SetBalancedItems(s *DecodeShape, items int) {
	rows := int64(items) * int64(s.NumQHeads)
	p.Grid.Y = uint32(items)
	p.Counters = int64(s.NumSeqs) * int64(s.NumKVHeads)
	p.PartialOutOffset = 0
	p.MaxOffset = rows * int64(s.HeadDim)
	p.SumOffset = p.MaxOffset + rows
	p.WorkOffset = (p.SumOffset + rows + 3) / 4 * 4
	p.ScratchFloats = p.WorkOffset + 4*int64(items)
}

// planBalanced returns the balanced plan of s (see DecodePlan.BalanceMinPages).
// long is s.hostStats()'s: the host lengths' mean is above
// ShallowRingMaxTokens.
func planBalanced(s *DecodeShape, dev *DeviceFacts, kernel, twin string, shared int, reason string, long bool) DecodePlan {
	occ := occupancy(dev, kernel, twin)
	// Splits are short (BalanceMinChunkTokens up to about a slot's share):
	// the one-wave ring, where it packs more blocks per SM, and a wave of
	// that many blocks. Host lengths whose mean is above
	// ShallowRingMaxTokens make long items (most sequences run whole), which
	// stream faster from the deep ring; they keep the shallow ring's wave,
	// so the items outnumber the resident blocks and the longest-first
	// order evens out the rounds (64 × rand(1..4000): 154.5 µs against 168.8
	// with the shallow ring, 1x32768+127x512 (mean 764): 116.9 against
	// 108.6; H200, 2026-12-02). A graph has no host lengths; one captured
	// for a capacity above ShallowRingMaxTokens takes the deep ring.
	if shallow := shallowOccupancy(dev, kernel, twin); shallow > occ {
		occ = shallow
		if !long {
			shared = DecodeOneWaveSharedBytes(kernel, dev.MaxSharedPerBlockOptin)
		}
	}
	wave := balancedWave(s, dev, occ)
	items := BalancedItems(s.NumSeqs, wave)
	minPages := ceilDiv(BalanceMinChunkTokens, s.BlockSize)
	splits := min(MaxSplits, max(ceilDiv(ceilDiv(s.MaxKVLen, s.BlockSize), minPages), 1), items-s.NumSeqs+1)
	p := DecodePlan{
		Launch: Launch{
			Kernel:      kernel,
			Grid:        Dim3{X: uint32(s.NumKVHeads), Z: 1},
			Block:       Dim3{DecodeThreads, 1, 1},
			SharedBytes: uint32(shared),
		},
		SplitK:          SplitK{Splits: splits, RequestedSplits: splits, Reason: reason},
		BalanceMinPages: minPages,
		BalanceWave:     wave,
	}
	p.SetBalancedItems(s, items)
	return p
}

// chooseSplits returns the split count, the count asked for before clamping,
// and the reason. The shape is valid.
func chooseSplits(s *DecodeShape, dev *DeviceFacts, k *Knobs, kernel, twin string) (splits, requested int, reason string) {
	pages := ceilDiv(s.MaxKVLen, s.BlockSize)
	switch {
	case !k.PagedFlash:
		return 1, 1, ReasonPagedFlashOff
	case k.SplitK == SplitOff:
		return 1, 1, ReasonSplitKOff
	case k.ForcedSplits > 0:
		requested = k.ForcedSplits
		splits = min(requested, MaxSplits, max(pages, 1))
		reason = ReasonForced
		if splits < requested {
			reason = ReasonForcedClamped
		}
		if n := wholePages(splits, pages); n != splits {
			splits = n
			if reason == ReasonForced {
				reason = ReasonForcedRounded
			}
		}
		if n := fitScratch(splits, pages, s, k); n != splits {
			return n, requested, ReasonForcedScratchLimit
		}
		return splits, requested, reason
	case s.MaxKVLen == 0:
		return 1, 1, ReasonEmptyKV
	}

	maxSplits := min(MaxSplits, pages, int(math.Round(math.Sqrt(float64(s.MaxKVLen)/SplitCostTokens))))
	if maxSplits < 2 {
		if k.SplitK == SplitOn {
			return 1, 1, ReasonSplitOnShortKV
		}
		return 1, 1, ReasonShortKV
	}
	occ := occupancy(dev, kernel, twin)
	if s.CacheDType == E4M3 {
		// fp8 blocks are bound by their math, not the stream: a wave of
		// them is as many as the one-wave ring fits (more warps per SM).
		occ = max(occ, shallowOccupancy(dev, kernel, twin))
	}
	blocks := int64(s.NumSeqs) * int64(s.NumKVHeads)
	slots := int64(dev.SMs) * int64(occ)

	// Fill one wave: as many splits as keep every block resident at once, up
	// to the √ rule above. More splits would only add waves; the bench's
	// forced-split sweeps on the H200 back this rule.
	splits = int(min(max(slots/blocks, 1), int64(maxSplits)))
	switch {
	case k.SplitK == SplitOn:
		splits = max(splits, 2)
		reason = ReasonSplitOn
	case splits == 1:
		reason = ReasonGridFills
	default:
		reason = ReasonFillSMs
	}
	splits = wholePages(splits, pages)
	requested = splits
	if n := fitScratch(splits, pages, s, k); n != splits {
		return n, requested, ReasonScratchLimit
	}
	return splits, requested, reason
}

// shallowRing reports whether a decode launch of splits splits gets the
// one-wave ring: its grid fits in one wave at the deep ring's occupancy, or
// its blocks are short (ShallowRingMaxTokens) and the shallow ring packs
// more of them per SM.
func shallowRing(s *DecodeShape, dev *DeviceFacts, splits int, kernel, twin string) bool {
	occ := occupancy(dev, kernel, twin)
	shallow := shallowOccupancy(dev, kernel, twin)
	blocks := int64(s.NumSeqs) * int64(s.NumKVHeads) * int64(splits)
	if blocks <= int64(dev.SMs)*int64(max(occ, shallow)) {
		return true // one wave with the one-wave ring
	}
	return ceilDiv(s.MaxKVLen, splits) <= ShallowRingMaxTokens && shallow > occ
}

// shallowOccupancy returns the resident blocks per SM of a decode kernel
// launched with the one-wave ring: its own figure, else its twin's, else 0.
func shallowOccupancy(dev *DeviceFacts, kernel, twin string) int {
	if n := dev.ShallowOccupancy[kernel]; n > 0 {
		return n
	}
	return dev.ShallowOccupancy[twin]
}

// occupancy returns the resident blocks per SM of a decode kernel: its own
// figure, else its twin's (the plain and the cluster kernel are the same code
// but for the merge, with the same shared memory), else 1.
func occupancy(dev *DeviceFacts, kernel, twin string) int {
	if n := dev.Occupancy[kernel]; n > 0 {
		return n
	}
	if n := dev.Occupancy[twin]; n > 0 {
		return n
	}
	return 1
}

// clustersFit reports whether clusters of kernel can run at all: true until
// its module's figures are known, then whether two-block clusters fit (a
// device that reports none, or whose query failed, gets none).
func clustersFit(dev *DeviceFacts, kernel string) bool {
	active, ok := dev.ActiveClusters[kernel]
	return !ok || len(active) > 2 && active[2] > 0
}

// clusterWaveFits reports whether count clusters of n blocks of kernel
// run at once: true until its module's figures are known, then whether
// the device holds that many.
func clusterWaveFits(dev *DeviceFacts, kernel string, n, count int) bool {
	active, ok := dev.ActiveClusters[kernel]
	return !ok || len(active) > n && active[n] >= count
}

// chooseClusterSplits returns the split count of an automatic plan whose
// splits run as thread-block clusters, and the reason; 1 when clusters do
// not help. The rules, measured on the H200 (2026-11-29 to 2026-12-02): take
// the most splits, up to MaxClusterSplits and
// round(√(MaxKVLen/ClusterSplitCostTokens)), whose clusters all fit in one
// wave (an extra, partial wave costs ~40%), as long as a split is at most
// ClusterMaxSplitTokens long; else the plain kernel's plan.
func chooseClusterSplits(s *DecodeShape, dev *DeviceFacts, kernel, twin string) (int, string) {
	pages := ceilDiv(s.MaxKVLen, s.BlockSize)
	most := min(MaxClusterSplits, pages, int(math.Round(math.Sqrt(float64(s.MaxKVLen)/ClusterSplitCostTokens))))
	items := s.NumSeqs * s.NumKVHeads
	active := dev.ActiveClusters[kernel]
	fits := func(size int) bool {
		if size < len(active) {
			return items <= active[size]
		}
		// Not loaded yet: assume the blocks pack perfectly (the plan is
		// made again once the module's figures are known).
		return items*size <= dev.SMs*occupancy(dev, kernel, twin)
	}
	splits := most
	for splits > 1 && !fits(splits) {
		splits--
	}
	if splits < 2 {
		return 1, ""
	}
	splits = wholePages(splits, pages)
	if ceilDiv(s.MaxKVLen, splits) > ClusterMaxSplitTokens {
		return 1, ""
	}
	return splits, ReasonClusterWave
}

// wholePages normalizes a split count so that every split covers the same
// whole number of pages (the last one possibly fewer), as the kernels divide
// each sequence at run time.
func wholePages(splits, pages int) int {
	if splits <= 1 || pages <= 1 {
		return 1
	}
	chunk := ceilDiv(pages, splits)
	return ceilDiv(pages, chunk)
}

// fitScratch lowers splits until the plan's scratch fits k.ScratchLimitBytes.
func fitScratch(splits, pages int, s *DecodeShape, k *Knobs) int {
	if k.ScratchLimitBytes <= 0 || splits <= 1 {
		return splits
	}
	perSplit := int64(s.NumSeqs) * int64(s.NumQHeads) * int64(s.HeadDim+2) * 4
	if int64(splits)*perSplit <= k.ScratchLimitBytes {
		return splits
	}
	fit := k.ScratchLimitBytes / perSplit
	if fit < 2 {
		return 1
	}
	// wholePages only lowers a count, so the result still fits.
	return wholePages(int(fit), pages)
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0, without overflowing for any a.
func ceilDiv(a, b int) int {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// validateDecode checks everything PlanDecode relies on.
func validateDecode(s *DecodeShape, dev *DeviceFacts, k *Knobs) error {
	switch {
	case s.NumSeqs < 1 || s.NumSeqs > maxGridY:
		return errf("dispatch: DecodeShape.NumSeqs=%d is out of range; allowed: 1..%d", s.NumSeqs, maxGridY)
	case s.NumKVHeads < 1:
		return errf("dispatch: DecodeShape.NumKVHeads=%d is out of range; allowed: ≥ 1", s.NumKVHeads)
	case s.NumQHeads < 1:
		return errf("dispatch: DecodeShape.NumQHeads=%d is out of range; allowed: ≥ 1", s.NumQHeads)
	case s.NumQHeads%s.NumKVHeads != 0:
		return errf("dispatch: DecodeShape.NumQHeads=%d is not a multiple of NumKVHeads=%d", s.NumQHeads, s.NumKVHeads)
	case s.NumQHeads/s.NumKVHeads > MaxGroupSize:
		return errf("dispatch: DecodeShape.NumQHeads=%d / NumKVHeads=%d is a GQA group of %d; supported: 1..%d",
			s.NumQHeads, s.NumKVHeads, s.NumQHeads/s.NumKVHeads, MaxGroupSize)
	case int64(s.NumSeqs)*int64(s.NumQHeads) > math.MaxInt32:
		return errf("dispatch: DecodeShape.NumSeqs=%d × NumQHeads=%d exceeds %d", s.NumSeqs, s.NumQHeads, math.MaxInt32)
	}
	if _, ok := headDimIndex(s.HeadDim); !ok {
		return errHeadDim(s.HeadDim)
	}
	if !fp8Dim(s.HeadDim) && s.CacheDType == E4M3 {
		return errf("dispatch: DecodeShape.HeadDim=%d is not supported with CacheDType=e4m3; supported there: %s", s.HeadDim, FP8HeadDimsText)
	}
	if paddedDim(s.HeadDim) && s.Layout.Laid() {
		return errf("dispatch: DecodeShape.HeadDim=%d is not supported with Layout=%v; supported there: %v, %v", s.HeadDim, s.Layout, LayoutFlash, LayoutHND)
	}
	if s.BlockSize < 1 || s.BlockSize > 256 || s.BlockSize&(s.BlockSize-1) != 0 {
		return errf("dispatch: DecodeShape.BlockSize=%d is not supported; supported: a power of two from 1 to 256", s.BlockSize)
	}
	if !s.Layout.known() {
		return errf("dispatch: DecodeShape.Layout=%d is not supported; supported: %s", int(s.Layout), LayoutsText)
	}
	if s.MaxKVLen < 0 || s.MaxKVLen > math.MaxInt32 {
		return errf("dispatch: DecodeShape.MaxKVLen=%d is out of range; allowed: 0..%d (the kernels' lengths are int32)", s.MaxKVLen, math.MaxInt32)
	}
	if s.MaxBlocksPerSeq > MaxSeqTokens/s.BlockSize {
		return errf("dispatch: DecodeShape.MaxBlocksPerSeq=%d is out of range; allowed: 1..%d (MaxBlocksPerSeq·BlockSize at most 2^30 tokens)", s.MaxBlocksPerSeq, MaxSeqTokens/s.BlockSize)
	}
	if len(s.HostKVLens) > 0 && len(s.HostKVLens) != s.NumSeqs {
		return errf("dispatch: DecodeShape.HostKVLens has %d lengths; want NumSeqs=%d (or none)", len(s.HostKVLens), s.NumSeqs)
	}
	for i, n := range s.HostKVLens {
		if n < 0 || int(n) > s.MaxKVLen {
			return errf("dispatch: DecodeShape.HostKVLens[%d]=%d is out of range; allowed: 0..MaxKVLen=%d", i, n, s.MaxKVLen)
		}
	}
	if s.MaxBlocksPerSeq < 1 {
		return errf("dispatch: DecodeShape.MaxBlocksPerSeq=%d is out of range; allowed: ≥ 1", s.MaxBlocksPerSeq)
	}
	// Division avoids overflowing MaxBlocksPerSeq*BlockSize.
	if s.MaxBlocksPerSeq < ceilDiv(s.MaxKVLen, s.BlockSize) {
		return errf("dispatch: DecodeShape.MaxBlocksPerSeq=%d × BlockSize=%d holds fewer than MaxKVLen=%d tokens",
			s.MaxBlocksPerSeq, s.BlockSize, s.MaxKVLen)
	}
	if _, ok := activationIndex(s.DType); !ok {
		return errDType(s.DType)
	}
	if _, ok := cacheIndex(s.DType, s.CacheDType); !ok {
		return errCacheDType(s.CacheDType, s.DType)
	}
	if s.SlidingWindow < 0 || (s.SlidingWindow > 0 && !s.Mods) {
		return errf("dispatch: DecodeShape.SlidingWindow=%d is not allowed; allowed: 0, or > 0 with Mods", s.SlidingWindow)
	}
	if dev.SMs < 1 {
		return errf("dispatch: DeviceFacts.SMs=%d is out of range; allowed: ≥ 1", dev.SMs)
	}
	return validateKnobs(k)
}

// validateKnobs checks the knobs every planner reads.
func validateKnobs(k *Knobs) error {
	if k.ForcedSplits < 0 {
		return errf("dispatch: Knobs.ForcedSplits=%d is negative; allowed: 0 (auto) or 1..%d", k.ForcedSplits, MaxSplits)
	}
	if k.Balance > SplitOn {
		return errf("dispatch: Knobs.Balance=%v is not supported; supported: auto, off, on", k.Balance)
	}
	if k.SplitK > SplitOn {
		return errf("dispatch: Knobs.SplitK=%v is not supported; supported: auto, off, on", k.SplitK)
	}
	if k.ScratchLimitBytes < 0 {
		return errf("dispatch: Knobs.ScratchLimitBytes=%d is negative; allowed: 0 (no limit) or more", k.ScratchLimitBytes)
	}
	if k.VarlenKeys != 0 && k.VarlenKeys != 32 && k.VarlenKeys != 64 {
		return errf("dispatch: Knobs.VarlenKeys=%d is not supported; supported: 0 (the planner's), 32, 64", k.VarlenKeys)
	}
	return nil
}
