package dispatch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// headDims lists the head dimensions the attention kernels are
// instantiated for, the name tables' head-dim index: the powers of two,
// then the dims between them (moreDim), whose kernels (modules
// decode_*_dims and varlen_*_dims) read caches of the queries' type (and
// at 96 and 192 fp8 ones, in the _e4m3_dims modules), never run as
// clusters, and in Varlen the flash and HND layouts only. Head dim 120
// (paddedDim) runs in tiles of 128 (modules decode_*_dims,
// varlen_*_hd120), over the flash and HND layouts.
var headDims = [...]int{64, 128, 256, 80, 96, 112, 192, 120}

// HeadDimsText lists the attention head dims for error messages;
// FP8HeadDimsText those over fp8 e4m3 caches (fp8Dim).
const (
	HeadDimsText    = "64, 80, 96, 112, 120, 128, 192, 256"
	FP8HeadDimsText = "64, 96, 128, 192, 256"
)

// fp8Dim reports whether the attention kernels over fp8 e4m3 caches take
// head dim d: the powers of two, and 96 and 192, whose rows are whole
// passes of the fp8 loaders (80 and 112 are not; 120 is padded, 16-bit
// only).
func fp8Dim(d int) bool { return !moreDim(d) || d == 96 || d == 192 }

// moreDim reports whether head dim d is one of the dims between the powers
// of two (see headDims).
func moreDim(d int) bool { return d&(d-1) != 0 }

// PaddedHeadDim is the head dim whose attention kernels run in tiles of the
// next power of two (128), its rows zero-padded in shared memory (DM < D in
// decode.cuh and varlen.cuh): 120 is no multiple of the mma's k of 16.
// They read the flash and HND layouts of 16-bit caches only.
const PaddedHeadDim = 120

// paddedDim reports whether head dim d is PaddedHeadDim.
func paddedDim(d int) bool { return d == PaddedHeadDim }

// tileDim is the head dim of the tiles a kernel for head dim d computes on:
// d, or for a paddedDim the next power of two.
func tileDim(d int) int {
	if paddedDim(d) {
		return 128
	}
	return d
}

// activationTypes lists the q / input dtypes, in table order.
var activationTypes = [...]DType{F16, BF16}

// MaxGroupSize is the largest GQA group (NumQHeads / NumKVHeads) supported.
const MaxGroupSize = 16

// NarrowMaxGroup is the largest GQA group of the narrow decode kernels
// (entry suffix _g8, kNarrowGroup in kernels_src/decode.cuh): for groups up
// to 8 (any cache type), the group's heads are the 8 columns of the mma
// tile instead of 8 of its 16 rows, which halves the tensor-core work and
// the output registers.
const NarrowMaxGroup = 8

// The decode kernel variants, the middle index of the decode name tables.
const (
	variantWide       = iota // a cache of the queries' type, any GQA group
	variantE4M3              // an fp8 e4m3 cache, any group
	variantNarrow            // a cache of the queries' type, groups up to NarrowMaxGroup
	variantE4M3Narrow        // an fp8 e4m3 cache, groups up to NarrowMaxGroup
	decodeVariants
)

// nameTables holds every kernel entry name, built once so that planning never
// builds a string. Index order: activation dtype, fp8 cache (0 = the cache
// dtype equals the activation dtype, 1 = e4m3), head dim; for decode the
// middle index is the variant (variantWide, variantE4M3, variantNarrow).
type nameTables struct {
	decode [len(activationTypes)][decodeVariants][len(headDims)]string
	// cluster: the decode kernels whose splits form one thread-block cluster
	// and merge on chip (compute_90 modules decode_*_sm90).
	cluster [len(activationTypes)][decodeVariants][len(headDims)]string
	// sm90: the compute_90 builds of plain (non-cluster) decode kernels,
	// where one exists: the narrow fp8 kernels, whose e4m3 moves are one
	// instruction there (cvt.rn.f16x2.e4m3x2); "" elsewhere.
	sm90  [len(activationTypes)][decodeVariants][len(headDims)]string
	shape map[string][2]int // decode kernel → {head dim, cache element size}
	// laid: the fp8 decode kernels (every table above), which read the
	// flash layout only → their _laid twins, which read every layout and
	// run for the x-split and shuffle ones (modules decode_*_e4m3_laid*);
	// see DecodeLayoutKernel.
	laid map[string]string
	// mods: the decode kernels → their _mods twins, which take the score
	// modifiers (sliding window, soft-cap, sinks, ALiBi) and read every
	// layout (modules decode_*_mods, decode_*_e4m3_mods).
	mods   map[string]string
	append [len(activationTypes)][2]string
	// appendSM90: the compute_90 builds of the fp8 appends (cache_sm90),
	// whose e4m3 rounding is one instruction per two elements there;
	// appendSM90Flash: those for the flash layout, AppendFlashFP8Tokens
	// tokens per thread.
	appendSM90      [len(activationTypes)]string
	appendSM90Flash [len(activationTypes)]string
	// appendPages: the page path's claim and page kernels, [input][fp8].
	appendPages [len(activationTypes)][2][2]string
	gather      [3]string // by cache dtype: f16, bf16, e4m3
	rope        [len(activationTypes)][2]string
	// ropeValues: RopeCache's V launch (TokenPlan.Values), [input][fp8].
	ropeValues [len(activationTypes)][2]string
	mla        [len(activationTypes)][2]string // rope+quant, concat
	// qkv: by input, fp8 cache, and split (HeadDim%16 == 8: the
	// _split kernels).
	qkv [len(activationTypes)][2][2]string
	// qkvTile: the page-tile twin (x-split and shuffle layouts,
	// TokenPlan.TileTokens) of a qkv kernel, by its name; none for the fp8
	// _split kernels (fp8 caches in those layouts take head dims that are
	// multiples of 16).
	qkvTile map[string]string
	// qkvValues: QKVNormRope's V launch (TokenPlan.Values), [input][fp8].
	qkvValues [len(activationTypes)][2]string
	// varlen: by activation dtype, fp8 cache, head dim, and short tiles
	// (1: the _r64 kernels; the 128-row ones at index 0; both the same at
	// head dim 256, which has only 64-row blocks); varlenMerge: by
	// activation dtype and head dim.
	varlen [len(activationTypes)][2][len(headDims)][2]string
	// varlenLaid: the same in the x-split (index 0) and shuffle (1)
	// layouts, by activation dtype, fp8 cache, layout, head dim.
	varlenLaid  [len(activationTypes)][2][2][len(headDims)][2]string
	varlenMerge [len(activationTypes)][len(headDims)]string
	varlenShape map[string]varlenGeometry
	// varlenK64: the 64-key-tile twin (_k64) of a 128-row kernel at head
	// dim 128 over a 16-bit cache, by the 32-key kernel's name.
	varlenK64 map[string]string
	// varlenMods: the flash-layout varlen kernels → their _mods twins,
	// which take the score modifiers (modules varlen_*_mods,
	// varlen_*_e4m3_mods); a _k64 kernel's twin is its 32-key kernel's.
	varlenMods map[string]string
	// varlenCluster: the _cluster twin (varlen_*_sm90 modules, compute_90)
	// of a flash-layout varlen kernel over a cache of the queries' type
	// (not _k64), by its name.
	varlenCluster map[string]string
	// varlenWG: the wgmma kernel (_wg, varlen_*_sm90a modules, sm_90a) that
	// runs in place of a flash-layout varlen kernel over a cache of the
	// queries' type at head dims 64 and 128 (the 128-row, _r64 and _k64
	// ones), by its name.
	varlenWG map[string]string
}

// addVarlen records the geometry of the varlen kernels named base (and
// base_r64 below head dim 256), each name ending in suffix, and returns
// them as the varlen tables hold them: the 128-row kernel, the short-tile
// one (the same at head dim 256, which has only 64-row blocks). At head dim
// 128 over a 16-bit cache it also records the 128-row kernel's 64-key twin
// (base_k64). The geometry is VarlenConfig's in kernels_src/varlen.cuh.
func (t *nameTables) addVarlen(base, suffix string, headDim, cacheSize int) [2]string {
	tile := tileDim(headDim) // shared memory holds tiles of it
	if headDim > 128 {
		t.varlenShape[base+suffix] = varlenGeometry{headDim: tile, cacheSize: cacheSize, rows: 64, keys: 32}
		return [2]string{base + suffix, base + suffix}
	}
	t.varlenShape[base+suffix] = varlenGeometry{headDim: tile, cacheSize: cacheSize, rows: 128, keys: 32}
	t.varlenShape[base+"_r64"+suffix] = varlenGeometry{headDim: tile, cacheSize: cacheSize, rows: 64, keys: 64}
	if headDim == 128 && cacheSize == 2 {
		t.varlenK64[base+suffix] = base + "_k64" + suffix
		t.varlenShape[base+"_k64"+suffix] = varlenGeometry{headDim: headDim, cacheSize: cacheSize, rows: 128, keys: 64}
	}
	return [2]string{base + suffix, base + "_r64" + suffix}
}

// addMoreDim records the kernels of head dim d between the powers of two
// (see headDims) for activation row qi and cache column fp8: the wide and
// narrow decode kernels named name and name_g8 (every layout, one build)
// with their _mods twins, and the flash-layout varlen kernels vname (and
// vname_r64 below 128) with theirs; every other entry of hi stays "",
// which the name functions refuse. A paddedDim's kernels compute on tiles
// of tileDim(d). The merges are the 16-bit cache's (fp8 0).
func (t *nameTables) addMoreDim(qi, fp8, hi int, name, vname string, d, size int) {
	wide, narrow := variantWide, variantNarrow
	if fp8 == 1 {
		wide, narrow = variantE4M3, variantE4M3Narrow
	}
	t.decode[qi][wide][hi] = name
	t.decode[qi][narrow][hi] = name + "_g8"
	t.shape[name] = [2]int{d, size}
	t.shape[name+"_g8"] = [2]int{d, size}
	t.varlen[qi][fp8][hi] = t.addVarlen(vname, "", d, size)
	t.addMods(name, t.varlen[qi][fp8][hi], d, size)
	t.varlenMerge[qi][hi] = "paged_varlen_merge_" + activationTypes[qi].String() + "_hd" + strconv.Itoa(d)
}

// addMods records the _mods twins of the wide and narrow decode kernels
// name and name_g8 (head dim d, cache elements of size bytes) and of the
// flash-layout varlen kernels varlen (the names addVarlen returned).
func (t *nameTables) addMods(name string, varlen [2]string, d, size int) {
	for _, k := range [...]string{name, name + "_g8"} {
		t.mods[k] = k + "_mods"
		t.shape[k+"_mods"] = [2]int{d, size}
	}
	for _, k := range varlen {
		t.varlenMods[k] = k + "_mods"
		t.varlenShape[k+"_mods"] = t.varlenShape[k]
	}
}

// tables is built by a variable initializer rather than init, so that other
// package-level variables (tests' device profiles) can already use it.
var tables = buildNames()

func buildNames() *nameTables {
	t := &nameTables{shape: map[string][2]int{}, laid: map[string]string{}, mods: map[string]string{},
		varlenShape: map[string]varlenGeometry{}, varlenK64: map[string]string{}, varlenMods: map[string]string{},
		varlenCluster: map[string]string{}, varlenWG: map[string]string{}, qkvTile: map[string]string{}}
	for i, d := range [...]DType{F16, BF16, E4M3} {
		t.gather[i] = "cache_gather_" + d.String()
	}
	for qi, q := range activationTypes {
		t.mla[qi] = [2]string{"mla_rope_quant_" + q.String(), "mla_concat_q_" + q.String()}
	}
	for qi, q := range activationTypes {
		for fp8 := range 2 {
			cache := ""
			if fp8 == 1 {
				cache = "_" + E4M3.String()
			}
			t.append[qi][fp8] = "cache_append_" + q.String() + cache
			t.appendPages[qi][fp8] = [2]string{"cache_claim_" + q.String() + cache, "cache_append_pages_" + q.String() + cache}
			if fp8 == 1 {
				t.appendSM90[qi] = t.append[qi][fp8] + "_sm90"
				t.appendSM90Flash[qi] = t.append[qi][fp8] + "_t" + strconv.Itoa(AppendFlashFP8Tokens) + "_sm90"
			}
			t.rope[qi][fp8] = "rope_cache_" + q.String() + cache
			t.ropeValues[qi][fp8] = "rope_values_" + q.String() + cache
			t.qkv[qi][fp8] = [2]string{"qkv_norm_rope_" + q.String() + cache, "qkv_norm_rope_" + q.String() + cache + "_split"}
			t.qkvTile[t.qkv[qi][fp8][0]] = t.qkv[qi][fp8][0] + "_tile"
			if fp8 == 0 {
				t.qkvTile[t.qkv[qi][fp8][1]] = t.qkv[qi][fp8][1] + "_tile"
			}
			t.qkvValues[qi][fp8] = "qkv_values_" + q.String() + cache
			for hi, d := range headDims {
				name := "paged_decode_" + q.String() + cache + "_hd" + strconv.Itoa(d)
				vname := "paged_varlen_" + q.String() + cache + "_hd" + strconv.Itoa(d)
				if moreDim(d) {
					if fp8 == 0 {
						t.addMoreDim(qi, fp8, hi, name, vname, d, q.Size())
					} else if fp8Dim(d) {
						t.addMoreDim(qi, fp8, hi, name, vname, d, E4M3.Size())
					}
					continue
				}
				t.decode[qi][fp8][hi] = name
				t.varlenMerge[qi][hi] = "paged_varlen_merge_" + q.String() + "_hd" + strconv.Itoa(d)
				t.cluster[qi][fp8][hi] = name + "_cluster"
				size := q.Size()
				if fp8 == 1 {
					size = E4M3.Size()
				}
				t.shape[name] = [2]int{d, size}
				// VarlenConfig in kernels_src/varlen.cuh.
				t.varlen[qi][fp8][hi] = t.addVarlen(vname, "", d, size)
				t.addMods(name, t.varlen[qi][fp8][hi], d, size)
				if fp8 == 0 {
					for _, k := range t.varlen[qi][fp8][hi] {
						t.varlenCluster[k] = k + "_cluster"
						g := t.varlenShape[k]
						g.cluster = true
						t.varlenShape[k+"_cluster"] = g
					}
					if k64, ok := t.varlenK64[vname]; ok {
						t.varlenMods[k64] = vname + "_mods"
					}
					if d <= 128 {
						// VarlenConfig of kLayoutWG: one warpgroup's 64 rows, 64-key tiles.
						wg := vname + "_wg"
						t.varlenShape[wg] = varlenGeometry{headDim: d, cacheSize: size, rows: 64, keys: 64, wg: true}
						t.varlenMods[wg] = wg + "_mods"
						t.varlenShape[wg+"_mods"] = t.varlenShape[wg]
						for _, k := range append(t.varlen[qi][fp8][hi][:], t.varlenK64[vname]) {
							if k != "" {
								t.varlenWG[k] = wg
							}
						}
					}
				}
				for li, l := range [...]string{"_xsplit", "_shuffle"} {
					t.varlenLaid[qi][fp8][li][hi] = t.addVarlen(vname, l, d, size)
				}
				t.shape[name+"_cluster"] = [2]int{d, size}
				narrow := variantNarrow
				if fp8 == 1 {
					narrow = variantE4M3Narrow
				}
				t.decode[qi][narrow][hi] = name + "_g8"
				t.cluster[qi][narrow][hi] = name + "_g8_cluster"
				t.shape[name+"_g8"] = [2]int{d, size}
				t.shape[name+"_g8_cluster"] = [2]int{d, size}
				if fp8 == 1 {
					t.sm90[qi][narrow][hi] = name + "_g8_sm90"
					t.shape[name+"_g8_sm90"] = [2]int{d, size}
					for _, k := range [...]string{name, name + "_cluster", name + "_g8", name + "_g8_cluster", name + "_g8_sm90"} {
						t.laid[k] = k + "_laid"
						t.shape[k+"_laid"] = [2]int{d, size}
					}
				}
			}
		}
	}
	return t
}

// activationIndex returns d's row in the name tables.
func activationIndex(d DType) (int, bool) {
	switch d {
	case F16:
		return 0, true
	case BF16:
		return 1, true
	}
	return 0, false
}

// cacheIndex returns the fp8 column of the name tables for a cache of type c
// holding activations of type q.
func cacheIndex(q, c DType) (int, bool) {
	switch c {
	case q:
		return 0, true
	case E4M3:
		return 1, true
	}
	return 0, false
}

func headDimIndex(d int) (int, bool) {
	i := slices.Index(headDims[:], d)
	return i, i >= 0
}

// DecodeSharedBytes returns the dynamic shared memory a decode kernel for
// headDim and a cache of cacheSize-byte elements is launched with on a device
// whose blocks may opt in to optin bytes: q (16 rows of 16-bit), then as many
// cp.async ring stages (2 to 4; each the K and V rows of a 16-token tile for
// 4 warps) as fit in half of optin less 2 KiB, so that two blocks share an SM.
// The kernel (DecodeSmem in kernels_src/decode.cuh) derives its stage count
// from the size; it needs at least two stages, so the result may exceed optin
// (the planner then refuses the shape). An fp8 cache's ring holds at most
// DecodeDeepStagesFP8 stages.
func DecodeSharedBytes(headDim, cacheSize, optin int) int {
	q, stage := decodeSmem(headDim, cacheSize)
	most := DecodeMaxStages
	if cacheSize == 1 {
		most = DecodeDeepStagesFP8
	}
	stages := min(max((optin/2-2048-q)/stage, DecodeMinStages), most)
	return q + stages*stage
}

// DecodeOneWaveSharedBytes returns the dynamic shared memory of a launch of
// decode kernel with the one-wave ring: OneWaveRingBytes per warp, at least
// DecodeMinStages stages and at most KernelSharedBytes; 0 for a kernel that
// is not a decode kernel.
func DecodeOneWaveSharedBytes(kernel string, optin int) int {
	shape, ok := tables.shape[kernel]
	if !ok {
		return 0
	}
	q, stage := decodeSmem(shape[0], shape[1])
	perWarp := stage / decodeWarps
	ring := OneWaveRingBytes
	if shape[1] == 1 {
		ring = OneWaveRingBytesFP8
	}
	stages := max(ring/perWarp, DecodeMinStages)
	return min(q+stages*stage, KernelSharedBytes(kernel, optin))
}

// DecodeRingStages returns the ring stages a decode kernel derives from a
// launch's dynamic shared memory (as DecodeSmem does in the kernel), or 0 for
// a kernel that is not a decode kernel.
func DecodeRingStages(kernel string, shared int) int {
	shape, ok := tables.shape[kernel]
	if !ok {
		return 0
	}
	q, stage := decodeSmem(shape[0], shape[1])
	return min((shared-q)/stage, DecodeMaxStages)
}

// DecodeSharedLimit returns the most dynamic shared memory any launch of
// decode kernel may carry on a device whose blocks may opt in to optin bytes:
// its deepest ring (DecodeStagesShared) that fits optin, and never less than
// KernelSharedBytes, its default. The runtime opts each kernel in to this
// much, so that DecodeWithPlan can take any ring depth the device holds.
// Other kernels get KernelSharedBytes.
func DecodeSharedLimit(kernel string, optin int) int {
	limit := KernelSharedBytes(kernel, optin)
	for stages := DecodeMinStages; stages <= DecodeMaxStages; stages++ {
		if n, ok := DecodeStagesShared(kernel, stages); ok && n <= optin {
			limit = max(limit, n)
		}
	}
	return limit
}

// The decode kernels' ring depth limits (DecodeSmem in kernels_src/decode.cuh).
const (
	DecodeMinStages = 2
	DecodeMaxStages = 4
	// DecodeDeepStagesFP8 is the deepest default ring of an fp8 cache's
	// decode kernel: at head dim 128 three stages let 4 blocks share an SM
	// where four stages let 3, and with the main loop's integer work as
	// light as it is, the extra warps beat the deeper ring on long multi-wave
	// grids (e4m3 seqs=128, kv=8192: 510.5 µs against 530.0; kv=32768:
	// 1983.3 against 2091.5; H200, 2026-12-02). Head dim 64 follows
	// unmeasured; head dim 256 held 3 already. A launch may still ask for 4
	// (DecodeSharedLimit).
	DecodeDeepStagesFP8 = 3
)

// decodeSmem returns the shared bytes of a decode kernel's q tile and of one
// ring stage.
func decodeSmem(headDim, cacheSize int) (q, stage int) {
	const tileTokens, rows = 16, 16
	d := tileDim(headDim)
	return rows * d * 2, decodeWarps * 2 * tileTokens * d * cacheSize
}

// decodeWarps is the warps of a decode block (kDecodeWarps), each with its
// own share of every ring stage.
const decodeWarps = DecodeThreads / 32

// DecodeStagesShared returns the dynamic shared memory of decode kernel
// launched with a ring of stages stages, and whether kernel is a decode
// kernel and stages is within DecodeMinStages..DecodeMaxStages. Any such
// size is a valid launch: the kernel reads its depth from it.
func DecodeStagesShared(kernel string, stages int) (int, bool) {
	shape, ok := tables.shape[kernel]
	if !ok || stages < DecodeMinStages || stages > DecodeMaxStages {
		return 0, false
	}
	q, stage := decodeSmem(shape[0], shape[1])
	return q + stages*stage, true
}

// KernelSharedBytes returns the dynamic shared memory kernel is launched with
// on a device whose blocks may opt in to optin bytes: for a decode kernel the
// size of every launch, for qkv_norm_rope the most any launch uses (its plans
// size it per shape), and 0 for kernels that use only static shared memory.
func KernelSharedBytes(kernel string, optin int) int {
	if shape, ok := tables.shape[kernel]; ok {
		return DecodeSharedBytes(shape[0], shape[1], optin)
	}
	if n := VarlenSharedBytes(kernel); n > 0 {
		return n
	}
	for _, row := range tables.qkv {
		for _, names := range row {
			for _, name := range names {
				if kernel == name {
					return QKVSharedBytesMax(optin)
				}
				if tile, ok := tables.qkvTile[name]; ok && kernel == tile {
					return min(QKVSharedBytesMax(optin)+QKVTileBytesMax, optin)
				}
			}
		}
	}
	return 0
}

// DecodeKernelName returns the decode kernel entry point for q of type dtype,
// a cache of type cacheDType, head dimension headDim and GQA group size group
// (1..MaxGroupSize): the narrow kernel (_g8) for a group up to
// NarrowMaxGroup, else the wide one, which serves every group (ask for
// MaxGroupSize to get it for any group). The names here are the flash
// layout's; DecodeLayoutKernel gives the kernel for another layout.
func DecodeKernelName(dtype, cacheDType DType, headDim, group int) (string, error) {
	qi, vi, hi, err := decodeIndex(dtype, cacheDType, headDim, group)
	if err != nil {
		return "", err
	}
	return tables.decode[qi][vi][hi], nil
}

// SM90DecodeKernelName returns the compute_90 build of the kernel
// DecodeKernelName names, and whether there is one (the narrow fp8 kernels).
// The planner takes it on devices with clusters (compute capability 9.0 and
// newer).
func SM90DecodeKernelName(dtype, cacheDType DType, headDim, group int) (string, bool) {
	qi, vi, hi, err := decodeIndex(dtype, cacheDType, headDim, group)
	if err != nil {
		return "", false
	}
	name := tables.sm90[qi][vi][hi]
	return name, name != ""
}

// ClusterDecodeKernelName returns the cluster twin (compute_90) of the
// kernel DecodeKernelName names, without building a string.
func ClusterDecodeKernelName(dtype, cacheDType DType, headDim, group int) (string, error) {
	qi, vi, hi, err := decodeIndex(dtype, cacheDType, headDim, group)
	if err != nil {
		return "", err
	}
	if moreDim(headDim) {
		return "", newShapeError(fmt.Sprintf("dispatch: DecodeShape.HeadDim=%d has no cluster kernels; they exist for 64, 128, 256", headDim))
	}
	return tables.cluster[qi][vi][hi], nil
}

// decodeIndex returns the decode name tables' indices of a kernel (vi is
// the variant: narrow for a group up to NarrowMaxGroup),
// or an error naming what is not supported.
func decodeIndex(dtype, cacheDType DType, headDim, group int) (qi, vi, hi int, err error) {
	var ok bool
	if qi, ok = activationIndex(dtype); !ok {
		return 0, 0, 0, errDType(dtype)
	}
	if vi, ok = cacheIndex(dtype, cacheDType); !ok {
		return 0, 0, 0, errCacheDType(cacheDType, dtype)
	}
	if hi, ok = headDimIndex(headDim); !ok {
		return 0, 0, 0, errHeadDim(headDim)
	}
	if vi == variantE4M3 && !fp8Dim(headDim) {
		return 0, 0, 0, newShapeError(fmt.Sprintf("dispatch: DecodeShape.HeadDim=%d is not supported with CacheDType=e4m3; supported there: %s", headDim, FP8HeadDimsText))
	}
	if group < 1 || group > MaxGroupSize {
		return 0, 0, 0, newShapeError(fmt.Sprintf("dispatch: GQA group size %d is not supported; supported: 1..%d", group, MaxGroupSize))
	}
	if group <= NarrowMaxGroup {
		vi = [...]int{variantWide: variantNarrow, variantE4M3: variantE4M3Narrow}[vi]
	}
	return qi, vi, hi, nil
}

// AppendKernelName returns the cache append kernel for input of type dtype
// and a cache of type cacheDType (dtype, or E4M3), built for compute_80.
// PlanAppend takes the compute_90 build of an fp8 append where the device
// has one (see AppendShape.SM90).
func AppendKernelName(dtype, cacheDType DType) (string, error) {
	ii, ok := activationIndex(dtype)
	if !ok {
		return "", newShapeError(fmt.Sprintf("dispatch: AppendShape.DType=%v is not supported; supported: f16, bf16", dtype))
	}
	ci, ok := cacheIndex(dtype, cacheDType)
	if !ok {
		return "", newShapeError(fmt.Sprintf("dispatch: AppendShape.CacheDType=%v is not supported with DType=%v; supported: %v, e4m3", cacheDType, dtype, dtype))
	}
	return tables.append[ii][ci], nil
}

// DecodeLayoutKernel returns the decode kernel that runs kernel (a name
// from the functions above or a plan) over caches in layout: its _laid twin
// for an fp8 kernel and the x-split or shuffle layout, else kernel itself.
// The fp8 kernels come in two builds: the flash layout's reads that layout
// only (carrying the other layouts' loop cost it 1–2.6%), the _laid one
// every layout (kLayoutsAny in kernels_src/decode.cuh; a build with the
// x-split and shuffle loop only ran 1–3.8% slower, H200, 2026-12-02); the
// 16-bit kernels take every layout at run time.
func DecodeLayoutKernel(kernel string, layout Layout) string {
	if !layout.Laid() {
		return kernel
	}
	if twin, ok := tables.laid[kernel]; ok {
		return twin
	}
	return kernel
}

// DecodeModsKernel returns the _mods twin of decode kernel (a name from the
// functions above, never a cluster or compute_90 build): the same kernel
// with the score modifiers, reading every layout. ok is false for a
// kernel without one (a cluster, compute_90 or _laid build).
func DecodeModsKernel(kernel string) (twin string, ok bool) {
	twin, ok = tables.mods[kernel]
	return twin, ok
}

// DecodeKernelNames returns every decode kernel entry name, for the root
// package to query occupancy once at module load. The slice is a fresh copy.
func DecodeKernelNames() []string { return withLaid(flatten(&tables.decode)) }

// withLaid appends to names the _laid twins of those that have one.
func withLaid(names []string) []string {
	for _, n := range names {
		if twin, ok := tables.laid[n]; ok {
			names = append(names, twin)
		}
	}
	return names
}

// flatten lists a decode name table row by row.
func flatten(t *[len(activationTypes)][decodeVariants][len(headDims)]string) []string {
	names := make([]string, 0, len(activationTypes)*decodeVariants*len(headDims))
	for qi := range t {
		for ci := range t[qi] {
			for _, n := range t[qi][ci] {
				if n != "" {
					names = append(names, n)
				}
			}
		}
	}
	return names
}

// IsClusterKernel reports whether kernel is a cluster decode or varlen
// kernel, one launched as thread-block clusters of its splits.
func IsClusterKernel(kernel string) bool {
	return tables.varlenShape[kernel].cluster || slices.Contains(ClusterDecodeKernelNames(), kernel)
}

// ClusterDecodeKernelNames returns every cluster decode kernel entry name
// (decode_*_sm90 modules, compute_90).
func ClusterDecodeKernelNames() []string { return withLaid(flatten(&tables.cluster)) }

// AppendKernelNames returns every cache append kernel entry name, the
// compute_90 builds included.
func AppendKernelNames() []string {
	names := make([]string, 0, len(activationTypes)*4)
	for qi := range tables.append {
		names = append(names, tables.append[qi][:]...)
		names = append(names, tables.appendSM90[qi], tables.appendSM90Flash[qi])
		for ci := range tables.appendPages[qi] {
			names = append(names, tables.appendPages[qi][ci][:]...)
		}
	}
	return names
}

// KernelNames returns every kernel entry name the planner can put in a plan.
func KernelNames() []string {
	names := append(append(DecodeKernelNames(), AppendKernelNames()...), GatherKernelNames()...)
	names = append(names, ClusterDecodeKernelNames()...)
	names = append(names, RopeKernelNames()...)
	names = append(names, DecodePartitionKernel)
	for _, n := range flatten(&tables.decode) {
		if twin, ok := tables.mods[n]; ok {
			names = append(names, twin)
		}
	}
	for qi := range tables.sm90 {
		for vi := range tables.sm90[qi] {
			for _, name := range tables.sm90[qi][vi] {
				if name != "" {
					names = append(names, name, tables.laid[name])
				}
			}
		}
	}
	names = append(names, VarlenKernelNames()...)
	for qi := range tables.mla {
		names = append(names, tables.mla[qi][:]...)
		for _, split := range tables.qkv[qi] {
			names = append(names, split[:]...)
			for _, name := range split {
				if tile, ok := tables.qkvTile[name]; ok {
					names = append(names, tile)
				}
			}
		}
		names = append(names, tables.qkvValues[qi][:]...)
	}
	return names
}

// GatherKernelName returns the cache gather kernel for a cache of type
// cacheDType.
func GatherKernelName(cacheDType DType) (string, error) {
	if !cacheDType.Valid() {
		return "", errf("dispatch: cache dtype %s is not supported; supported: f16, bf16, e4m3", cacheDType)
	}
	return tables.gather[cacheDType-F16], nil
}

// GatherKernelNames returns every cache gather kernel entry name.
func GatherKernelNames() []string { return append([]string(nil), tables.gather[:]...) }

// RopeKernelName returns the fused RoPE + cache write kernel for input of type
// dtype and a cache of type cacheDType (dtype, or E4M3).
func RopeKernelName(dtype, cacheDType DType) (string, error) {
	if _, err := AppendKernelName(dtype, cacheDType); err != nil { // the same dtype rules
		return "", err
	}
	ii, _ := activationIndex(dtype)
	ci, _ := cacheIndex(dtype, cacheDType)
	return tables.rope[ii][ci], nil
}

// RopeKernelNames returns every fused RoPE + cache write kernel entry name.
func RopeKernelNames() []string {
	var names []string
	for qi := range tables.rope {
		names = append(names, tables.rope[qi][:]...)
		names = append(names, tables.ropeValues[qi][:]...)
	}
	return names
}

// MLAKernelNames returns the MLA rope+quant and concat kernels for input of
// type dtype (f16 or bf16).
func MLAKernelNames(dtype DType) (ropeQuant, concat string, err error) {
	ii, ok := activationIndex(dtype)
	if !ok {
		return "", "", errf("dispatch: MLA input dtype %v is not supported; supported: f16, bf16", dtype)
	}
	return tables.mla[ii][0], tables.mla[ii][1], nil
}

// PlanTokens plans a per-token kernel: one block of TokenThreads per token.
func PlanTokens(kernel string, tokens int) (TokenPlan, error) {
	if tokens < 0 || tokens > maxGridX {
		return TokenPlan{}, errf("dispatch: %d tokens is out of range; allowed: 0..%d", tokens, maxGridX)
	}
	return TokenPlan{Launch: Launch{Kernel: kernel, Grid: Dim3{uint32(tokens), 1, 1}, Block: Dim3{TokenThreads, 1, 1}}}, nil
}

// maxGridX is CUDA's limit on gridDim.x.
const maxGridX = 1<<31 - 1

// QKVKernelName returns the split-QKV + norm + RoPE + cache kernel for input
// of type dtype, a cache of type cacheDType (dtype, or E4M3) and heads of
// headDim elements (a multiple of 8): the _split kernel when headDim/2 is not
// a multiple of 8, whose second half-head pieces are only 8-byte aligned.
func QKVKernelName(dtype, cacheDType DType, headDim int) (string, error) {
	ii, ok := activationIndex(dtype)
	if !ok {
		return "", newShapeError(fmt.Sprintf("dispatch: QKVShape.DType=%v is not supported; supported: f16, bf16", dtype))
	}
	ci, ok := cacheIndex(dtype, cacheDType)
	if !ok {
		return "", newShapeError(fmt.Sprintf("dispatch: QKVShape.CacheDType=%v is not supported with DType=%v; supported: %v, e4m3", cacheDType, dtype, dtype))
	}
	split := 0
	if headDim%16 != 0 {
		split = 1
	}
	return tables.qkv[ii][ci][split], nil
}

// qkvValuesKernel returns QKVNormRope's V kernel for valid dtypes.
func qkvValuesKernel(dtype, cacheDType DType) string {
	ii, _ := activationIndex(dtype)
	ci, _ := cacheIndex(dtype, cacheDType)
	return tables.qkvValues[ii][ci]
}

// VarlenKernelName returns the varlen attention kernel for q of type dtype,
// a cache of type cacheDType (dtype or E4M3) in layout and head dimension
// headDim: with short set, the one for short query tiles (_r64 below head
// dim 256; see PlanVarlen).
func VarlenKernelName(dtype, cacheDType DType, layout Layout, headDim int, short bool) (string, error) {
	qi, ok := activationIndex(dtype)
	if !ok {
		return "", errf("dispatch: VarlenShape.DType=%v is not supported; supported: f16, bf16", dtype)
	}
	ci, ok := cacheIndex(dtype, cacheDType)
	if !ok {
		return "", errf("dispatch: VarlenShape.CacheDType=%v is not supported with DType=%v; supported: %v, e4m3", cacheDType, dtype, dtype)
	}
	hi, ok := headDimIndex(headDim)
	if !ok {
		return "", errf("dispatch: VarlenShape.HeadDim=%d is not supported; supported: %s", headDim, HeadDimsText)
	}
	if ci == 1 && !fp8Dim(headDim) {
		return "", errf("dispatch: VarlenShape.HeadDim=%d is not supported with CacheDType=e4m3; supported there: %s", headDim, FP8HeadDimsText)
	}
	if moreDim(headDim) && layout.Laid() {
		return "", errf("dispatch: VarlenShape.HeadDim=%d is not supported with Layout=%v; supported there: %v, %v", headDim, layout, LayoutFlash, LayoutHND)
	}
	pair := tables.varlen[qi][ci][hi]
	switch {
	case !layout.known():
		return "", errf("dispatch: VarlenShape.Layout=%d is not supported; supported: %s", int(layout), LayoutsText)
	case layout.Laid():
		pair = tables.varlenLaid[qi][ci][layout-LayoutXSplit][hi]
	}
	if short {
		return pair[1], nil
	}
	return pair[0], nil
}

// VarlenK64KernelName returns the 64-key-tile twin of kernel, the 128-row
// varlen kernel VarlenKernelName names at head dim 128 over a 16-bit cache
// (PlanVarlen picks between them), and whether kernel has one.
func VarlenK64KernelName(kernel string) (string, bool) {
	k64, ok := tables.varlenK64[kernel]
	return k64, ok
}

// VarlenClusterKernel returns the _cluster twin of varlen kernel (a
// flash-layout kernel over a cache of the queries' type, not _k64; needs
// compute capability 9.0): the same tiling, launched with its splits of a
// row tile as one thread-block cluster of up to MaxClusterSplits, which
// merges them on chip. ok is false for a kernel without one.
func VarlenClusterKernel(kernel string) (twin string, ok bool) {
	twin, ok = tables.varlenCluster[kernel]
	return twin, ok
}

// VarlenClusterPlain returns the kernel whose _cluster twin is twin, and
// whether twin is one.
func VarlenClusterPlain(twin string) (kernel string, ok bool) {
	kernel, ok = strings.CutSuffix(twin, "_cluster")
	if !ok || tables.varlenCluster[kernel] != twin {
		return "", false
	}
	return kernel, true
}

// VarlenModsKernel returns the _mods twin of varlen kernel (a flash-layout
// kernel): the same tiling with the score modifiers; the twin of a _k64
// kernel is its 32-key kernel's. ok is false for a kernel without one (the
// x-split and shuffle layouts, the _cluster builds).
func VarlenModsKernel(kernel string) (twin string, ok bool) {
	twin, ok = tables.varlenMods[kernel]
	return twin, ok
}

// VarlenMergeKernelName returns the kernel that merges the split-K partials
// of a varlen launch with output of type dtype and head dimension headDim.
func VarlenMergeKernelName(dtype DType, headDim int) (string, error) {
	if _, err := VarlenKernelName(dtype, dtype, LayoutFlash, headDim, false); err != nil {
		return "", err
	}
	qi, _ := activationIndex(dtype)
	hi, _ := headDimIndex(headDim)
	return tables.varlenMerge[qi][hi], nil
}

// VarlenKernelNames returns every varlen attention and merge kernel name.
func VarlenKernelNames() []string {
	var names []string
	add := func(pairs [len(headDims)][2]string) {
		for _, pair := range pairs {
			if pair[0] == "" {
				continue
			}
			names = append(names, pair[0])
			if pair[1] != pair[0] {
				names = append(names, pair[1])
			}
			if k64, ok := tables.varlenK64[pair[0]]; ok {
				names = append(names, k64)
			}
			if wg, ok := tables.varlenWG[pair[0]]; ok {
				names = append(names, wg, tables.varlenMods[wg])
			}
			for _, n := range slices.Compact([]string{pair[0], pair[1]}) {
				if twin, ok := tables.varlenMods[n]; ok {
					names = append(names, twin)
				}
				if twin, ok := tables.varlenCluster[n]; ok {
					names = append(names, twin)
				}
			}
		}
	}
	for qi := range tables.varlen {
		for ci := range tables.varlen[qi] {
			add(tables.varlen[qi][ci])
		}
		for ci := range tables.varlenLaid[qi] {
			for li := range tables.varlenLaid[qi][ci] {
				add(tables.varlenLaid[qi][ci][li])
			}
		}
		for _, n := range tables.varlenMerge[qi] {
			if n != "" {
				names = append(names, n)
			}
		}
	}
	return names
}
