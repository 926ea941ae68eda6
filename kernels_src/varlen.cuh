// varlen.cuh: paged varlen attention (prefill, chunked prefill, speculative
// verify, and mixed batches whose decodes are one-token sequences) on tensor
// cores (mma.sync m16n8k16), single-pass and split-K, and the merge of split-K
// partials.
//
// paged_varlen_<q>[_e4m3]_hd<D>[_r64|_k64] (see VarlenConfig for the suffixes;
// D is the rows' head dim: _hd120 computes on tiles of 128, see paged_varlen)
//   q            [total_q, num_q_heads, D] of <q>, token stride q_token_stride
//                elements (heads contiguous).
//   cu_seqlens_q int32 [num_seqs+1]: sequence s owns query tokens
//                cu_seqlens_q[s] − cu_base … cu_seqlens_q[s+1] − cu_base − 1
//                (cu_base 0, or the first bound of the varlen part of a mixed
//                batch, whose cu_seqlens_q is a view of the batch's; the
//                subtraction wraps; a fault names bound s + seq_base and its
//                value as stored, seq_base being that part's first
//                sequence in the batch). pos_offsets int32
//                [num_seqs]: the KV position of s's first query token, so
//                its KV length is pos_offsets[s] + q_len. Both are read on the
//                device: bounds are clamped into [0, total_q] and decreasing
//                bounds read as empty (kFaultCuSeqlensInvalid); a negative
//                offset reads as 0 and a KV length past max_blocks_per_seq ·
//                block_size is cut there (kFaultPosOffsetBeyondTable).
//                Both null: one sequence (num_seqs 1) of total_q tokens
//                whose first sits at KV position one_pos, so that a
//                single-sequence call needs no device-resident lengths.
//   k_cache,     flash layout [num_blocks, block_size, num_kv_heads, D] of <q>
//   v_cache      or fp8 e4m3 (real value = stored · k_scale / v_scale), holding
//                every KV position of every sequence, the new tokens included;
//                the _xsplit and _shuffle entries read those layouts
//                (cache.cuh).
//   layout       the flash-layout entries read the HND layout [num_blocks,
//                num_kv_heads, block_size, D] when it is kLayoutHND
//                (HeadRows, cache.cuh), else the flash layout; the others
//                ignore it.
//   block_tables int32 [num_seqs, max_blocks_per_seq], read on the device; a
//                block id outside [0, num_blocks) reads block 0 and is
//                recorded (kFaultBlockBeyondPool).
//   causal       query i of sequence s attends KV positions ≤ pos_offsets[s]+i
//                (bottom-right aligned); 0: every position of the sequence.
//   Single-pass (gridDim.z == 1): out of <q>, row (token t, head h) at
//                t·out_token_stride + h·out_head_stride elements
//                ([total_q, num_q_heads, D] token-major, or head-major
//                [num_q_heads, total_q, D] for the single-sequence dispatcher), and
//                when lse != null, lse [total_q, num_q_heads] f32 (natural log
//                of Σ exp(scale·q·k)).
//   Split-K (gridDim.z = splits ≤ kVarlenMaxSplits): a row tile whose KV
//                range holds `tiles` tiles takes n ≤ splits of them (split_wave
//                0: n = splits; else the count the planner's model gives for
//                its own range, length_splits), and split z < n covers tiles
//                [z·c, (z+1)·c) of the range, c = ⌈tiles/n⌉: it writes f32
//                partial_out [total_q, num_q_heads, splits, D] (normalized by
//                its own sum), partial_max (log2 units) and partial_sum
//                [total_q, num_q_heads, splits]. A split left without tiles
//                exits at once, and split 0 writes its rows' partial_max −inf
//                and partial_sum 0 (no partial_out), which
//                paged_varlen_merge_<q>_hd<D> skips as it merges the rest. So
//                a graph planned for a long capacity and replayed over short
//                lengths splits each row tile as an eager plan for those
//                lengths would, and its spare splits cost only their start.
// Grid: (num_seqs + ⌊total_q·G/R⌋, num_kv_heads, splits), G =
// num_q_heads/num_kv_heads, R = VarlenConfig<D, MT, KEYS>::kRows (128 for the
// entries without a suffix below D = 256 and the _k64 ones, else 64). Block: kVarlenThreads (4 warps). Dynamic shared
// memory: VarlenSmem<T, C, D, MT, KEYS>::kBytes (dispatch.VarlenSharedBytes).
//
// How a block works. The G query heads of one KV head are packed into the
// rows of the mma tiles: packed row p of sequence s is (token p / G, head
// kvh·G + p mod G), so every K/V tile a block loads serves all the heads of
// its group at once, and a one-token sequence (a decode in a mixed batch)
// fills G rows instead of one. Sequence s owns the blocks x from
// tile_start(s) = s + ⌊cu_seqlens_q[s]·G / R⌋ on (at least ⌈q_len·G/R⌉ of
// them; a spare one exits), and blocks are taken in reverse so that each
// sequence's last row tiles, the longest under a causal mask, start first
// (find_tile). A block's R rows are four warps of one or two mma row tiles
// of 16 (a warp whose rows all lie past its sequence's end only loads).
// K/V tiles of kKeys positions are gathered through the block table with
// cp.async into a two-stage ring (VarlenKV; 16-byte chunks XOR-swizzled per
// row, so ldmatrix is free of bank conflicts); per tile (varlen_step:
// next_tile, then attend_tile) each warp computes S = Q·Kᵀ (f32; qk_tile)
// for its row tiles, each K/V fragment it reads serving all of them, masks
// it where the tile reaches past the shortest row's limit (mask_scores),
// updates its online softmax (softmax_tile) and accumulates O += P·V with P
// rounded to <q> (pv_tile); store_rows writes the rows at the end. Tiles
// past the block's last row's limit are never loaded (kv_tiles). fp8 caches
// land in the ring as bytes and are widened to <q> in shared memory before
// the products (widen_tile), so the products are the 16-bit ones.
//
// paged_varlen_<q>_hd<D>[_r64]_cluster (compute_90; flash layout, cache of
//   <q>, no score modifiers): split-K whose splits of each row tile form
//   one thread-block cluster (dims 1 × 1 × splits, splits ≤
//   kVarlenMaxClusterSplits). Each split stages its rows in shared memory
//   and the cluster merges them there into out and lse within the launch:
//   no partials, no merge launch. Dynamic shared memory: the larger of
//   VarlenSmem's kBytes and kClusterBytes.
//
// paged_varlen_merge_<q>_hd<D>
//   Merges split-K partials: one warp per (token, q head) row of the first
//   cu_seqlens_q[num_seqs] − cu_base tokens (clamped to rows / num_q_heads;
//   all of them for a null cu_seqlens_q), writing out and, when lse != null,
//   lse. Grid: ⌈rows/4⌉, block 128.
//
// paged_varlen_<q>[_e4m3]_hd<D>[_r64]_mods take score modifiers after the
// plain parameters, over a flash-layout cache (no _k64 twin: its split
// loops keep the mask out of most tiles): window (> 0: the query at KV
// position p reads keys p − window + 1 … p only; a block's tiles start at
// the one that holds its first row's first key, and positions before that
// are neither read nor looked up in the block table), softcap (> 0: s =
// softcap·tanh(s/softcap) on the scaled score), sinks (f32 [num_q_heads] or
// null: exp(sink) joins each head's denominator; split 0 adds it), alibi
// (f32 [num_q_heads] or null: s += slope·(key − p)); see VarlenRowMods.
#pragma once
#include "cache.cuh"
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

namespace pkv {

constexpr int kVarlenThreads = 128;
constexpr int kVarlenWarps = kVarlenThreads / 32;
// kLayoutWG is the LAYOUT of the wgmma entries (_wg, _sm90a modules): they
// read the flash or HND layout as the flash-layout entries do (the runtime
// layout argument), stage Q, K and V in wgmma's 128-byte swizzled tiles
// (wg_tile_offset) and run both products as warpgroup wgmmas: the block's
// four warps are one warpgroup, MT = 1 (64 rows; warp w's are 16w …
// 16w+15, as wgmma's m64 tile has them).
constexpr int kLayoutWG = 4;
constexpr int kVarlenWGAlign = 1024;
// flash_entry reports whether the entries of LAYOUT read cache rows as the
// flash-layout entries do (the flash or HND layout, see flash_rows).
__host__ __device__ constexpr bool flash_entry(int LAYOUT) { return LAYOUT == kLayoutFlash || LAYOUT == kLayoutWG; }
constexpr int kVarlenMaxSplits = 64;
// The planner's split model (dispatch.VarlenModelSplits and its constants,
// which these mirror): what a split and the merge cost, in KV positions one
// block streams, and the fewest positions a block splits.
constexpr int kVarlenSplitCostKeys = 24;
constexpr int kVarlenMergeCostKeys = 100;
constexpr int kVarlenMinSplitSpan = 512;
// The most splits a row tile's cluster holds (the _cluster entries: the
// portable cluster size), and the row stride, in floats, of a cluster
// split's staged output (padded so that a warp's writes of its rows meet at
// most two to a bank).
constexpr int kVarlenMaxClusterSplits = 8;
__host__ __device__ constexpr int kVarlenClusterStride(int d) { return d + 4; }

// VarlenConfig is the tiling of a block for head dim D with MT mma row
// tiles (16 rows each) per warp and K/V tiles of KEYS positions: a block
// holds kRows packed rows. Two row tiles per warp let each K/V fragment a
// warp reads from shared memory serve twice the rows. The entries without
// a suffix are MT = 2 with 32-key tiles (MT = 1 at D = 256, whose output
// alone takes 128 registers per row tile); the _k64 entries (D = 128,
// 16-bit caches) are MT = 2 with 64-key tiles: the loop's softmax and
// rescale serve twice the keys, and they fit 255 registers without spills
// since the mask has a loop of its own, but a block takes 96 KiB of shared
// memory (the planner takes them where two fit an SM, see
// dispatch.PlanVarlen). The _r64 entries (D ≤ 128) are MT = 1 with 64-key
// tiles, for short query tiles: a row tile of a one-token sequence or a
// 16-token verify step is mostly empty, and there one 64-row block keeps
// all four warps computing.
template <int D, int MT, int KEYS>
struct VarlenConfig {
  static_assert(MT == 1 || (MT == 2 && D <= 128), "two row tiles per warp need D ≤ 128");
  static_assert(KEYS == 32 || KEYS == 64, "K/V tiles of 32 or 64 keys");
  static constexpr int kMTiles = MT;
  static constexpr int kKeys = KEYS;
  static constexpr int kRows = 16 * kVarlenWarps * kMTiles;
  // Two stages: a third runs 3.6% slower at 8×2048 (H200, 2026-12-02).
  static constexpr int kStages = 2;
};

// VarlenSmem describes a block's dynamic shared memory: the q tile
// (kRows × D of <q>), a ring of kStages stages each holding one K and
// one V tile as stored (kKeys rows), and for fp8 caches one K and one V tile
// widened to <q>.
template <typename T, typename C, int D, int MT, int KEYS>
struct VarlenSmem {
  static constexpr int kKeys = VarlenConfig<D, MT, KEYS>::kKeys;
  static constexpr int kRows = VarlenConfig<D, MT, KEYS>::kRows;
  static constexpr int kStages = VarlenConfig<D, MT, KEYS>::kStages;
  static constexpr int kChunks = D / 8;                           // 16-byte chunks of a 16-bit row
  static constexpr int kCacheChunks = D * (int)sizeof(C) / 16;    // of a stored cache row
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * (int)sizeof(C);  // one K or V tile as stored
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kWideTileBytes = kKeys * D * 2;
  static constexpr int kWideBytes = sizeof(C) == 1 ? 2 * kWideTileBytes : 0;
  static constexpr int kBytes = kQBytes + kStages * kStageBytes + kWideBytes;
  // A _cluster entry's staged output, maxima and sums, and its merge's
  // weights (stage_rows, cluster_merge_rows), in the same memory after the
  // loop; it launches with the larger of the two.
  static constexpr int kClusterBytes = kRows * (kVarlenClusterStride(D) + 2 + kVarlenMaxClusterSplits) * 4;
};

// How a tile's scores are masked (varlen_step's MASK): not at all, all of
// them, or when the tile reaches the block's first row's limit.
constexpr int kMaskNone = 0, kMaskAll = 1, kMaskFrom = 2;

// Pick<B, X, Y>::type is X when B holds, else Y.
template <bool B, typename X, typename Y>
struct Pick {
  using type = X;
};
template <typename X, typename Y>
struct Pick<false, X, Y> {
  using type = Y;
};

// VarlenTile is the work of one block: sequence seq's query tokens q_begin …
// q_begin+q_len-1 and their KV (kv_len positions from pos_offset − …), packed
// rows row0 … row0+ROWS-1 of the sequence's q_len·G.
struct VarlenTile {
  int seq, q_begin, q_len, pos_offset, kv_len, row0;
};

// cu_bound returns bound s of cu_seqlens_q less cu_base (see the top); for
// a null cu_seqlens_q, 0 for s = 0 and total_q after it.
__device__ __forceinline__ int cu_bound(const int* cu_seqlens_q, int s, int cu_base, int total_q) {
  if (cu_seqlens_q == nullptr) return s == 0 ? 0 : total_q;
  return (int)((unsigned)__ldg(cu_seqlens_q + s) - (unsigned)cu_base);
}

// pos_offset returns sequence s's stored KV position offset: one_pos for a
// null pos_offsets (see the top).
__device__ __forceinline__ int pos_offset(const int* pos_offsets, int s, int one_pos) {
  return pos_offsets == nullptr ? one_pos : __ldg(pos_offsets + s);
}

// tile_start returns the first block of sequence s for blocks of ROWS
// packed rows (see the top).
template <int ROWS>
__device__ __forceinline__ int tile_start(const int* cu_seqlens_q, int cu_base, int s, int total_q, int G) {
  const int c = min(max(cu_bound(cu_seqlens_q, s, cu_base, total_q), 0), total_q);
  return s + (int)((int64_t)c * G / ROWS);
}

// check_sequence records the first bad device-resident value of sequence s
// (see the top). Block s checks sequence s: a sequence whose bounds
// decrease may own no block at all, so no block's own tile would see it.
__device__ __forceinline__ void check_sequence(const int* cu_seqlens_q, int cu_base, const int* pos_offsets,
                                               int one_pos, int s, int seq_base, int total_q, int cap,
                                               unsigned long long* fault) {
  const int b = cu_bound(cu_seqlens_q, s, cu_base, total_q), e = cu_bound(cu_seqlens_q, s + 1, cu_base, total_q);
  if (b < 0 || e < b || e > total_q) {
    record_fault(fault, kFaultCuSeqlensInvalid, s + seq_base, __ldg(cu_seqlens_q + s), __ldg(cu_seqlens_q + s + 1));
    return;
  }
  const int pos = pos_offset(pos_offsets, s, one_pos);
  if (pos < 0 || (int64_t)pos + (e - b) > cap) record_fault(fault, kFaultPosOffsetBeyondTable, s + seq_base, pos, cap);
}

// find_tile returns block x's work; q_len 0 when it has none. Bad
// device-resident values are clamped as the top describes.
template <int ROWS>
__device__ __forceinline__ VarlenTile find_tile(const int* cu_seqlens_q, int cu_base, const int* pos_offsets,
                                               int one_pos, int num_seqs, int total_q, int G, int cap, int x) {
  int lo = 0, hi = num_seqs - 1;  // the last s with tile_start(s) ≤ x
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_start<ROWS>(cu_seqlens_q, cu_base, mid, total_q, G) <= x) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  VarlenTile t;
  t.seq = lo;
  const int b = cu_bound(cu_seqlens_q, lo, cu_base, total_q), e = cu_bound(cu_seqlens_q, lo + 1, cu_base, total_q);
  t.q_begin = min(max(b, 0), total_q);
  const int end = min(max(e, t.q_begin), total_q);
  t.q_len = end - t.q_begin;
  t.row0 = (x - tile_start<ROWS>(cu_seqlens_q, cu_base, lo, total_q, G)) * ROWS;
  if ((int64_t)t.row0 >= (int64_t)t.q_len * G) {
    t.q_len = 0;
    return t;
  }
  const int pos = pos_offset(pos_offsets, lo, one_pos);
  t.pos_offset = max(pos, 0);
  const int64_t kv = (int64_t)t.pos_offset + t.q_len;
  t.kv_len = (int)min(kv, (int64_t)cap);
  return t;
}

// row_limit returns how many KV positions packed row p of t attends (rows
// past the sequence's end take its last token's limit: they are computed
// and never stored).
__device__ __forceinline__ int row_limit(const VarlenTile& t, int p, int G, bool causal) {
  if (!causal) return t.kv_len;
  const int tok = min(p / G, t.q_len - 1);
  return min(t.kv_len, t.pos_offset + tok + 1);
}

// load_q_tile starts the copy of t's q rows into q_s (swizzled, zero rows
// past the sequence's end). DM < D (padded tiles): q's rows hold DM
// elements, and the tile's chunks past them are zeros.
template <typename T, int D, int ROWS, int DM = D, int LAYOUT = kLayoutFlash>
__device__ __forceinline__ void load_q_tile(uint32_t q_s, const T* q, int64_t q_token_stride, const VarlenTile& t,
                                            int kvh, int G) {
  constexpr int CH = D / 8;
  const int rows = t.q_len * G;
#pragma unroll
  for (int j = 0; j < ROWS * CH / kVarlenThreads; ++j) {
    const int i = (int)threadIdx.x + j * kVarlenThreads;
    const int r = i / CH, c = i % CH;
    const int p = t.row0 + r;
    const bool ok = p < rows;
    const int tok = ok ? p / G : 0;
    const T* src = q + (int64_t)(t.q_begin + tok) * q_token_stride + (int64_t)(kvh * G + (p - tok * G)) * DM + c * 8;
    if constexpr (DM < D) {
      const bool in = ok && c < DM / 8;
      cp_async16(q_s + swizzle<CH>(r, c) * 16, in ? src : q, in ? 16 : 0);
    } else {
      const uint32_t at = LAYOUT == kLayoutWG ? wg_tile_offset<ROWS>(r, c) : swizzle<CH>(r, c) * 16;
      cp_async16(q_s + at, ok ? src : q, ok ? 16 : 0);
    }
  }
}

// in_range reports whether a loader reads KV position pos: below kv_end,
// and with LO (the _mods entries, whose sliding window starts a block's
// KV at kv_begin) not below kv_begin. Positions it does not read land as
// zeros, and their block-table entries are never looked up (an engine may
// have freed the pages before a window).
template <bool LO>
__device__ __forceinline__ bool in_range(int pos, int kv_begin, int kv_end) {
  if constexpr (LO) {
    return pos >= kv_begin && pos < kv_end;
  } else {
    return pos < kv_end;
  }
}

// KVRow is one thread's share of loading a K/V tile for the two-row-tile
// kernels: kTPR consecutive threads load one row (a KV position), kCPT
// interleaved 16-byte chunks each. Rows of 256 bytes or more take 8
// threads, so a warp's instruction reads whole 128-byte lines (4 rows),
// each landing in one 128-byte piece of shared memory: cp.async writes
// shared memory a wavefront per global line it reads (see KVLines); a
// thread then loads kRPT > 1 rows, r + kRPP·j for j < kRPT, and looks each
// up in the block table itself. Shorter rows (fp8, or head dim 64) take 4
// threads and one row a thread. On the H200 (2026-12-02), 8 threads a row
// instead of 4 make the 16-bit prefill rows 0–4.6% faster and the fp8 one
// (128-byte rows) 6.4% slower; KVLines' lookups by shuffle would cost these
// kernels 10%. DM < D (padded tiles, 16-bit caches): a stored row holds DM
// elements, and the tile's chunks past them are zero-filled (nothing read).
template <typename T, typename C, int D, int MT, int KEYS, int DM = D>
struct KVRow {
  using Smem = VarlenSmem<T, C, D, MT, KEYS>;
  static constexpr int kTPR = D * (int)sizeof(C) >= 256 ? 8 : 4;  // threads per row
  static constexpr int kRPP = kVarlenThreads / kTPR;                              // rows per pass
  static constexpr int kRPT = Smem::kKeys / kRPP;                                 // rows per thread
  static constexpr int kCPT = Smem::kCacheChunks / kTPR;                          // chunks per thread and row
  static_assert(kRPT >= 1 && kCPT >= 1 && kRPT * kRPP == Smem::kKeys, "whole rows per thread");
  struct Ids {
    int v[kRPT];
  };
  int r, h;  // the first row in the tile; the first chunk
  BadBlock bad;
  __device__ __forceinline__ KVRow() : r((int)threadIdx.x / kTPR), h((int)threadIdx.x % kTPR) {}

  // lookup returns the block-table entries of this thread's rows of the
  // tile at kv0 (0 past kv_end, and with LO below kv_begin, where nothing
  // is read).
  template <bool LO>
  __device__ __forceinline__ Ids lookup(const int* table, int kv0, int kv_begin, int kv_end,
                                        int block_size_log2) const {
    Ids ids;
#pragma unroll
    for (int j = 0; j < kRPT; ++j) {
      const int pos = kv0 + r + kRPP * j;
      ids.v[j] = in_range<LO>(pos, kv_begin, kv_end) ? __ldg(table + (pos >> block_size_log2)) : 0;
    }
    return ids;
  }

  // issue starts the copy of K/V positions kv0 … kv0+kKeys-1 (zeros at and
  // past kv_end, and with LO below kv_begin) into the stage at dst (K tile,
  // then V tile); ids are lookup's entries for the rows; nb is BadBlock's
  // pool bound.
  template <bool LO>
  __device__ __forceinline__ void issue(uint32_t dst, const C* k_head, const C* v_head, Ids ids, int kv0,
                                        int kv_begin, int kv_end, int block_size_log2, uint32_t nb,
                                        const HeadRows& hr) {
    constexpr int CCH = Smem::kCacheChunks;
#pragma unroll
    for (int i = 0; i < kRPT; ++i) {
      const int rr = r + kRPP * i;
      const int pos = kv0 + rr;
      const int64_t off = bad.row(ids.v[i], pos, block_size_log2, nb, hr.id_mul, hr.id_add) * hr.row_stride;
      const unsigned char* k_src = reinterpret_cast<const unsigned char*>(k_head + off) + h * 16;
      const unsigned char* v_src = reinterpret_cast<const unsigned char*>(v_head + off) + h * 16;
      const int bytes = in_range<LO>(pos, kv_begin, kv_end) ? 16 : 0;
#pragma unroll
      for (int j = 0; j < kCPT; ++j) {
        const uint32_t at = swizzle<CCH>(rr, j * kTPR + h) * 16;
        if constexpr (DM < D) {
          const bool in = j * kTPR + h < DM * (int)sizeof(C) / 16;
          cp_async16(dst + at, k_src + (in ? j * kTPR * 16 : 0), in ? bytes : 0);
          cp_async16(dst + Smem::kTileBytes + at, v_src + (in ? j * kTPR * 16 : 0), in ? bytes : 0);
        } else {
          cp_async16(dst + at, k_src + j * kTPR * 16, bytes);
          cp_async16(dst + Smem::kTileBytes + at, v_src + j * kTPR * 16, bytes);
        }
      }
    }
  }
};

// lane_row_ids looks up, for the loaders whose lanes each look up tile
// rows (KVLines, KVChunks), the block-table entries of rows lane + 32i of
// the tile at kv0: 0 past kv_end, and with LO below kv_begin, where
// nothing is read.
template <bool LO, int N>
__device__ __forceinline__ void lane_row_ids(int (&v)[N], const int* table, int kv0, int lane, int kv_begin,
                                             int kv_end, int block_size_log2) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int pos = kv0 + lane + 32 * i;
    v[i] = in_range<LO>(pos, kv_begin, kv_end) ? __ldg(table + (pos >> block_size_log2)) : 0;
  }
}

// KVLines is KVRow's alternative for the one-row-tile kernels (MT = 1: the
// _r64 ones and head dim 256), which serve short queries over long KV and
// are bound by memory: CCH consecutive threads load one whole row (CCH
// 16-byte chunks) per instruction, so a warp's cp.async reads whole 128-byte
// lines, each landing in one 128-byte piece of shared memory. cp.async
// writes shared memory one wavefront per global line it reads (Nsight
// Compute on the H200: KVRow's two threads per row make 16 wavefronts per
// instruction where 4 carry the bytes, and the kernel runs at 60% of copy
// where the shuffle layout's loader, which lands whole lines, runs at 79%).
// A thread loads rows r0 + kRP·j, j < kPasses, chunk c of each; lane l
// looks up the block of tile row l (and l + 32 for 64-key tiles), which the
// loading lanes take by shuffle. DM < D: padded tiles, as in KVRow.
template <typename T, typename C, int D, int MT, int KEYS, int DM = D, bool WG = false>
struct KVLines {
  using Smem = VarlenSmem<T, C, D, MT, KEYS>;
  static constexpr int kCCH = Smem::kCacheChunks;
  static constexpr int kRP = kVarlenThreads / kCCH;  // rows per pass
  static constexpr int kPasses = Smem::kKeys / kRP;
  static constexpr int kIds = Smem::kKeys / 32;      // rows a lane looks up
  static_assert(kRP >= 1 && 32 % kRP == 0 && kPasses * kRP == Smem::kKeys && kIds * 32 == Smem::kKeys,
                "whole rows per pass, a tile row per lane");
  struct Ids {
    int v[kIds];
  };
  int r0, c, lane;
  BadBlock bad;
  __device__ __forceinline__ KVLines()
      : r0((int)threadIdx.x / kCCH), c((int)threadIdx.x % kCCH), lane((int)threadIdx.x & 31) {}

  // lookup returns the block-table entries of tile rows lane (+ 32) of the
  // tile at kv0 (0 past kv_end, and with LO below kv_begin, where nothing
  // is read).
  template <bool LO>
  __device__ __forceinline__ Ids lookup(const int* table, int kv0, int kv_begin, int kv_end,
                                        int block_size_log2) const {
    Ids ids;
    lane_row_ids<LO>(ids.v, table, kv0, lane, kv_begin, kv_end, block_size_log2);
    return ids;
  }

  template <bool LO>
  __device__ __forceinline__ void issue(uint32_t dst, const C* k_head, const C* v_head, Ids ids, int kv0,
                                        int kv_begin, int kv_end, int block_size_log2, uint32_t nb,
                                        const HeadRows& hr) {
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = r0 + kRP * j;  // r ≥ 32 exactly when kRP·j ≥ 32 (r0 < kRP, which divides 32)
      const int blk = __shfl_sync(0xffffffffu, ids.v[kRP * j >= 32 ? 1 % kIds : 0], r & 31);
      const int pos = kv0 + r;
      const int64_t off = bad.row(blk, pos, block_size_log2, nb, hr.id_mul, hr.id_add) * hr.row_stride;
      const int bytes = in_range<LO>(pos, kv_begin, kv_end) ? 16 : 0;
      const uint32_t at = WG ? wg_tile_offset<KEYS>(r, c) : swizzle<kCCH>(r, c) * 16;
      if constexpr (DM < D) {
        const bool in = c < DM * (int)sizeof(C) / 16;
        const int c16 = in ? c * 16 : 0;
        cp_async16(dst + at, reinterpret_cast<const unsigned char*>(k_head + off) + c16, in ? bytes : 0);
        cp_async16(dst + Smem::kTileBytes + at, reinterpret_cast<const unsigned char*>(v_head + off) + c16,
                   in ? bytes : 0);
      } else {
        cp_async16(dst + at, reinterpret_cast<const unsigned char*>(k_head + off) + c * 16, bytes);
        cp_async16(dst + Smem::kTileBytes + at, reinterpret_cast<const unsigned char*>(v_head + off) + c * 16, bytes);
      }
    }
  }
};

// KVChunks is the flash layout's loader for rows whose chunk count is not
// a power of two (head dims 80, 96, 112 and 192), which neither KVRow's
// threads per row nor KVLines' rows per pass divide: thread t copies
// chunks t + 128j of the tile (row i / kCCH, chunk i % kCCH of chunk i),
// so a warp reads whole rows, one after another. As in KVLines, lane l
// looks up the block of tile row l (and l + 32 for 64-key tiles), which
// the copying lanes take by shuffle.
template <typename T, typename C, int D, int MT, int KEYS>
struct KVChunks {
  using Smem = VarlenSmem<T, C, D, MT, KEYS>;
  static constexpr int kCCH = Smem::kCacheChunks;
  static constexpr int kAll = Smem::kKeys * kCCH;  // chunks of a K (or V) tile
  static constexpr int kPasses = (kAll + kVarlenThreads - 1) / kVarlenThreads;
  static constexpr int kIds = Smem::kKeys / 32;  // rows a lane looks up
  static_assert(kIds * 32 == Smem::kKeys && kIds <= 2, "a tile row per lane, 32 or 64 rows");
  struct Ids {
    int v[kIds];
  };
  int lane;
  BadBlock bad;
  __device__ __forceinline__ KVChunks() : lane((int)threadIdx.x & 31) {}

  // lookup returns the block-table entries of tile rows lane (+ 32) of the
  // tile at kv0 (0 past kv_end, and with LO below kv_begin, where nothing
  // is read).
  template <bool LO>
  __device__ __forceinline__ Ids lookup(const int* table, int kv0, int kv_begin, int kv_end,
                                        int block_size_log2) const {
    Ids ids;
    lane_row_ids<LO>(ids.v, table, kv0, lane, kv_begin, kv_end, block_size_log2);
    return ids;
  }

  template <bool LO>
  __device__ __forceinline__ void issue(uint32_t dst, const C* k_head, const C* v_head, Ids ids, int kv0,
                                        int kv_begin, int kv_end, int block_size_log2, uint32_t nb,
                                        const HeadRows& hr) {
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int i = (int)threadIdx.x + kVarlenThreads * j;
      const int r = i / kCCH, c = i - r * kCCH;
      // Every lane shuffles (the last pass may have fewer chunks than threads).
      int blk = __shfl_sync(0xffffffffu, ids.v[0], r & 31);
      if constexpr (kIds > 1) {
        const int b1 = __shfl_sync(0xffffffffu, ids.v[1], r & 31);
        if (r >= 32) blk = b1;
      }
      if (kAll % kVarlenThreads == 0 || i < kAll) {
        const int pos = kv0 + r;
        const int64_t off = bad.row(blk, pos, block_size_log2, nb, hr.id_mul, hr.id_add) * hr.row_stride;
        const int bytes = in_range<LO>(pos, kv_begin, kv_end) ? 16 : 0;
        const uint32_t at = swizzle<kCCH>(r, c) * 16;
        cp_async16(dst + at, reinterpret_cast<const unsigned char*>(k_head + off) + c * 16, bytes);
        cp_async16(dst + Smem::kTileBytes + at, reinterpret_cast<const unsigned char*>(v_head + off) + c * 16,
                   bytes);
      }
    }
  }
};

// LaidLoad is the copy of K/V tiles from the x-split and shuffle layouts
// that LaidKV (X = 8 elements a 16-byte piece: 16-bit caches) and
// LaidFP8KV (X = 16: e4m3) share. Thread t keeps tile row r = t % kKeys for
// K and token group r/X for V (one page, block_size ≥ X): one block-table
// lookup per tile. Its K pieces are u + j·kU (u = t/kKeys) and land at
// (piece·kKeys + r)·16; its V elements are d0 + j·X·kU, d0 = r%X + X·u,
// whose pieces (element d, token group g) land at v_place(d, g) past the K
// tile. A group that reaches past kv_end is read whole from its page.
template <int D, int KEYS, int LAYOUT, int X>
struct LaidLoad {
  static constexpr int kLogX = X == 8 ? 3 : 4;
  static_assert(X == 1 << kLogX && (X == 8 || X == 16), "8 or 16 elements a piece");
  static constexpr int kCH = D / X;                 // 16-byte pieces of a row of K
  static constexpr int kU = kVarlenThreads / KEYS;  // threads per tile row
  static constexpr int kJ = kCH / kU;               // pieces per thread (K and V alike)
  static constexpr int kTileBytes = KEYS * D * 16 / X;  // one stage tile, as stored
  // (A flash-layout kernel holds an unused one, of any head dim.)
  static_assert(flash_entry(LAYOUT) || (kU * KEYS == kVarlenThreads && kJ * kU == kCH && kJ >= 1),
                "a tile row per kU threads");
  int r, u;
  BadBlock bad;
  __device__ __forceinline__ LaidLoad() : r((int)threadIdx.x % KEYS), u((int)threadIdx.x / KEYS) {}

  // lookup returns the block-table entry of this thread's token group of
  // the tile at kv0 (0 past kv_end, where nothing is read).
  __device__ __forceinline__ int lookup(const int* table, int kv0, int kv_end, int block_size_log2) const {
    const int pos = kv0 + (r & ~(X - 1));
    return pos < kv_end ? __ldg(table + (pos >> block_size_log2)) : 0;
  }

  // v_place is the byte offset of V piece (element d, token group g) in
  // the stage's V tile: LaidKV's transposed tile for 16-bit caches (see
  // there), group-major g·D + d for fp8 ones.
  __device__ __forceinline__ static uint32_t v_place(int d, int g) {
    return (X == 8 && LAYOUT == kLayoutXSplit ? (g >> 1) * 2 * D + 2 * d + ((g & 1) ^ ((d >> 2) & 1)) : g * D + d) *
           16;
  }
  // kVStep is the byte distance between the V pieces of elements d and
  // d + X of one group (the x-split swap reads only bit 2 of d, which a
  // step of X keeps).
  static constexpr uint32_t kVStep = (X == 8 && LAYOUT == kLayoutXSplit ? 16 : X) * 16;

  // issue starts the copy of the tile at kv0 into the stage at dst (K
  // tile, then V tile); id is lookup's entry, nb BadBlock's pool bound.
  template <typename C>
  __device__ __forceinline__ void issue(uint32_t dst, const C* k_cache, const C* v_cache, int id, int kv0,
                                        int kv_end, int kvh, int num_kv_heads, int block_size_log2, uint32_t nb) {
    static_assert(sizeof(C) * X == 16, "X elements a 16-byte piece");
    // Addresses in elements of C, as bytes for fp8.
    using E = typename Pick<sizeof(C) == 1, unsigned char, C>::type;
    const int gpos = kv0 + (r & ~(X - 1));  // the thread's token group
    const bool gok = gpos < kv_end;
    const bool ok = kv0 + r < kv_end;
    const int blk = bad.block(id, gpos, nb);
    const int bs_mask = (1 << block_size_log2) - 1;
    const int64_t bh = (int64_t)blk * num_kv_heads + kvh;
    const E* kb = reinterpret_cast<const E*>(k_cache);
    const E* vb = reinterpret_cast<const E*>(v_cache);
    const E* kp = kb + ((((bh * kCH + u) << block_size_log2) | ((kv0 + r) & bs_mask)) * X);
    const int64_t kstep = (int64_t)(kU * X) << block_size_log2;
    const int d0 = (r & (X - 1)) + X * u;
    const int o = gpos & bs_mask;  // a multiple of X
    const E* vp;
    int64_t vstep;
    if constexpr (LAYOUT == kLayoutXSplit) {
      vp = vb + (((bh * D + d0) << block_size_log2) | o);
      vstep = (int64_t)(X * kU) << block_size_log2;
    } else {
      vp = vb + ((bh << (block_size_log2 - kLogX)) + (o >> kLogX)) * (D * X) + d0 * X;
      vstep = X * kU * X;
    }
    const uint32_t kat = dst + (u * KEYS + r) * 16;
    const uint32_t vat = dst + kTileBytes + v_place(d0, r >> kLogX);
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      cp_async16(kat + j * kU * KEYS * 16, ok ? kp + j * kstep : kb, ok ? 16 : 0);
      cp_async16(vat + j * kU * kVStep, gok ? vp + j * vstep : vb, gok ? 16 : 0);
    }
  }
};

// LaidKV is one thread's share of loading a K/V tile from the x-split or
// shuffle layout (LAYOUT; 16-bit caches, block_size ≥ 8). The tiles land as
// the caches hold them, so that each 32-byte cache sector lands whole in one
// 32-byte piece of shared memory (cp.async splits a sector whose halves land
// apart: see vt_chunk in decode.cuh) and, for blocks of 16, each
// 128-byte line in one 128-byte piece (cp.async writes shared memory a
// wavefront per line it reads, at best: see KVLines):
//   K piece-major: 16-byte piece c (elements 8c … 8c+7) of tile row r at
//     c·kKeys + r (ldmatrix reads 8 rows of one piece, 128 contiguous
//     bytes);
//   V transposed, 16-byte piece (element d, tokens 8g … 8g+7): x-split in
//     slabs of 16 tokens, g/2·2D + 2d + (g%2 ^ bit 2 of d) (element d's 16
//     tokens of a slab are one 32-byte sector of the cache, 4 elements of
//     a block of 16 one line; the swap keeps ldmatrix's 8 elements in 8
//     bank groups); shuffle g-major, g·D + d (8 elements, one line). P·V
//     reads them with plain (not transposing) ldmatrix.
// It loads as LaidLoad with X = 8; a token group that reaches past kv_end
// is read whole from its page and its tokens from kv_end on are zeroed
// once it has landed (zero_tail): P is 0 there, and 0·NaN is NaN.
template <int D, int KEYS, int LAYOUT>
struct LaidKV : LaidLoad<D, KEYS, LAYOUT, 8> {
  using LaidLoad<D, KEYS, LAYOUT, 8>::v_place;

  // zero_tail zeroes the V tile's tokens valid … the end of their group
  // (valid = kv_end − kv0, not a multiple of 8: the group read whole past
  // kv_end). Every thread calls it; a barrier must follow.
  __device__ __forceinline__ static void zero_tail(unsigned char* vtile, int valid) {
    const int g = valid >> 3;
    for (int d = (int)threadIdx.x; d < D; d += kVarlenThreads) {
      uint16_t* piece = reinterpret_cast<uint16_t*>(vtile + v_place(d, g));
      for (int c = valid & 7; c < 8; ++c) piece[c] = 0;
    }
  }
};

// LaidOffsets holds a lane's ldmatrix byte offsets into LaidKV's tiles,
// for the x4 loads whose lane reads tile row (K) or element d (V) lane%8 +
// 8·(lane/16) and piece or token group bit (lane/8)%2, as b_offsets: K at
// k_at(np, ks) (rows 16np…, pieces 2ks, 2ks+1), V at v_at(kk, dp)
// (elements 16dp…, groups 2kk, 2kk+1). The x-split swap reads only bit 2
// of d, so one offset per kk serves every dp.
template <int D, int KEYS, int LAYOUT>
struct LaidOffsets {
  uint32_t k, v[KEYS / 16];
  __device__ __forceinline__ LaidOffsets(int lane) {
    const int row = (lane & 7) + (lane >> 4) * 8, b = (lane >> 3) & 1;
    k = (b * KEYS + row) * 16;
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) v[kk] = LaidKV<D, KEYS, LAYOUT>::v_place(row, 2 * kk + b);
  }
  __device__ __forceinline__ uint32_t k_at(int np, int ks) const { return k + (uint32_t)(ks * 2 * KEYS * 16 + np * 256); }
  __device__ __forceinline__ uint32_t v_at(int kk, int dp) const {
    return v[kk] + (uint32_t)(dp * 2 * LaidKV<D, KEYS, LAYOUT>::kVStep);
  }
};

// widen8 converts 8 e4m3 bytes (lo: elements 0-3, hi: 4-7) to 8 elements
// of T, in order, as e4m3_pair gives them (see mma_scale).
template <typename T>
__device__ __forceinline__ uint4 widen8(uint32_t lo, uint32_t hi) {
  return make_uint4(e4m3_pair<T>(lo, 0x1404), e4m3_pair<T>(lo, 0x3424), e4m3_pair<T>(hi, 0x1404),
                    e4m3_pair<T>(hi, 0x3424));
}

// LaidFP8KV is LaidKV for fp8 e4m3 caches (x = 16 elements a 16-byte
// piece; block_size ≥ 16). The stage holds the tiles as loaded: K
// piece-major (piece c, elements 16c … 16c+15, of tile row r at c·kKeys +
// r), V as pieces of 16 tokens of one element in token-group-major order
// (group q, element d at q·D + d: for blocks of 16, 16 elements of a page
// are 256 contiguous bytes of the cache and land as such). widen then
// writes K as the flash layout's 16-bit tile (swizzled rows: the products
// read it as they read a flash tile) and V as LaidKV's transposed one,
// zeroing the tokens from valid on. It loads as LaidLoad with X = 16.
template <int D, int KEYS, int LAYOUT>
struct LaidFP8KV : LaidLoad<D, KEYS, LAYOUT, 16> {
  using Load = LaidLoad<D, KEYS, LAYOUT, 16>;
  using Load::kJ;
  using Load::kTileBytes;

  // widen converts the stage's tiles (see above) into the 16-bit K tile at
  // wide (the flash layout's, D/8 chunks a row, swizzled) and V tile at
  // wide + KEYS·D·2 (LaidKV's), exactly; tokens from valid on (< KEYS only
  // for the tile that holds kv_end) come out 0 in V. Every thread calls
  // it; a barrier must follow.
  template <typename T>
  __device__ __forceinline__ static void widen(unsigned char* wide, const unsigned char* stage, int valid) {
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int i = (int)threadIdx.x + j * kVarlenThreads;
      const int r = i % KEYS, c = i / KEYS;
      const uint4 x = *reinterpret_cast<const uint4*>(stage + (c * KEYS + r) * 16);
      *reinterpret_cast<uint4*>(wide + swizzle<D / 8>(r, 2 * c) * 16) = widen8<T>(x.x, x.y);
      *reinterpret_cast<uint4*>(wide + swizzle<D / 8>(r, 2 * c + 1) * 16) = widen8<T>(x.z, x.w);
    }
    unsigned char* vwide = wide + KEYS * D * 2;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int i = (int)threadIdx.x + j * kVarlenThreads;
      const int d = i % D, q = i / D;
      uint4 x = *reinterpret_cast<const uint4*>(stage + kTileBytes + (q * D + d) * 16);
      if (16 * q + 16 > valid) {  // the group that holds kv_end: zero its tokens from valid on
        uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          if (16 * q + e >= valid) w[e >> 2] &= ~(0xffu << (8 * (e & 3)));
        }
        x = make_uint4(w[0], w[1], w[2], w[3]);
      }
      *reinterpret_cast<uint4*>(vwide + LaidKV<D, KEYS, LAYOUT>::v_place(d, 2 * q)) = widen8<T>(x.x, x.y);
      *reinterpret_cast<uint4*>(vwide + LaidKV<D, KEYS, LAYOUT>::v_place(d, 2 * q + 1)) = widen8<T>(x.z, x.w);
    }
  }
};

// LaneOffsets holds a lane's ldmatrix byte offsets into a swizzled tile of
// CH 16-byte chunks per row, for the x4 loads whose lane reads row R + lr
// and chunk 2ks + b (R a multiple of 16): at(R, ks) is the offset of
// k-step ks. The swizzle moves chunks only within aligned groups of 8,
// so 4 offsets serve every ks (ks & 3; ks >> 2 adds 8 chunks) in the whole
// groups; the k-steps of a shorter last group (CH = 10, 12, 14) have
// offsets of their own (TailOffsets).
template <int N>
struct TailOffsets {
  uint32_t tail[N];
};
template <>
struct TailOffsets<0> {};
template <int CH>
constexpr int kTailSteps = CH > 8 && CH % 8 != 0 ? (CH % 8) / 2 : 0;
template <int CH>
struct LaneOffsets : TailOffsets<kTailSteps<CH>> {
  static constexpr int kTail = kTailSteps<CH>;
  static constexpr int kWholeSteps = (CH - 2 * kTail) / 2;  // k-steps in whole groups of 8 chunks
  uint32_t off[4];
  __device__ __forceinline__ LaneOffsets(int lr, int b) {
#pragma unroll
    for (int c = 0; c < 4; ++c) off[c] = swizzle<CH>(lr, 2 * c + b) * 16;
    if constexpr (kTail > 0) {
#pragma unroll
      for (int t = 0; t < kTail; ++t) this->tail[t] = swizzle<CH>(lr, 2 * (kWholeSteps + t) + b) * 16;
    }
  }
  __device__ __forceinline__ uint32_t at(int R, int ks) const {
    if constexpr (kTail > 0) {
      if (ks >= kWholeSteps) return this->tail[ks - kWholeSteps] + (uint32_t)(R * CH * 16);
    }
    return off[ks & 3] + (uint32_t)(R * CH * 16 + (ks >> 2) * 128);
  }
};

// a_offsets: the lanes of an A fragment (or of a transposed B fragment,
// which reads the same way): row lane%8 + 8·((lane/8)%2), chunk bit lane/16.
template <int CH>
__device__ __forceinline__ LaneOffsets<CH> a_offsets(int lane) {
  return LaneOffsets<CH>((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
}

// b_offsets: the lanes of two B fragments (n-tiles 2np, 2np+1) of K: row
// lane%8 + 8·(lane/16), chunk bit (lane/8)%2.
template <int CH>
__device__ __forceinline__ LaneOffsets<CH> b_offsets(int lane) {
  return LaneOffsets<CH>((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
}

// widen_tile converts a stage's fp8 K and V tiles into 16-bit tiles at wide
// (same swizzle as a 16-bit stage), exactly; values come out as e4m3_pair
// gives them (see mma_scale). A thread reads one 16-byte stage chunk (16
// elements) and writes the two wide chunks it makes; consecutive threads
// take consecutive rows of one chunk column, as ldmatrix reads them, so
// the swizzle keeps both free of bank conflicts (LaidFP8KV::widen does the
// same; 8 bytes a thread made the flash layout's fp8 varlen slower than
// the layouts', H200, 2026-12-02).
template <typename T, int D, int MT, int KEYS>
__device__ __forceinline__ void widen_tile(unsigned char* wide, const unsigned char* stage) {
  using Smem = VarlenSmem<T, e4m3, D, MT, KEYS>;
  constexpr int CH = Smem::kChunks, CCH = Smem::kCacheChunks;
  static_assert(2 * KEYS * CCH % kVarlenThreads == 0, "whole passes");
#pragma unroll
  for (int j = 0; j < 2 * KEYS * CCH / kVarlenThreads; ++j) {
    const int i = (int)threadIdx.x + j * kVarlenThreads;
    const int r = i % KEYS, c = (i / KEYS) % CCH, tile = i / (KEYS * CCH);  // tile 0: K, 1: V
    const uint4 x = *reinterpret_cast<const uint4*>(stage + tile * Smem::kTileBytes + swizzle<CCH>(r, c) * 16);
    unsigned char* w = wide + tile * Smem::kWideTileBytes;
    *reinterpret_cast<uint4*>(w + swizzle<CH>(r, 2 * c) * 16) = widen8<T>(x.x, x.y);
    *reinterpret_cast<uint4*>(w + swizzle<CH>(r, 2 * c + 1) * 16) = widen8<T>(x.z, x.w);
  }
}

// qk_tile computes this warp's scores s[m] = Q·Kᵀ for one K tile (MT row
// tiles of 16 × KEYS positions; s[m][n] is n-tile n in the mma C layout).
// Each K fragment read from shared memory serves all MT row tiles. q's A
// fragments come from qa (registers, MT == 1) or from q_s.
// K_PIECES: K in LaidKV's piece-major tile, at lo's offsets (else a flash
// tile, at bo's).
template <typename T, int D, int KEYS, int KN, int MT, bool Q_IN_REGS, bool K_PIECES, int LAYOUT>
__device__ __forceinline__ void qk_tile(float (*s)[KN / 8][4], const uint32_t (*qa)[4], uint32_t q_s,
                                        uint32_t k_s, const LaneOffsets<D / 8>& ao, const LaneOffsets<D / 8>& bo,
                                        const LaidOffsets<D, KEYS, LAYOUT>& lo, int warp) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int n = 0; n < KN / 8; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if constexpr (Q_IN_REGS) {
        a[m][0] = qa[ks][0], a[m][1] = qa[ks][1], a[m][2] = qa[ks][2], a[m][3] = qa[ks][3];
      } else {
        ldmatrix_x4(a[m], q_s + ao.at(16 * (MT * warp + m), ks));
      }
    }
#pragma unroll
    for (int np = 0; np < KN / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, k_s + (K_PIECES ? lo.k_at(np, ks) : bo.at(16 * np, ks)));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma16816<T>(s[m][2 * np], a[m], b[0], b[1]);
        mma16816<T>(s[m][2 * np + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// mask_scores sets to -inf the scores at positions ≥ the row's limit (lim0
// for row lane/4, lim1 for row lane/4 + 8).
template <int KEYS>
__device__ __forceinline__ void mask_scores(float (*s)[4], int kv0, int lim0, int lim1, int lane) {
#pragma unroll
  for (int n = 0; n < KEYS / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = kv0 + 8 * n + 2 * (lane & 3) + (e & 1);
      if (pos >= (e < 2 ? lim0 : lim1)) s[n][e] = -INFINITY;
    }
  }
}

// SoftmaxRows is the online-softmax state of a lane's two rows of one row
// tile (lane/4 and lane/4 + 8): the running max in raw score units and this
// lane's part of the running sum.
struct SoftmaxRows {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
};

// kLazyMax is how far (log2 units) a row's scores may rise above the max
// its exponents are taken against before softmax_tile moves that max: with
// probabilities up to 2^8 neither f32 sums nor 16-bit P lose anything, and
// a tile whose rows all stay within it skips the rescale of acc and the sum
// (D/2 multiplies a lane per row tile: at head dim 128 as many as the
// exponents of a 64-key tile).
constexpr float kLazyMax = 8.0f;

// softmax_tile folds one tile's scores of one row tile into st and turns s
// into exp2(s·q_mul − m·q_mul), m being the row's max when the tile raised it
// by more than kLazyMax in any of the warp's rows (acc and the sum are then
// rescaled by how far it moved), else the max of earlier tiles. OFF: the
// scores of the lane's row h are s + off[h] (the _mods entries' ALiBi bias
// that is the same across a row's tile), added to the row's max and to
// each exponent's offset, not to each score.
template <int KEYS, int NT, bool OFF = false>
__device__ __forceinline__ void softmax_tile(SoftmaxRows& st, float (*s)[4], float (*acc)[4], float q_mul,
                                             const float* off = nullptr) {
  float mx[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = st.m[h];
    if constexpr (OFF) {
      float t = -INFINITY;
#pragma unroll
      for (int n = 0; n < KEYS / 8; ++n) t = fmaxf(t, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
      mx[h] = fmaxf(mx[h], t + off[h]);
    } else {
#pragma unroll
      for (int n = 0; n < KEYS / 8; ++n) mx[h] = fmaxf(mx[h], fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    }
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
  // A row that has seen nothing keeps max -inf (−inf − −inf is NaN, which
  // moves nothing); its first visible scores set the max.
  const bool move = (mx[0] - st.m[0]) * q_mul > kLazyMax || (mx[1] - st.m[1]) * q_mul > kLazyMax;
  if (__any_sync(0xffffffffu, move)) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float alpha = mx[h] == -INFINITY ? 1.0f : exp2_ftz((st.m[h] - mx[h]) * q_mul);
      st.m[h] = mx[h];
      st.l[h] *= alpha;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        acc[n][2 * h] *= alpha;
        acc[n][2 * h + 1] *= alpha;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // A row with nothing visible yet keeps max -inf; its scores are all -inf
    // and exp2 of them is 0 against any finite offset.
    const float ms = st.m[h] == -INFINITY ? 0.0f : st.m[h] * q_mul;
    const float b = OFF ? fmaf(off[h], q_mul, -ms) : -ms;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < KEYS / 8; ++n) {
      s[n][2 * h] = exp2_ftz(fmaf(s[n][2 * h], q_mul, b));
      s[n][2 * h + 1] = exp2_ftz(fmaf(s[n][2 * h + 1], q_mul, b));
      sum += s[n][2 * h] + s[n][2 * h + 1];
    }
    st.l[h] += sum;
  }
}

// pv_tile accumulates acc[m] += P[m]·V for one V tile, P (this warp's
// probabilities, in the mma C layout) rounded to T. Each V fragment read
// from shared memory serves all MT row tiles. The flash layout's V tile is
// token-major (read transposing, at ao's offsets); LaidKV's is transposed
// already (read plain, at lo's).
template <typename T, int D, int KEYS, int KN, int MT, int LAYOUT>
__device__ __forceinline__ void pv_tile(float (*acc)[D / 8][4], const float (*p)[KN / 8][4], uint32_t v_s,
                                        const LaneOffsets<D / 8>& ao, const LaidOffsets<D, KEYS, LAYOUT>& lo) {
#pragma unroll
  for (int kk = 0; kk < KN / 16; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      a[m][0] = pack2<T>(p[m][2 * kk][0], p[m][2 * kk][1]);
      a[m][1] = pack2<T>(p[m][2 * kk][2], p[m][2 * kk][3]);
      a[m][2] = pack2<T>(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
      a[m][3] = pack2<T>(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      if constexpr (LAYOUT == kLayoutFlash) {
        ldmatrix_x4_trans(b, v_s + ao.at(16 * kk, dp));
      } else {
        ldmatrix_x4(b, v_s + lo.v_at(kk, dp));
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma16816<T>(acc[m][2 * dp], a[m], b[0], b[1]);
        mma16816<T>(acc[m][2 * dp + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// wg_qk_tile computes the warpgroup's scores s = Q·Kᵀ for the first KN
// positions of one K tile (kLayoutWG: the 64-row q tile at q_s and the K
// tile at k_s in wgmma's tiles of 64 and KEYS rows; s is this warp's part,
// in the mma C layout), one wgmma per 16 of D, and waits for them.
template <typename T, int D, int KEYS, int KN>
__device__ __forceinline__ void wg_qk_tile(float (&s)[KN / 8][4], uint32_t q_s, uint32_t k_s) {
  wg_fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    // Step ks: 32 bytes into column block ks/4 of each tile.
    const uint32_t step = (ks & 3) * 32;
    wgmma_ss<T, KN>(s, wg_desc(q_s + (ks >> 2) * (64 * 128) + step, 16, 1024),
                    wg_desc(k_s + (ks >> 2) * (KEYS * 128) + step, 16, 1024), ks);
  }
  wg_commit();
  wg_wait<0>();
  wg_hold(s);
}

// wg_pv_tile accumulates acc += P·V for the first KN positions of one V
// tile (kLayoutWG): P (p, this warp's probabilities in the mma C layout)
// rounded to T is each step's A operand as it stands, V (KEYS rows of D,
// N-major) read by descriptor, 16 positions a wgmma.
template <typename T, int D, int KEYS, int KN>
__device__ __forceinline__ void wg_pv_tile(float (&acc)[D / 8][4], const float (&p)[KN / 8][4], uint32_t v_s) {
  uint32_t a[KN / 16][4];
#pragma unroll
  for (int kk = 0; kk < KN / 16; ++kk) {
    a[kk][0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
    a[kk][1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
    a[kk][2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
  }
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < KN / 16; ++kk) {
    // Positions 16kk …: 16 rows of 128 bytes into the tile; its column
    // blocks of 64 elements lie KEYS·128 bytes apart.
    wgmma_rs<T, D>(acc, a[kk], wg_desc(v_s + kk * 16 * 128, KEYS * 128, 1024));
  }
  wg_commit();
  wg_wait<0>();
  wg_hold(acc);
}

// store_rows writes a lane's two rows of one row tile, whose first packed
// row is p0: the normalized output (·v_mul) and LSE, or for split-K the
// split's partials. MODS with sinks (f32
// [num_q_heads]): the first split adds each head's sink logit to its
// denominator (in log2 units), as one more score that attends no value.
// DM < D (padded tiles): rows and partials hold the first DM of the tile's
// D columns.
template <typename T, int D, bool MODS = false, int DM = D>
__device__ __forceinline__ void store_rows(const VarlenTile& t, const SoftmaxRows& st, const float (*acc)[4], int p0,
                                           int kvh, int G, int num_q_heads, int split, int splits, float q_mul, float v_mul, T* out, int64_t out_token_stride,
                                           int64_t out_head_stride, float* lse, float* partial_out, float* partial_max, float* partial_sum,
                                           int lane, const float* __restrict__ sinks = nullptr) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int p = p0 + (lane >> 2) + 8 * h;
    if (p >= t.q_len * G) continue;
    const int tok = p / G;
    const int64_t row = (int64_t)(t.q_begin + tok) * num_q_heads + kvh * G + (p - tok * G);
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float mx = l > 0.0f ? st.m[h] * q_mul : -INFINITY;  // log2 units
    if constexpr (MODS) {
      if (sinks != nullptr && split == 0) {
        // The rows' sum and output rescaled to the larger of the max and
        // the sink: l·2^(mx−M) + 2^(sink−M).
        const float sink = __ldg(sinks + kvh * G + (p - tok * G)) * kLog2e;
        const float top = fmaxf(mx, sink);
        const float a = l > 0.0f ? exp2f(mx - top) : 0.0f;
        l = fmaf(l, a, exp2f(sink - top));
        inv = a / l;
        mx = top;
      }
    }
    const float o_mul = inv * v_mul;
    if (splits == 1) {
      const int64_t out_row = (int64_t)(t.q_begin + tok) * out_token_stride + (int64_t)(kvh * G + (p - tok * G)) * out_head_stride;
#pragma unroll
      for (int n = 0; n < DM / 8; ++n) {
        *reinterpret_cast<uint32_t*>(out + out_row + 8 * n + 2 * (lane & 3)) =
            pack2<T>(acc[n][2 * h] * o_mul, acc[n][2 * h + 1] * o_mul);
      }
      if (lse != nullptr && (lane & 3) == 0) lse[row] = l > 0.0f ? (mx + log2f(l)) * kLn2 : -INFINITY;
    } else {
      const int64_t prow = row * splits + split;
#pragma unroll
      for (int n = 0; n < DM / 8; ++n) {
        *reinterpret_cast<float2*>(partial_out + prow * DM + 8 * n + 2 * (lane & 3)) =
            make_float2(acc[n][2 * h] * o_mul, acc[n][2 * h + 1] * o_mul);
      }
      if ((lane & 3) == 0) {
        partial_max[prow] = mx;
        partial_sum[prow] = l;
      }
    }
  }
}

// length_splits returns how many of a launch's `splits` splits a row tile
// whose KV range holds `tiles` tiles of KEYS positions (`span` positions)
// uses: the planner's model (dispatch.VarlenModelSplits) for a launch of
// `blocks` blocks a split in waves of `wave` blocks, which minimizes
// waves × the longest split's whole tiles, plus kVarlenSplitCostKeys a
// split and kVarlenMergeCostKeys for the merge (the fewest among equals),
// and keeps one split below kVarlenMinSplitSpan positions or when the
// blocks fill a wave. Each lane costs the counts lane + 1 and lane + 33;
// every lane returns the same count.
template <int KEYS>
__device__ __forceinline__ int length_splits(int tiles, int span, int splits, int blocks, int wave) {
  if (span < kVarlenMinSplitSpan || blocks >= wave) return 1;
  const int most = min(splits, tiles);
  unsigned long long best = ~0ull;
  for (int n = (threadIdx.x & 31) + 1; n <= most; n += 32) {
    const int waves = (blocks * n + wave - 1) / wave;
    long long c = (long long)waves * (long long)((tiles + n - 1) / n) * KEYS;
    if (n > 1) c += n * kVarlenSplitCostKeys + kVarlenMergeCostKeys;
    best = min(best, ((unsigned long long)c << 7) | (unsigned long long)n);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, o));
  return (int)(best & 127);
}

// kv_tiles sets the KV range of t's block (its rows row0 … row0+ROWS−1):
// up to its last row's limit (kv_end), from the tile that holds kv_begin
// (0, or with a sliding window its first row's window start), cut into
// splits of whole KEYS-wide tiles, split `split` taking tiles
// [first_tile, end_tile); positions from mask_from on (its first row's
// limit) need the per-row mask.
template <int ROWS, int KEYS>
__device__ __forceinline__ void kv_tiles(const VarlenTile& t, int G, bool causal, int split, int splits,
                                         int split_blocks, int split_wave, int& kv_end, int& mask_from,
                                         int& first_tile, int& end_tile, int& live, int kv_begin = 0) {
  const int rows = t.q_len * G;
  const int last = min(t.row0 + ROWS, rows) - 1;
  kv_end = row_limit(t, last, G, causal);
  mask_from = row_limit(t, t.row0, G, causal);
  const int tiles = (kv_end + KEYS - 1) / KEYS;
  const int from = kv_begin / KEYS;
  int n = splits;
  if (split_wave > 0 && splits > 1) {
    n = length_splits<KEYS>(tiles - from, kv_end - from * KEYS, splits, split_blocks, split_wave);
  }
  const int per_split = (tiles - from + n - 1) / n;
  live = (tiles - from + per_split - 1) / per_split;
  first_tile = min(tiles, from + split * per_split);
  end_tile = min(tiles, first_tile + per_split);
}

// mark_empty_splits writes, for the rows of t's block, the partials of
// splits live … splits − 1, which the block's row tile leaves without tiles
// (they exit before writing): max −inf and sum 0, which the merge skips.
template <int ROWS>
__device__ __forceinline__ void mark_empty_splits(const VarlenTile& t, int G, int kvh, int num_q_heads, int live,
                                               int splits, float* __restrict__ partial_max,
                                               float* __restrict__ partial_sum) {
  const int rows = min(ROWS, t.q_len * G - t.row0);
  const int n = splits - live;
  for (int i = threadIdx.x; i < rows * n; i += kVarlenThreads) {
    const int p = t.row0 + i / n;
    const int tok = p / G;
    const int64_t row = (int64_t)(t.q_begin + tok) * num_q_heads + kvh * G + (p - tok * G);
    partial_max[row * splits + live + i % n] = -INFINITY;
    partial_sum[row * splits + live + i % n] = 0.0f;
  }
}

// row_limits sets lim to the limits of this lane's rows of the warp's MT
// row tiles (row tile m starts at packed row p0 + 16m; the lane's rows
// are lane/4 and lane/4 + 8 of each).
template <int MT>
__device__ __forceinline__ void row_limits(int (&lim)[MT][2], const VarlenTile& t, int p0, int G, bool causal,
                                           int lane) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    lim[m][0] = row_limit(t, p0 + 16 * m + (lane >> 2), G, causal);
    lim[m][1] = row_limit(t, p0 + 16 * m + (lane >> 2) + 8, G, causal);
  }
}

// VarlenKV copies K/V tiles of KEYS positions (tile i: positions i·KEYS …,
// zeros from kv_end on) into the two-stage ring at ring_s through the
// sequence's block-table row, with the loader of the cache layout: the
// flash layout's (FlashRows: KVLines for the one-row-tile kernels, whole
// rows per instruction; KVRow for the two-row-tile ones, a row per
// 128/KEYS threads with one block-table lookup per thread and tile — they
// are bound by their math, not by memory) or the x-split and shuffle
// layouts' (LaidRows: LaidFP8KV for an fp8 cache, else LaidKV). Nothing
// is copied for tiles from end_tile on.
//
// It refers to the kernel's variables instead of holding copies, as a
// lambda capturing them by reference does, and is only passed by
// reference: the compiled code is then the same as with the kernel's own
// variables. Other shapes move values between registers and local memory
// before ptxas sees them (a method call through it after the loop cost the
// two-row-tile x-split and shuffle kernels 14–21% more instructions, and
// the _k64 ones more spills).
template <typename T, typename C, int D, int MT, int KEYS, int LAYOUT, bool LO = false, int DM = D>
struct VarlenKV {
  static constexpr bool LAID = !flash_entry(LAYOUT);
  static constexpr bool WG = LAYOUT == kLayoutWG;
  using Smem = VarlenSmem<T, C, D, MT, KEYS>;
  static constexpr int kCCH = Smem::kCacheChunks;
  static_assert(!WG || (MT == 1 && sizeof(C) == 2 && (kCCH & (kCCH - 1)) == 0 && DM == D),
                "wgmma entries: one warpgroup of 64 rows, 16-bit caches, power-of-two head dims");
  using FlashRows = typename Pick<
      (kCCH & (kCCH - 1)) != 0, KVChunks<T, C, D, MT, KEYS>,
      typename Pick<MT == 1, KVLines<T, C, D, MT, KEYS, DM, WG>, KVRow<T, C, D, MT, KEYS, DM>>::type>::type;
  static_assert(DM == D || (!LAID && (kCCH & (kCCH - 1)) == 0), "padded tiles: the flash layout's KVRow and KVLines");
  using LaidRows = typename Pick<sizeof(C) == 1, LaidFP8KV<D, KEYS, LAYOUT>, LaidKV<D, KEYS, LAYOUT>>::type;
  // Ids holds the block-table entries a thread looked up for one tile.
  using Ids = typename Pick<LAID, int, typename FlashRows::Ids>::type;
  static_assert(!(LO && LAID), "a KV range that starts past 0 has the flash loaders only");

  const int& end_tile;
  LaidRows& laid_row;
  const uint32_t& ring_s;
  const C* __restrict__ const& k_cache;
  const C* __restrict__ const& v_cache;
  const int& kv_end;
  const int& kvh;
  const int& num_kv_heads;
  const int& block_size_log2;
  const uint32_t& nb;  // BadBlock's pool bound
  FlashRows& kv_row;
  const C* const& k_head;  // K and V of this KV head at position 0 of block 0 (flash rows)
  const C* const& v_head;
  const HeadRows& hr;         // how the flash rows' loaders find this KV head's rows
  const int* const& table;    // the sequence's block-table row
  const int& kv_begin;        // LO: the first position read (the loaders' in_range)

  // issue starts the copy of tile i into ring stage `stage` (and commits a
  // cp.async group, empty past end_tile); blk holds lookup(i).
  __device__ __forceinline__ void issue(int i, int stage, Ids blk) const {
    if (i < end_tile) {
      if constexpr (LAID) {
        laid_row.issue(ring_s + stage * Smem::kStageBytes, k_cache, v_cache, blk, i * KEYS, kv_end, kvh,
                       num_kv_heads, block_size_log2, nb);
      } else {
        kv_row.template issue<LO>(ring_s + stage * Smem::kStageBytes, k_head, v_head, blk, i * KEYS, kv_begin,
                                  kv_end, block_size_log2, nb, hr);
      }
    }
    cp_async_commit();
  }

  // lookup returns this thread's block-table entries for tile i (none past
  // end_tile). They are looked up one tile ahead of the copy, so the
  // lookup's latency hides behind a tile's math.
  __device__ __forceinline__ Ids lookup(int i) const {
    if constexpr (LAID) {
      if (i >= end_tile) return 0;
      return laid_row.lookup(table, i * KEYS, kv_end, block_size_log2);
    } else {
      if (i >= end_tile) return typename FlashRows::Ids{};
      return kv_row.template lookup<LO>(table, i * KEYS, kv_begin, kv_end, block_size_log2);
    }
  }
};

// VarlenRowMods are the _mods entries' score modifiers of a lane's rows
// (row h of its row tile m: packed row p0 + 16m + lane/4 + 8h): the row's
// window start lo (0: no window), query position qpos and head's ALiBi
// slope in the softmax's raw score units (0: no ALiBi). For the block:
// cap (a soft-cap: scores enter the softmax as tanh(s·cap_mul), and its
// factor is the cap in log2 units), alibi (slopes given), and lo_max, the
// latest window start of its rows (tiles from there on need no lower
// mask).
template <int MT>
struct VarlenRowMods {
  int lo[MT][2];
  int qpos[MT][2];
  float slope[MT][2];
  int lo_max;
  bool cap;
  bool alibi;
  float cap_mul;
};

// VarlenLoop is what varlen_step works with, referring to the kernel's
// values (see VarlenKV for why references): the loader kv, the ring stage
// of the next tile and the block-table entries of the tile after the ones
// in flight (stage, next_blk), where the tiles land (ring, ring_s; wide for
// the widened fp8 tiles), whether this warp has rows to compute, q (qa in
// registers, or q_s) and the lane's ldmatrix offsets (ao, bo, lo), the
// first row's limit mask_from, the running state st and acc of the warp's
// row tiles, and q_mul, the factor that turns scores into log2 units.
template <typename T, typename C, int D, int MT, int KEYS, int LAYOUT, bool MODS = false, int DM = D>
struct VarlenLoop {
  using KV = VarlenKV<T, C, D, MT, KEYS, LAYOUT, MODS, DM>;
  // q's A fragments stay in registers with one row tile per warp below D =
  // 256 (32 registers at D = 128); with two, or at D = 256, the scores and
  // outputs need the room and q is read from shared memory per tile.
  static constexpr bool kQInRegs = MT == 1 && D <= 128 && LAYOUT != kLayoutWG;
  const KV& kv;
  int& stage;  // tile i's; tile i - 1's stage (free after the barrier) is the one before
  typename KV::Ids& next_blk;
  const uint32_t& ring_s;
  const int& kv_end;
  unsigned char* const& ring;
  unsigned char* const& wide;
  const bool& computes;
  SoftmaxRows (&st)[MT];
  float (&acc)[MT][D / 8][4];
  const uint32_t (&qa)[kQInRegs ? D / 16 : 1][4];
  const uint32_t& q_s;
  const LaneOffsets<D / 8>& ao;
  const LaneOffsets<D / 8>& bo;
  const LaidOffsets<D, KEYS, LAYOUT>& lo;
  const int& warp;
  const int& lane;
  const int& mask_from;
  const float& q_mul;
};

// next_tile waits for tile i (it must be the oldest in flight) and
// starts the copy of tile i + STAGES − 1 into the stage tile i − 1 freed;
// it returns tile i's K and V tiles in k_s and v_s, as the products read
// them: fp8 tiles widened to <q> (widen_tile, LaidFP8KV::widen), and the
// tail of a 16-bit x-split or shuffle V tile that reaches past kv_end
// zeroed (only a masked tile, MASK, reaches there). Every thread calls it.
template <typename T, typename C, int D, int MT, int KEYS, int LAYOUT, int MASK, bool MODS, int DM>
__device__ __forceinline__ void next_tile(const VarlenLoop<T, C, D, MT, KEYS, LAYOUT, MODS, DM>& loop, int i,
                                          uint32_t& k_s, uint32_t& v_s) {
  using Smem = VarlenSmem<T, C, D, MT, KEYS>;
  constexpr int STAGES = Smem::kStages;
  constexpr bool kFP8 = sizeof(C) == 1;
  constexpr bool LAID = !flash_entry(LAYOUT);
  cp_async_wait<STAGES - 2>();
  // wgmma reads shared memory through the async proxy: each thread's
  // copies are made visible to it before the barrier.
  if constexpr (LAYOUT == kLayoutWG) fence_async_smem();
  __syncthreads();  // tile i has landed for every thread; tile i-1's stage is free
  loop.kv.issue(i + STAGES - 1, loop.stage == 0 ? STAGES - 1 : loop.stage - 1, loop.next_blk);
  loop.next_blk = loop.kv.lookup(i + STAGES);
  k_s = loop.ring_s + loop.stage * Smem::kStageBytes;
  v_s = k_s + Smem::kTileBytes;
  if constexpr (LAID && !kFP8 && MASK != kMaskNone) {  // only a masked tile reaches past kv_end
    if (i * KEYS + KEYS > loop.kv_end && (loop.kv_end & 7) != 0) {
      LaidKV<D, KEYS, LAYOUT>::zero_tail(loop.ring + loop.stage * Smem::kStageBytes + Smem::kTileBytes,
                                         loop.kv_end - i * KEYS);
      __syncthreads();
    }
  }
  if constexpr (kFP8) {
    if constexpr (LAID) {
      LaidFP8KV<D, KEYS, LAYOUT>::template widen<T>(loop.wide, loop.ring + loop.stage * Smem::kStageBytes,
                                                    min(loop.kv_end - i * KEYS, KEYS));
    } else {
      widen_tile<T, D, MT, KEYS>(loop.wide, loop.ring + loop.stage * Smem::kStageBytes);
    }
    __syncthreads();
    k_s = smem_addr(loop.wide);
    v_s = k_s + Smem::kWideTileBytes;
  }
  loop.stage = loop.stage == STAGES - 1 ? 0 : loop.stage + 1;
}

// attend_tile folds the first KN positions of tile i (K and V at k_s and
// v_s) into this warp's rows: S = Q·Kᵀ for its MT row tiles, the mask
// where MASK asks for it (kMaskAll: always; kMaskFrom: a tile that reaches
// mask_from; lim: the lane's rows' limits), the online softmax, O += P·V.
// MODS: a soft-cap turns each score s into tanh(s·cap_mul) (one
// multiply and the special-function unit's tanh); ALiBi's bias slope·(key
// − qpos) splits into slope·(8n + e), a constant of the score's place in
// the lane's fragment (one FFMA), and slope·(kv0 − qpos), the same for
// each of the lane's rows across the tile, which the softmax adds to the
// row (OFF). A tile that starts before a row's window start is masked at
// both ends of each row's range, as is one that MASK asks for.
template <typename T, typename C, int D, int MT, int KEYS, int LAYOUT, int KN, int MASK, bool MODS, int DM>
__device__ __forceinline__ void attend_tile(const VarlenLoop<T, C, D, MT, KEYS, LAYOUT, MODS, DM>& loop, int i,
                                            uint32_t k_s, uint32_t v_s, const int (*lim)[2],
                                            const VarlenRowMods<MT>& mods) {
  constexpr bool LAID = !flash_entry(LAYOUT);
  // K in LaidKV's piece-major tile (16-bit LAID caches); fp8 ones widen K
  // into a flash tile (LaidFP8KV).
  constexpr bool K_PIECES = LAID && sizeof(C) != 1;
  constexpr bool kQInRegs = VarlenLoop<T, C, D, MT, KEYS, LAYOUT, MODS, DM>::kQInRegs;
  float s[MT][KN / 8][4];
  if constexpr (LAYOUT == kLayoutWG) {
    wg_qk_tile<T, D, KEYS, KN>(s[0], loop.q_s, k_s);
  } else {
    qk_tile<T, D, KEYS, KN, MT, kQInRegs, K_PIECES, LAYOUT>(s, loop.qa, loop.q_s, k_s, loop.ao, loop.bo, loop.lo,
                                                           loop.warp);
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if constexpr (MODS) {
      const int kv0 = i * KEYS + 2 * (loop.lane & 3);
      if (mods.cap) {
#pragma unroll
        for (int n = 0; n < KN / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][n][e] = tanh_approx(s[m][n][e] * mods.cap_mul);
        }
      }
      float off[2] = {0.0f, 0.0f};
      if (mods.alibi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          off[h] = mods.slope[m][h] * (float)(kv0 - mods.qpos[m][h]);
#pragma unroll
          for (int n = 0; n < KN / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              s[m][n][2 * h + e] = fmaf(mods.slope[m][h], (float)(8 * n + e), s[m][n][2 * h + e]);
            }
          }
        }
      }
      if (i * KEYS < mods.lo_max || MASK == kMaskAll || (MASK == kMaskFrom && i * KEYS + KEYS > loop.mask_from)) {
#pragma unroll
        for (int n = 0; n < KN / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int pos = kv0 + 8 * n + (e & 1);
            if (pos >= lim[m][e >> 1] || pos < mods.lo[m][e >> 1]) s[m][n][e] = -INFINITY;
          }
        }
      }
      softmax_tile<KN, D / 8, true>(loop.st[m], s[m], loop.acc[m], loop.q_mul, off);
    } else {
      if (MASK == kMaskAll || (MASK == kMaskFrom && i * KEYS + KEYS > loop.mask_from)) {
        mask_scores<KN>(s[m], i * KEYS, lim[m][0], lim[m][1], loop.lane);
      }
      softmax_tile<KN, D / 8>(loop.st[m], s[m], loop.acc[m], loop.q_mul);
    }
  }
  if constexpr (LAYOUT == kLayoutWG) {
    wg_pv_tile<T, D, KEYS, KN>(loop.acc[0], s[0], v_s);
  } else {
    pv_tile<T, D, KEYS, KN, MT, LAYOUT>(loop.acc, s, v_s, loop.ao, loop.lo);
  }
}

// varlen_step runs tile i: its first KN positions (the rest lie past
// kv_end), masked as MASK says: kMaskNone (every position lies below every
// row's limit), kMaskAll (some lie at or past one), kMaskFrom (only a tile
// that reaches mask_from); lim holds this lane's rows' limits. A warp
// without rows only loads.
template <int KN, int MASK, typename T, typename C, int D, int MT, int KEYS, int LAYOUT, bool MODS, int DM>
__device__ __forceinline__ void varlen_step(const VarlenLoop<T, C, D, MT, KEYS, LAYOUT, MODS, DM>& loop, int i,
                                            const int (*lim)[2], const VarlenRowMods<MT>& mods) {
  uint32_t k_s, v_s;
  next_tile<T, C, D, MT, KEYS, LAYOUT, MASK>(loop, i, k_s, v_s);
  if (!loop.computes) return;
  attend_tile<T, C, D, MT, KEYS, LAYOUT, KN, MASK>(loop, i, k_s, v_s, lim, mods);
}

// stage_rows writes a lane's two rows of one row tile (first packed row
// p0) of a cluster's split into shared memory for cluster_merge_rows: the
// output normalized by the split's own sum (·v_mul) in o_s (row stride
// kVarlenClusterStride(D) floats), its max (log2 units; −inf for a row
// without keys) in m_s and its sum in l_s, each at the row's place in the
// tile (p − row0). Rows past the sequence's end are not written (the merge
// reads none of them).
template <int D>
__device__ __forceinline__ void stage_rows(const VarlenTile& t, const SoftmaxRows& st, const float (*acc)[4], int p0,
                                           int G, float q_mul, float v_mul, float* o_s, float* m_s, float* l_s,
                                           int lane) {
  constexpr int OS = kVarlenClusterStride(D);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int p = p0 + (lane >> 2) + 8 * h;
    if (p >= t.q_len * G) continue;
    const int r = p - t.row0;
    const float o_mul = (l > 0.0f ? 1.0f / l : 0.0f) * v_mul;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(o_s + r * OS + 8 * n + 2 * (lane & 3)) =
          make_float2(acc[n][2 * h] * o_mul, acc[n][2 * h + 1] * o_mul);
    }
    if ((lane & 3) == 0) {
      m_s[r] = l > 0.0f ? st.m[h] * q_mul : -INFINITY;
      l_s[r] = l;
    }
  }
}

// cluster_merge_rows is split-K phase 2 on chip, for launches whose splits
// of a row tile form one thread-block cluster (cluster dims 1 × 1 ×
// splits, so the cluster rank is the split). Each block has staged its
// split's rows (stage_rows); after a cluster barrier, block z merges the
// z-th of `splits` shares of the tile's rows over splits 0 … live − 1
// (those from live on took no tiles), reading them through distributed
// shared memory: one thread per row turns the splits' maxima and sums into
// weights normalized by the row's total (w_s [rows][kVarlenMaxClusterSplits],
// its own shared memory) and writes the row's LSE, then each thread merges
// float4 columns into out. The second barrier keeps every block's shared
// memory alive until all are done.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void cluster_merge_rows(const VarlenTile& t, int G, int kvh, int num_q_heads, int live,
                                                   int split, int splits, T* __restrict__ out,
                                                   int64_t out_token_stride, int64_t out_head_stride,
                                                   float* __restrict__ lse, const float* o_s, const float* m_s,
                                                   const float* l_s, float* w_s) {
  constexpr int OS = kVarlenClusterStride(D);
  constexpr int C4 = D / 4;  // float4 columns of a row
  constexpr int Z = kVarlenMaxClusterSplits;
  static_assert(D % 4 == 0, "rows of whole float4 columns");
  cluster_sync();
  const int rows = min(ROWS, t.q_len * G - t.row0);
  const int share = (rows + splits - 1) / splits;
  const int r0 = min(rows, split * share);
  const int n = min(rows, r0 + share) - r0;
  for (int i = threadIdx.x; i < n; i += kVarlenThreads) {
    const int r = r0 + i;
    float mz[Z], lz[Z];
#pragma unroll
    for (int z = 0; z < Z; ++z) {
      mz[z] = -INFINITY;
      lz[z] = 0.0f;
      if (z < live) {
        mz[z] = cluster_load(m_s + r, z);
        lz[z] = cluster_load(l_s + r, z);
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int z = 0; z < Z; ++z) mx = fmaxf(mx, mz[z]);
    float tot = 0.0f;
#pragma unroll
    for (int z = 0; z < Z; ++z) {
      lz[z] = mx == -INFINITY ? 0.0f : lz[z] * exp2f(mz[z] - mx);  // 0 for an empty split
      tot += lz[z];
    }
    const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
#pragma unroll
    for (int z = 0; z < Z; ++z) w_s[i * Z + z] = lz[z] * inv;
    if (lse != nullptr) {
      const int p = t.row0 + r;
      const int tok = p / G;
      lse[(int64_t)(t.q_begin + tok) * num_q_heads + kvh * G + (p - tok * G)] =
          tot > 0.0f ? (mx + log2f(tot)) * kLn2 : -INFINITY;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n * C4; i += kVarlenThreads) {
    const int rl = i / C4, c = i - rl * C4;
    const int r = r0 + rl;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int z = 0; z < Z; ++z) {
      if (z < live) {
        const float4 v = cluster_load4(o_s + r * OS + 4 * c, z);
        const float w = w_s[rl * Z + z];
        o.x = fmaf(w, v.x, o.x);
        o.y = fmaf(w, v.y, o.y);
        o.z = fmaf(w, v.z, o.z);
        o.w = fmaf(w, v.w, o.w);
      }
    }
    const int p = t.row0 + r;
    const int tok = p / G;
    T* dst = out + (int64_t)(t.q_begin + tok) * out_token_stride + (int64_t)(kvh * G + (p - tok * G)) * out_head_stride +
             4 * c;
    reinterpret_cast<uint32_t*>(dst)[0] = pack2<T>(o.x, o.y);
    reinterpret_cast<uint32_t*>(dst)[1] = pack2<T>(o.z, o.w);
  }
  cluster_sync();
}

// paged_varlen is the body of every varlen entry (see the top): it finds
// the block's row tile and KV range, stages q and the first K/V tiles,
// runs the tiles (varlen_step), and writes the rows (store_rows). MODS:
// the _mods entries' score modifiers (see the top); the others pass none.
// CLUSTER: the _cluster entries, whose splits of a row tile form one
// cluster and merge on chip (stage_rows, cluster_merge_rows); a split
// without tiles then stays to merge its share. DM < D: head dim DM (120)
// computed on tiles of D (128), the rows zero-padded in shared memory
// (load_q_tile, KVRow, KVLines; 16-bit flash-layout caches) and written
// back as rows of DM (store_rows).
template <typename T, typename C, int D, int MT, int KEYS, int LAYOUT, bool MODS = false, bool CLUSTER = false,
          int DM = D>
__device__ __forceinline__ void paged_varlen(T* __restrict__ out, float* __restrict__ lse,
                                             float* __restrict__ partial_out, float* __restrict__ partial_max,
                                             float* __restrict__ partial_sum, const T* __restrict__ q,
                                             const C* __restrict__ k_cache, const C* __restrict__ v_cache,
                                             const int* __restrict__ block_tables,
                                             const int* __restrict__ cu_seqlens_q,
                                             const int* __restrict__ pos_offsets, unsigned long long* fault,
                                             int64_t q_token_stride, int64_t out_token_stride,
                                             int64_t out_head_stride, int num_seqs, int total_q, int num_q_heads,
                                             int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,
                                             int causal, int layout, float scale, float k_scale, float v_scale, int cu_base,
                                             int seq_base, int one_pos, int split_blocks, int split_wave,
                                             int window = 0, float softcap = 0.0f,
                                             const float* __restrict__ sinks = nullptr,
                                             const float* __restrict__ alibi = nullptr) {
  using Smem = VarlenSmem<T, C, D, MT, KEYS>;
  using Loop = VarlenLoop<T, C, D, MT, KEYS, LAYOUT, MODS, DM>;
  using KV = typename Loop::KV;
  constexpr int ROWS = Smem::kRows;
  constexpr int STAGES = Smem::kStages;
  constexpr int NT = D / 8;
  // The _k64 entries run the tiles below every row's limit in a loop
  // without the mask code: one loop with the mask in it spills on the
  // H200's JIT at 64 keys. The other entries keep one loop: split in two,
  // theirs run 0.7–2.5% slower (H100, 2026-12-02).
  constexpr bool kSplitLoops = MT == 2 && KEYS == 64;
  static_assert(!(MODS && kSplitLoops), "the _mods entries mask every tile in one loop");
  extern __shared__ __align__(128) unsigned char smem[];
  // wgmma's swizzled tiles start on 1024-byte boundaries: a kLayoutWG entry
  // launches with kVarlenWGAlign more bytes and starts there.
  unsigned char* const base =
      LAYOUT == kLayoutWG
          ? smem + ((kVarlenWGAlign - (smem_addr(smem) & (kVarlenWGAlign - 1))) & (kVarlenWGAlign - 1))
          : smem;
  const uint32_t q_s = smem_addr(base);
  unsigned char* ring = base + Smem::kQBytes;
  unsigned char* wide = ring + STAGES * Smem::kStageBytes;

  const int kvh = blockIdx.y;
  const int num_kv_heads = gridDim.y;
  const int G = num_q_heads / num_kv_heads;
  const int split = blockIdx.z, splits = gridDim.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cap = max_blocks_per_seq << block_size_log2;
  if (kvh == 0 && split == 0 && threadIdx.x == 0 && (int)blockIdx.x < num_seqs) {
    check_sequence(cu_seqlens_q, cu_base, pos_offsets, one_pos, blockIdx.x, seq_base, total_q, cap, fault);
  }
  const VarlenTile t =
      find_tile<ROWS>(cu_seqlens_q, cu_base, pos_offsets, one_pos, num_seqs, total_q, G, cap,
                      (int)(gridDim.x - 1 - blockIdx.x));
  if (t.q_len == 0) return;
  const bool is_causal = causal != 0;

  // kv_begin: with a sliding window, the block's first row's first
  // position (its rows' windows start no earlier); nothing before it is read.
  int kv_begin = 0;
  if constexpr (MODS) {
    if (window > 0) {
      const int qpos0 = t.pos_offset + t.row0 / G;
      kv_begin = max(0, min(qpos0 - window + 1, row_limit(t, t.row0, G, is_causal) - 1));
    }
  }
  int kv_end, mask_from, first_tile, end_tile;
  int live;  // the splits that take tiles: 0 … live − 1
  kv_tiles<ROWS, KEYS>(t, G, is_causal, split, splits, split_blocks, split_wave, kv_end, mask_from, first_tile,
                       end_tile, live, kv_begin);
  // A split its row tile does not use (a short range) exits before any
  // load; split 0 marks its partials empty first. (A cluster's split runs
  // no tiles and merges its share.)
  static_assert(!(MODS && CLUSTER), "the _mods entries merge in global memory");
  static_assert(DM == D || !CLUSTER, "padded tiles merge in global memory");
  if (split >= live && !CLUSTER) return;
  if (split == 0 && live < splits && !CLUSTER) {
    mark_empty_splits<ROWS>(t, G, kvh, num_q_heads, live, splits, partial_max, partial_sum);
  }
  // This warp's rows: row tile m starts at packed row p0 + 16m. A warp
  // whose rows all lie past the sequence's end (a short sequence: a decode
  // row of a mixed batch) only helps load.
  const int p0 = t.row0 + 16 * MT * warp;
  // (A wgmma is the whole warpgroup's: every warp computes.)
  const bool computes = LAYOUT == kLayoutWG || p0 < t.q_len * G;
  // lim: this lane's rows' limits, set where the masked tiles begin (the
  // split loops) or here.
  int lim[MT][2];
  if constexpr (!kSplitLoops) row_limits<MT>(lim, t, p0, G, is_causal, lane);
  // mods: the score modifiers of this lane's rows (MODS).
  VarlenRowMods<MT> mods;
  if constexpr (MODS) {
    const int last = min(t.row0 + ROWS, t.q_len * G) - 1;
    mods.lo_max = window > 0 ? t.pos_offset + last / G - window + 1 : 0;
    mods.cap = softcap > 0.0f;
    mods.alibi = alibi != nullptr;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = p0 + 16 * m + (lane >> 2) + 8 * h;
        const int qpos = t.pos_offset + min(p / G, t.q_len - 1);
        mods.lo[m][h] = window > 0 ? max(0, qpos - window + 1) : 0;
        mods.qpos[m][h] = qpos;
        mods.slope[m][h] = mods.alibi ? __ldg(alibi + kvh * G + p % G) : 0.0f;
      }
    }
  }
  const int* table = block_tables + (int64_t)t.seq * max_blocks_per_seq;
  // Flash rows (LAYOUT flash): the flash or the HND layout, as layout says.
  const HeadRows hr(flash_entry(LAYOUT) ? layout : kLayoutFlash, kvh, num_kv_heads, DM);
  const C* k_head = k_cache + hr.base;
  const C* v_head = v_cache + hr.base;
  const uint32_t ring_s = smem_addr(ring);
  typename KV::FlashRows kv_row;
  const uint32_t nb = BadBlock::bound(num_blocks);
  typename KV::LaidRows laid_row;
  const KV kv{end_tile, laid_row, ring_s, k_cache, v_cache, kv_end, kvh, num_kv_heads, block_size_log2, nb,
              kv_row, k_head, v_head, hr, table, kv_begin};

  load_q_tile<T, D, ROWS, DM, LAYOUT>(q_s, q, q_token_stride, t, kvh, G);
  cp_async_commit();
#pragma unroll
  for (int j = 0; j < STAGES - 1; ++j) kv.issue(first_tile + j, j, kv.lookup(first_tile + j));
  auto next_blk = kv.lookup(first_tile + STAGES - 1);
  cp_async_wait<STAGES - 1>();  // q has landed
  __syncthreads();
  const LaneOffsets<D / 8> ao = a_offsets<D / 8>(lane), bo = b_offsets<D / 8>(lane);
  const LaidOffsets<D, KEYS, LAYOUT> lo(lane);
  uint32_t qa[Loop::kQInRegs ? D / 16 : 1][4];
  if constexpr (Loop::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qa[ks], q_s + ao.at(16 * warp, ks));
  }

  // Scores come out in log2 units: scale·log2(e)·k_scale (·mma_scale for fp8).
  const float q_mul = scale * kLog2e * k_scale * mma_scale<C>();
  const float v_mul = v_scale * mma_scale<C>();
  // soft_mul: the factor that turns the softmax's raw scores into log2
  // units: q_mul, or with a soft-cap the cap in log2 units (the scores are
  // then tanh(s·q_mul/cap)). ALiBi slopes turn into those raw units.
  float soft_mul = q_mul;
  if constexpr (MODS) {
    if (mods.cap) {
      soft_mul = softcap * kLog2e;
      mods.cap_mul = q_mul / soft_mul;
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      mods.slope[m][0] *= kLog2e / soft_mul;
      mods.slope[m][1] *= kLog2e / soft_mul;
    }
  }
  SoftmaxRows st[MT];
  float acc[MT][NT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
  }

  int stage = 0;
  const Loop loop{kv, stage, next_blk, ring_s, kv_end, ring, wide, computes, st, acc,
                  qa, q_s, ao, bo, lo, warp, lane, mask_from, soft_mul};
  if constexpr (kSplitLoops) {
    // The tiles wholly below every row's limit run first, in a loop
    // without the mask (a branch around it inside the loop cut the block
    // ptxas schedules in two, and its limits held 4 registers), then the
    // tiles from mask_from on, masked: the diagonal's, or the one that
    // holds kv_end.
    const int masked_from = max(first_tile, min(end_tile, mask_from / KEYS));
    for (int i = first_tile; i < masked_from; ++i) varlen_step<KEYS, kMaskNone>(loop, i, nullptr, mods);
    row_limits<MT>(lim, t, p0, G, is_causal, lane);
    for (int i = masked_from; i < end_tile; ++i) {
      // A tile whose second half lies past kv_end computes its first half
      // only (P would be 0 there): the last tile of a causal block would
      // otherwise compute on average 16 more keys than 32-key tiles.
      if (i * KEYS + KEYS / 2 >= kv_end) {
        varlen_step<KEYS / 2, kMaskAll>(loop, i, lim, mods);
      } else {
        varlen_step<KEYS, kMaskAll>(loop, i, lim, mods);
      }
    }
  } else {
    for (int i = first_tile; i < end_tile; ++i) varlen_step<KEYS, kMaskFrom>(loop, i, lim, mods);
  }
  cp_async_wait<0>();  // nothing in flight when the block exits
  if constexpr (!flash_entry(LAYOUT)) {
    laid_row.bad.report(fault, t.seq + seq_base, block_size_log2);
  } else {
    kv_row.bad.report(fault, t.seq + seq_base, block_size_log2);
  }
  if constexpr (CLUSTER) {
    // Every warp has read its last tile: the ring's memory is free.
    __syncthreads();
    float* o_s = reinterpret_cast<float*>(base);
    float* m_s = o_s + ROWS * kVarlenClusterStride(D);
    float* l_s = m_s + ROWS;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      stage_rows<D>(t, st[m], acc[m], p0 + 16 * m, G, soft_mul, v_mul, o_s, m_s, l_s, lane);
    }
    cluster_merge_rows<T, D, ROWS>(t, G, kvh, num_q_heads, live, split, splits, out, out_token_stride,
                                   out_head_stride, lse, o_s, m_s, l_s, l_s + ROWS);
  } else {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      store_rows<T, D, MODS, DM>(t, st[m], acc[m], p0 + 16 * m, kvh, G, num_q_heads, split, splits, soft_mul,
                             v_mul, out, out_token_stride, out_head_stride, lse, partial_out, partial_max,
                             partial_sum, lane, sinks);
    }
  }
}

// varlen_merge is split-K phase 2: warp w of block b merges row 4b + w,
// over its splits up to the last with a finite max (the splits after it
// took no tiles of the row's tile and wrote no partial_out; a split before
// it without keys for the row wrote zeros and weighs 0).
template <typename T, int D>
__device__ __forceinline__ void varlen_merge(T* __restrict__ out, float* __restrict__ lse,
                                             const float* __restrict__ partial_out,
                                             const float* __restrict__ partial_max,
                                             const float* __restrict__ partial_sum,
                                             const int* __restrict__ cu_seqlens_q, int64_t out_token_stride,
                                             int64_t out_head_stride, int num_seqs, int rows, int num_q_heads,
                                             int splits, int cu_base) {
  constexpr int PER_LANE = D / 32;
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * kVarlenWarps + (threadIdx.x >> 5);
  const int total = min(max(cu_bound(cu_seqlens_q, num_seqs, cu_base, rows / num_q_heads), 0), rows / num_q_heads);
  if (row >= (int64_t)total * num_q_heads) return;
  const int64_t prow0 = row * splits;
  float mx = -INFINITY;
  int used = 0;  // 1 + the last split with a finite max
  for (int z = lane; z < splits; z += 32) {
    const float m = partial_max[prow0 + z];
    mx = fmaxf(mx, m);
    if (m != -INFINITY) used = z + 1;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  used = __reduce_max_sync(0xffffffffu, used);
  float sum = 0.0f;
  if constexpr (D % 64 == 0) {
    // A lane merges PER_LANE consecutive d.
    float o[PER_LANE] = {};
    if (mx != -INFINITY) {
      for (int z = 0; z < used; ++z) {
        const float w = partial_sum[prow0 + z] * exp2f(partial_max[prow0 + z] - mx);
        sum += w;
        const float* src = partial_out + (prow0 + z) * D + lane * PER_LANE;
#pragma unroll
        for (int j = 0; j < PER_LANE; j += 2) {
          const float2 v = *reinterpret_cast<const float2*>(src + j);
          o[j] = fmaf(w, v.x, o[j]);
          o[j + 1] = fmaf(w, v.y, o[j + 1]);
        }
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int64_t tok = row / num_q_heads;
    const int64_t out_row = tok * out_token_stride + (row - tok * num_q_heads) * out_head_stride;
#pragma unroll
    for (int j = 0; j < PER_LANE; j += 2) {
      *reinterpret_cast<uint32_t*>(out + out_row + lane * PER_LANE + j) = pack2<T>(o[j] * inv, o[j + 1] * inv);
    }
  } else {
    // Head dims 80, 96, 112, 120: a lane merges the pairs of d lane + 32j.
    constexpr int PAIRS = (D / 2 + 31) / 32;
    float o[PAIRS][2] = {};
    if (mx != -INFINITY) {
      for (int z = 0; z < used; ++z) {
        const float w = partial_sum[prow0 + z] * exp2f(partial_max[prow0 + z] - mx);
        sum += w;
        const float* src = partial_out + (prow0 + z) * D;
#pragma unroll
        for (int j = 0; j < PAIRS; ++j) {
          const int d = 2 * (lane + 32 * j);
          if (d < D) {
            const float2 v = *reinterpret_cast<const float2*>(src + d);
            o[j][0] = fmaf(w, v.x, o[j][0]);
            o[j][1] = fmaf(w, v.y, o[j][1]);
          }
        }
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int64_t tok = row / num_q_heads;
    const int64_t out_row = tok * out_token_stride + (row - tok * num_q_heads) * out_head_stride;
#pragma unroll
    for (int j = 0; j < PAIRS; ++j) {
      const int d = 2 * (lane + 32 * j);
      if (d < D) *reinterpret_cast<uint32_t*>(out + out_row + d) = pack2<T>(o[j][0] * inv, o[j][1] * inv);
    }
  }
  if (lse != nullptr && lane == 0) lse[row] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
}

}  // namespace pkv

// PKV_VARLEN defines one varlen entry (KEYS: its K/V tiles' positions;
// LAYOUT: the caches' layout); PKV_VARLEN_DM one for head dim DM on tiles
// of D (DM < D: padded, see paged_varlen).
#define PKV_VARLEN_DM(name, T, C, D, DM, MT, KEYS, LAYOUT)                                                       \
  extern "C" __global__ void __launch_bounds__(pkv::kVarlenThreads) name(                                  \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum, const T* q,           \
      const C* k_cache, const C* v_cache, const int* block_tables, const int* cu_seqlens_q,                 \
      const int* pos_offsets, unsigned long long* fault, int64_t q_token_stride, int64_t out_token_stride, \
      int64_t out_head_stride, int num_seqs, int total_q,                                                   \
      int num_q_heads, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks, int causal,         \
      int layout, float scale, float k_scale, float v_scale, int cu_base, int seq_base, int one_pos, int split_blocks,  \
      int split_wave) {                                                                                     \
    pkv::paged_varlen<T, C, D, MT, KEYS, LAYOUT, false, false, DM>(out, lse, partial_out, partial_max, partial_sum, q, k_cache, v_cache, \
                               block_tables, cu_seqlens_q, pos_offsets, fault, q_token_stride,              \
                               out_token_stride, out_head_stride, num_seqs,                                 \
                               total_q, num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks,       \
                               causal, layout, scale, k_scale, v_scale, cu_base, seq_base, one_pos, split_blocks,   \
                               split_wave);                                                                 \
  }
#define PKV_VARLEN(name, T, C, D, MT, KEYS, LAYOUT) PKV_VARLEN_DM(name, T, C, D, D, MT, KEYS, LAYOUT)

// PKV_VARLEN_CLUSTER defines one _cluster entry over a flash-layout cache
// of the queries' type (PKV_VARLEN's parameters; the partials are unused):
// launched with cluster dims 1 × 1 × splits, 2 ≤ splits ≤
// kVarlenMaxClusterSplits, and VarlenSmem::kClusterBytes of dynamic shared
// memory where that exceeds kBytes. Needs compute_90.
#define PKV_VARLEN_CLUSTER(name, T, D, MT, KEYS)                                                              \
  extern "C" __global__ void __launch_bounds__(pkv::kVarlenThreads) name(                                  \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum, const T* q,           \
      const T* k_cache, const T* v_cache, const int* block_tables, const int* cu_seqlens_q,                 \
      const int* pos_offsets, unsigned long long* fault, int64_t q_token_stride, int64_t out_token_stride, \
      int64_t out_head_stride, int num_seqs, int total_q, int num_q_heads, int max_blocks_per_seq,         \
      int block_size_log2, int64_t num_blocks, int causal, int layout, float scale, float k_scale, float v_scale, \
      int cu_base, int seq_base, int one_pos, int split_blocks, int split_wave) {                           \
    pkv::paged_varlen<T, T, D, MT, KEYS, pkv::kLayoutFlash, false, true>(                                   \
        out, lse, partial_out, partial_max, partial_sum, q, k_cache, v_cache, block_tables, cu_seqlens_q,   \
        pos_offsets, fault, q_token_stride, out_token_stride, out_head_stride, num_seqs, total_q,          \
        num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks, causal, layout, scale, k_scale, v_scale, \
        cu_base, seq_base, one_pos, split_blocks, split_wave);                                              \
  }

// PKV_VARLEN_CLUSTER_ALL defines the _cluster twins of the flash-layout
// entries of PKV_VARLEN_ALL over a cache of the queries' type
// (<prefix>_hd<D>[_r64]_cluster). The _k64 entry has none: at 255
// registers, the merge's code made ptxas spill in its loop.
#define PKV_VARLEN_CLUSTER_ALL(prefix, T)                     \
  PKV_VARLEN_CLUSTER(prefix##_hd64_cluster, T, 64, 2, 32)       \
  PKV_VARLEN_CLUSTER(prefix##_hd128_cluster, T, 128, 2, 32)     \
  PKV_VARLEN_CLUSTER(prefix##_hd256_cluster, T, 256, 1, 32)     \
  PKV_VARLEN_CLUSTER(prefix##_hd64_r64_cluster, T, 64, 1, 64)   \
  PKV_VARLEN_CLUSTER(prefix##_hd128_r64_cluster, T, 128, 1, 64)

// PKV_VARLEN_MODS defines one _mods entry over a flash-layout cache of type
// C (the queries' type, or e4m3): PKV_VARLEN's parameters, then the score
// modifiers; PKV_VARLEN_MODS_DM one for head dim DM on tiles of D.
#define PKV_VARLEN_MODS_DM(name, T, C, D, DM, MT, KEYS) PKV_VARLEN_MODS_L(name, T, C, D, DM, MT, KEYS, pkv::kLayoutFlash)
// PKV_VARLEN_MODS_L is PKV_VARLEN_MODS_DM over the entries of LAYOUT
// (kLayoutFlash, or kLayoutWG for the wgmma ones).
#define PKV_VARLEN_MODS_L(name, T, C, D, DM, MT, KEYS, LAYOUT)                                                   \
  extern "C" __global__ void __launch_bounds__(pkv::kVarlenThreads) name(                                  \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum, const T* q,           \
      const C* k_cache, const C* v_cache, const int* block_tables, const int* cu_seqlens_q,                 \
      const int* pos_offsets, unsigned long long* fault, int64_t q_token_stride, int64_t out_token_stride, \
      int64_t out_head_stride, int num_seqs, int total_q, int num_q_heads, int max_blocks_per_seq,         \
      int block_size_log2, int64_t num_blocks, int causal, int layout, float scale, float k_scale, float v_scale, \
      int cu_base, int seq_base, int one_pos, int split_blocks, int split_wave, int window, float softcap, \
      const float* sinks, const float* alibi) {                                                             \
    pkv::paged_varlen<T, C, D, MT, KEYS, LAYOUT, true, false, DM>(                                          \
        out, lse, partial_out, partial_max, partial_sum, q, k_cache, v_cache, block_tables, cu_seqlens_q,   \
        pos_offsets, fault, q_token_stride, out_token_stride, out_head_stride, num_seqs, total_q,          \
        num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks, causal, layout, scale, k_scale, v_scale, \
        cu_base, seq_base, one_pos, split_blocks, split_wave, window, softcap, sinks, alibi);               \
  }
#define PKV_VARLEN_MODS(name, T, C, D, MT, KEYS) PKV_VARLEN_MODS_DM(name, T, C, D, D, MT, KEYS)

// PKV_VARLEN_MODS_ALL defines the _mods twins of PKV_VARLEN_ALL's entries
// over a cache of type C (<prefix>_hd<D>[_r64]_mods; none of the _k64 one).
#define PKV_VARLEN_MODS_ALL(prefix, T, C)                    \
  PKV_VARLEN_MODS(prefix##_hd64_mods, T, C, 64, 2, 32)       \
  PKV_VARLEN_MODS(prefix##_hd128_mods, T, C, 128, 2, 32)     \
  PKV_VARLEN_MODS(prefix##_hd256_mods, T, C, 256, 1, 32)     \
  PKV_VARLEN_MODS(prefix##_hd64_r64_mods, T, C, 64, 1, 64)   \
  PKV_VARLEN_MODS(prefix##_hd128_r64_mods, T, C, 128, 1, 64)

// PKV_VARLEN_MORE_DIMS defines, for the head dims between the powers of
// two over a flash-layout cache of the queries' type, the entries of
// PKV_VARLEN_ALL (<prefix>_hd<D> and, below 128, <prefix>_hd<D>_r64), their
// _mods twins and the merges (<merge>_hd<D>). PKV_VARLEN_FP8_DIMS: the
// entries and _mods twins over a flash-layout fp8 e4m3 cache at 96 and 192
// (whole passes of widen_tile; 80 and 112 have none), merged by the 16-bit
// cache's merges.
#define PKV_VARLEN_MORE_ONE(prefix, T, C, D, MT)                     \
  PKV_VARLEN(prefix##_hd##D, T, C, D, MT, 32, pkv::kLayoutFlash)      \
  PKV_VARLEN_MODS(prefix##_hd##D##_mods, T, C, D, MT, 32)
#define PKV_VARLEN_MORE_DIM(prefix, merge, T, D, MT) \
  PKV_VARLEN_MORE_ONE(prefix, T, T, D, MT)           \
  PKV_VARLEN_MERGE(merge##_hd##D, T, D)
#define PKV_VARLEN_MORE_R64(prefix, T, C, D)                           \
  PKV_VARLEN(prefix##_hd##D##_r64, T, C, D, 1, 64, pkv::kLayoutFlash) \
  PKV_VARLEN_MODS(prefix##_hd##D##_r64_mods, T, C, D, 1, 64)
#define PKV_VARLEN_MORE_DIMS(prefix, merge, T) \
  PKV_VARLEN_MORE_DIM(prefix, merge, T, 80, 2)  \
  PKV_VARLEN_MORE_DIM(prefix, merge, T, 96, 2)  \
  PKV_VARLEN_MORE_DIM(prefix, merge, T, 112, 2) \
  PKV_VARLEN_MORE_DIM(prefix, merge, T, 192, 1) \
  PKV_VARLEN_MORE_R64(prefix, T, T, 80)         \
  PKV_VARLEN_MORE_R64(prefix, T, T, 96)         \
  PKV_VARLEN_MORE_R64(prefix, T, T, 112)
#define PKV_VARLEN_FP8_DIMS(prefix, T)                 \
  PKV_VARLEN_MORE_ONE(prefix, T, pkv::e4m3, 96, 2)     \
  PKV_VARLEN_MORE_ONE(prefix, T, pkv::e4m3, 192, 1)    \
  PKV_VARLEN_MORE_R64(prefix, T, pkv::e4m3, 96)

// PKV_VARLEN_PADDED defines <prefix>_hd<DM> and <prefix>_hd<DM>_r64 for
// head dim DM on tiles of D over a flash-layout cache of the queries' type,
// their _mods twins and the merge (<merge>_hd<DM>).
#define PKV_VARLEN_PADDED(prefix, merge, T, D, DM)                                        \
  PKV_VARLEN_DM(prefix##_hd##DM, T, T, D, DM, 2, 32, pkv::kLayoutFlash)                   \
  PKV_VARLEN_DM(prefix##_hd##DM##_r64, T, T, D, DM, 1, 64, pkv::kLayoutFlash)             \
  PKV_VARLEN_MODS_DM(prefix##_hd##DM##_mods, T, T, D, DM, 2, 32)                          \
  PKV_VARLEN_MODS_DM(prefix##_hd##DM##_r64_mods, T, T, D, DM, 1, 64)                      \
  PKV_VARLEN_MERGE(merge##_hd##DM, T, DM)

// PKV_VARLEN_MERGE defines one merge entry.
#define PKV_VARLEN_MERGE(name, T, D)                                                                        \
  extern "C" __global__ void __launch_bounds__(pkv::kVarlenThreads)                                        \
      name(T* out, float* lse, const float* partial_out, const float* partial_max, const float* partial_sum, \
           const int* cu_seqlens_q, int64_t out_token_stride, int64_t out_head_stride, int num_seqs, int rows, \
           int num_q_heads, int splits, int cu_base) {                                                      \
    pkv::varlen_merge<T, D>(out, lse, partial_out, partial_max, partial_sum, cu_seqlens_q, out_token_stride, \
                            out_head_stride, num_seqs, rows, num_q_heads, splits, cu_base);                 \
  }

// PKV_VARLEN_ALL defines <prefix>_hd<D> for every head dim and
// <prefix>_hd<D>_r64 below 256 (see VarlenConfig).
#define PKV_VARLEN_ALL(prefix, T, C)                                       \
  PKV_VARLEN(prefix##_hd64, T, C, 64, 2, 32, pkv::kLayoutFlash)             \
  PKV_VARLEN(prefix##_hd128, T, C, 128, 2, 32, pkv::kLayoutFlash)           \
  PKV_VARLEN(prefix##_hd256, T, C, 256, 1, 32, pkv::kLayoutFlash)           \
  PKV_VARLEN(prefix##_hd64_r64, T, C, 64, 1, 64, pkv::kLayoutFlash)         \
  PKV_VARLEN(prefix##_hd128_r64, T, C, 128, 1, 64, pkv::kLayoutFlash)

// PKV_VARLEN_LAYOUT_ALL defines the entries of PKV_VARLEN_ALL over a cache
// of type C (T or e4m3) in the x-split and shuffle layouts, each name
// ending in _<layout>.
#define PKV_VARLEN_LAYOUT(prefix, T, C, L, LAYOUT)                     \
  PKV_VARLEN(prefix##_hd64_##L, T, C, 64, 2, 32, LAYOUT)               \
  PKV_VARLEN(prefix##_hd128_##L, T, C, 128, 2, 32, LAYOUT)             \
  PKV_VARLEN(prefix##_hd256_##L, T, C, 256, 1, 32, LAYOUT)             \
  PKV_VARLEN(prefix##_hd64_r64_##L, T, C, 64, 1, 64, LAYOUT)           \
  PKV_VARLEN(prefix##_hd128_r64_##L, T, C, 128, 1, 64, LAYOUT)
#define PKV_VARLEN_LAYOUT_ALL(prefix, T, C)                        \
  PKV_VARLEN_LAYOUT(prefix, T, C, xsplit, pkv::kLayoutXSplit)      \
  PKV_VARLEN_LAYOUT(prefix, T, C, shuffle, pkv::kLayoutShuffle)

// PKV_VARLEN_K64 defines <prefix>_hd128_k64 over a cache of type T in
// the flash layout, and PKV_VARLEN_LAYOUT_K64 <prefix>_hd128_k64_<layout>
// in the x-split and shuffle layouts (see VarlenConfig).
#define PKV_VARLEN_K64(prefix, T) PKV_VARLEN(prefix##_hd128_k64, T, T, 128, 2, 64, pkv::kLayoutFlash)
// PKV_VARLEN_WG_ALL defines the wgmma entries (kLayoutWG; _sm90a modules)
// over a flash- or HND-layout cache of the queries' type: <prefix>_hd64_wg
// and <prefix>_hd128_wg, 64 rows and 64-key tiles, PKV_VARLEN's parameters,
// and their _mods twins (PKV_VARLEN_MODS's parameters).
#define PKV_VARLEN_WG_ALL(prefix, T)                                                   \
  PKV_VARLEN(prefix##_hd64_wg, T, T, 64, 1, 64, pkv::kLayoutWG)                         \
  PKV_VARLEN(prefix##_hd128_wg, T, T, 128, 1, 64, pkv::kLayoutWG)                       \
  PKV_VARLEN_MODS_L(prefix##_hd64_wg_mods, T, T, 64, 64, 1, 64, pkv::kLayoutWG)         \
  PKV_VARLEN_MODS_L(prefix##_hd128_wg_mods, T, T, 128, 128, 1, 64, pkv::kLayoutWG)
#define PKV_VARLEN_LAYOUT_K64(prefix, T)                                     \
  PKV_VARLEN(prefix##_hd128_k64_xsplit, T, T, 128, 2, 64, pkv::kLayoutXSplit) \
  PKV_VARLEN(prefix##_hd128_k64_shuffle, T, T, 128, 2, 64, pkv::kLayoutShuffle)

// PKV_VARLEN_MERGE_ALL defines <prefix>_hd<D> for every head dim.
#define PKV_VARLEN_MERGE_ALL(prefix, T) \
  PKV_VARLEN_MERGE(prefix##_hd64, T, 64) \
  PKV_VARLEN_MERGE(prefix##_hd128, T, 128) \
  PKV_VARLEN_MERGE(prefix##_hd256, T, 256)
