// decode.cuh: batched paged decode attention, one query token per sequence,
// single-pass and split-K (phase 1 and the fused phase 2), grouped by KV head,
// on tensor cores (mma.sync m16n8k16).
//
// paged_decode_<q>[_e4m3]_hd<D>, and paged_decode_<q>[_e4m3]_hd<D>_g8
// (narrow: GQA groups up to kNarrowGroup = 8, see below)
//   q            [num_seqs, num_q_heads, D] of type <q>, sequence stride q_seq_stride
//                elements (heads contiguous).
//   k_cache,     flash layout [num_blocks, block_size, num_kv_heads, D] of type <q>,
//   v_cache      or fp8 e4m3 (real value = stored · k_scale / v_scale) for _e4m3;
//                the layout parameter names the layout (cache.cuh: flash,
//                x-split, shuffle or HND, as LAYOUTS below allows).
//   block_tables int32 [num_seqs, max_blocks_per_seq]; kv_lens int32 [num_seqs].
//                Both are read on the device. kv_len is kv_lens[s] + kv_bias
//                (kv_bias 0, or 1 when kv_lens is a mixed varlen batch's
//                pos_offsets: its decode rows attend pos_offset + 1
//                positions, and a fault names the offset; a sum past
//                INT_MAX reads INT_MAX), clamped to
//                max_blocks_per_seq·block_size and a block id outside
//                [0, num_blocks) reads block 0; either is recorded in fault.
//   Single-pass (partial_out == null): out [num_seqs, num_q_heads, D] of <q>
//                and, when lse != null, lse [num_seqs, num_q_heads] f32
//                (natural log of the sum of exp(scale·q·k); -inf for kv_len 0,
//                whose output is zeros).
//   Split-K (gridDim.z = splits > 1, at most kMaxSplits): split z covers
//                whole pages [z·c, (z+1)·c) with c = ceil(pages / splits),
//                derived from this sequence's own kv_len. Phase 1: each block
//                writes f32 partial_out [num_seqs, num_q_heads, splits, D]
//                (normalized by its own sum), partial_max (log2 units, -inf
//                when empty) and partial_sum [num_seqs, num_q_heads, splits].
//                Phase 2, in the same launch: the last block of each
//                (sequence, KV head) to finish, counted in counters
//                [num_seqs, num_kv_heads] (uint32, zero before the launch and
//                reset to zero by that block), merges the splits by
//                log-sum-exp into out and lse.
// Grid: (num_kv_heads, num_seqs, splits). Block: 128 threads (4 warps), and
// dynamic shared memory for q and 2 to 4 ring stages (DecodeSmem; the size
// comes from dispatch.DecodeSharedBytes).
//
// How a block works. The G = num_q_heads/num_kv_heads query heads of its KV
// head are the 16 rows of an mma A tile (rows ≥ G are zero), so one block
// reads each K/V row once for the whole group. The block's tokens are cut into
// tiles of 16; warp w takes tiles w, w+4, ... and streams them through its own
// ring of 2 to 4 shared-memory stages with cp.async (DecodeTiles: K and V
// rows of one tile per stage; 16-byte chunks XOR-swizzled per row so
// ldmatrix is free of bank conflicts). Per tile (attend_tiles, wide_tile):
// S = Q·Kᵀ (16 × 16, f32; wide_scores), an online softmax per row
// (wide_softmax), O += P·V with P rounded to <q> (wide_pv). The four warps
// merge (max, sum, O) through shared memory at the end (stash_warp,
// merge_warps), and split-K blocks then merge their splits (cluster_merge,
// global_merge).
//
// The narrow kernels (NARROW) turn both products around for groups up to 8,
// whose heads would leave at least half of the 16 rows empty: Sᵀ = K·Qᵀ
// (16 tokens × 8 heads; A = the K rows as stored, B = q kept in registers),
// an online softmax down each column, then Oᵀ += Vᵀ·Pᵀ (D × 8) with Pᵀ made
// the B operand by movmatrix.trans of its two 8 × 8 halves and A = Vᵀ from
// the same transposing loads of V (narrow_tile: narrow_scores,
// narrow_softmax, narrow_pv). Half the mma work and half the output
// registers; the ring, the merge and everything else are shared.
//
// fp8 caches are read by ldmatrix as 16-bit pairs and widened to <q> in
// registers (the e4m3 → half move of common.cuh, exact). That fixes which d
// each lane holds: for QKᵀ a lane gets 4 consecutive bytes of a K row, so the
// k order inside each 16-wide k-step is permuted (k = 2c+e ↔ d = 4c+e,
// k = 8+2c+e ↔ d = 4c+2+e), and q is stored in shared memory in that order;
// for P·V a lane gets 2 bytes (d = 2n, 2n+1) of two tokens, so each 16-byte
// chunk of V feeds two n-tiles, the even and the odd d.
//
// paged_decode_<q>[_e4m3]_hd<D>[_g8]_mods take score modifiers after the plain
// parameters: window (> 0: the query at position p = kv_len − 1 reads keys
// p − window + 1 … p only; splits cut the window's pages, and the first
// split starts at the 16-token tile that holds its first key), softcap
// (> 0: s = softcap·tanh(s/softcap) on the scaled score), sinks (f32
// [num_q_heads] or null: exp(sink) joins each head's denominator; the
// first split adds it), alibi (f32 [num_q_heads] or null: s +=
// slope·(key − p)). Every layout; never clusters.
#pragma once
#include "cache.cuh"
#include "mma.cuh"

namespace pkv {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kTileTokens = 16;  // tokens per warp tile: the k of P·V
constexpr int kTileRows = 16;    // query-head rows of the mma tile: G ≤ 16
// The largest split count: the fused merge keeps kTileRows·kMaxSplits
// weights and sums in shared memory.
constexpr int kMaxSplits = 64;

// The cache layouts a decode entry reads (its LAYOUTS): every layout,
// chosen at run time by its layout parameter, or the flash rows only (the
// flash and HND layouts, read by the same loaders: HeadRows).
// The fp8 kernels come in both builds, the first named _laid and run for
// the x-split and shuffle layouts: with both main loops the flash
// layout's fp8 rows ran 1–2.6% slower than a flash-only build, and a build
// with the x-split and shuffle loop only ran those layouts 1–3.8% slower
// than the one with both (same H200 call, 2026-12-02); the 16-bit kernels
// and every _mods kernel (fp8 ones too) have the first build only.
constexpr int kLayoutsAny = 0, kLayoutsFlash = 1;

// vt_chunk returns the position, in 16-byte chunks, of chunk h (tokens
// 8h … 8h+7) of row d of a transposed V tile in the x-split layout (see
// paged_decode): two chunks a row, swapped every 4 rows so that the 8 rows
// an ldmatrix matrix reads hit distinct banks. vt_at<D> returns it for
// either layout: the shuffle layout's tile is h-major, chunk h·D + d.
// Either way the two 16-byte halves of a 32-byte sector of the cache land
// side by side: cp.async splits a sector whose halves land apart into two
// requests (Nsight Compute on the H200: a lane-per-row K tile reads 32
// sectors and writes 32 shared wavefronts per instruction instead of 16
// and 4, and decode runs at 77% of copy).
__device__ __forceinline__ int vt_chunk(int d, int h) { return 2 * d + (h ^ ((d >> 2) & 1)); }
template <int D>
__device__ __forceinline__ int vt_at(bool xsplit, int d, int h) {
  return xsplit ? vt_chunk(d, h) : h * D + d;
}

// fp8 caches in the x-split and shuffle layouts land V transposed too, one
// 16-byte row per element d (the tile's 16 tokens), read by plain
// ldmatrix: lane (g, c) gets tokens 4c … 4c+3 of a row, where an mma k
// step wants k slots 2c, 2c+1 (bytes 0-1) and 2c+8, 2c+9 (bytes 2-3). So
// k slot ρ holds token fp8_token(ρ) (4c+e for ρ = 2c+e, 4c+2+e for ρ =
// 8+2c+e), and K's tile row ρ must be that token too. K's pieces land with
// token t of a piece at slot fp8_slot(t) (tokens 8-15 swap pairs of
// pairs), so each 128-byte line of the cache (8 tokens) lands in one
// 128-byte line of shared memory, and ldmatrix reads tile row ρ from slot
// fp8_slot(fp8_token(ρ)): the 8 rows of a matrix fall in 8 distinct bank
// groups.
__device__ __forceinline__ int fp8_token(int rho) { return ((rho & 6) << 1) | (rho & 1) | ((rho >> 2) & 2); }
__device__ __forceinline__ int fp8_slot(int t) { return t ^ ((t >> 2) & 2); }

// DecodeSmem describes the dynamic shared memory of a block: q as <q>
// (kTileRows × D, 16-bit), then a ring of 2 to 4 cp.async stages, as many as
// the launch's dynamic shared memory holds (dispatch.DecodeSharedBytes picks
// the size per device). At the end the ring holds the warps' f32 outputs and
// then the split weights.
template <typename C, int D>
struct DecodeSmem {
  static constexpr int kRowBytes = D * (int)sizeof(C);
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks per K/V row
  static constexpr int kTileBytes = kTileTokens * kRowBytes;
  static constexpr int kStageBytes = kDecodeWarps * 2 * kTileBytes;  // K and V of every warp
  static constexpr int kQBytes = kTileRows * D * 2;
  static constexpr int kMaxStages = 4;
  static_assert(2 * kStageBytes >= kDecodeWarps * kTileRows * D * 4, "warp outputs must fit in 2 stages");
  static_assert(2 * kStageBytes >= kTileRows * kMaxSplits * 4, "the merge's weights must fit in 2 stages");
};

// cluster_merge is split-K phase 2 on chip, for launches whose splits of a
// (sequence, KV head) form one thread-block cluster (cluster dims 1 × 1 ×
// splits, so the cluster rank is the split). Each block holds its split's
// normalized output in o[g·D + d] and its max (log2 units) and sum per head
// in m[g] and l[g]. After a cluster barrier, block z merges its share of the
// G·D outputs (a contiguous 1/splits of them), reading every split's values
// through distributed shared memory, by log-sum-exp into out (and lse). The
// second barrier keeps every block's shared memory alive until all are done.
template <typename T, int D>
__device__ __forceinline__ void cluster_merge(T* __restrict__ out, float* __restrict__ lse, const float* o,
                                              const float* m, const float* l, int seq, int kvh, int G,
                                              int num_q_heads, int split, int splits) {
  constexpr int kMaxClusterSplits = 8;
  cluster_sync();
  const int share = (G * D + splits - 1) / splits;
  const int end = min(G * D, (split + 1) * share);
  for (int i = split * share + (int)threadIdx.x; i < end; i += kDecodeThreads) {
    const int g = i / D;
    const int d = i - g * D;
    float mz[kMaxClusterSplits], oz[kMaxClusterSplits], lz[kMaxClusterSplits];
#pragma unroll
    for (int z = 0; z < kMaxClusterSplits; ++z) {
      mz[z] = -INFINITY;
      lz[z] = oz[z] = 0.0f;
      if (z < splits) {
        mz[z] = cluster_load(m + g, z);
        lz[z] = cluster_load(l + g, z);
        oz[z] = cluster_load(o + i, z);
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int z = 0; z < kMaxClusterSplits; ++z) mx = fmaxf(mx, mz[z]);
    float sum = 0.0f, acc = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int z = 0; z < kMaxClusterSplits; ++z) {
        const float w = lz[z] * exp2f(mz[z] - mx);  // 0 for an empty split
        sum += w;
        acc = fmaf(w, oz[z], acc);
      }
    }
    const int64_t row = (int64_t)seq * num_q_heads + kvh * G + g;
    out[row * D + d] = from_float<T>(sum > 0.0f ? acc / sum : 0.0f);
    if (d == 0 && lse != nullptr) lse[row] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
  }
  cluster_sync();
}

// atomic_add_acq_rel adds v to *p at GPU scope as a release and an
// acquire (atom.acq_rel.gpu) and returns the old value. After a block
// barrier, one thread's release covers the writes of every thread of the
// block (the barrier orders them before it), and its acquire, followed by a
// barrier, covers the reads of every thread after it: the pattern of
// cooperative groups' grid sync, with a lighter fence than __threadfence's
// sequentially consistent one (MEMBAR.ALL against MEMBAR.SC on sm_90:
// seqs=1, kv=32768 41.5 → 41.0 µs, H200, 2026-12-02).
__device__ __forceinline__ unsigned int atomic_add_acq_rel(unsigned int* p, unsigned int v) {
  unsigned int old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// global_merge is split-K phase 2 in global memory, run by the last block of
// a (sequence, KV head) to finish: it merges the splits' partial rows of its
// G heads by log-sum-exp into out and lse. prow0 is the partial row of split
// 0, head 0, row0 the output row of head 0. A warp per head turns the
// splits' maxima and sums into weights by shuffles (w_s, and the head's max
// and total in m_tot and l_tot) while the first batch of rows is on its
// way; then each float4 column of the output (4 consecutive d of a head)
// goes to tpi adjacent lanes, each adding every tpi-th split with
// kMergeBatch 16-byte loads in flight, and the lanes add up by shuffles
// (tpi > 1 only where the G·D/4 columns leave threads idle). Each batch
// costs an L2 round trip (32 splits at G·D = 512: 4 batches, about 2 µs).
// 16 loads in flight, all rows staged at once, or the columns spread over
// several merging blocks are no faster (H200, 2026-12-02): the merge is a
// chain of round trips, not bound by one SM's L2 rate.
template <typename T, int D>
__device__ __forceinline__ void global_merge(T* __restrict__ out, float* __restrict__ lse,
                                             const float* __restrict__ partial_out,
                                             const float* __restrict__ partial_max,
                                             const float* __restrict__ partial_sum, int64_t prow0, int64_t row0,
                                             int num_q_heads, int G, int splits, float* w_s, float* m_tot,
                                             float* l_tot) {
  constexpr int kMergeBatch = 8;
  constexpr int C4 = D / 4;
  const int columns = G * C4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int tpi = 1;
  while (tpi < 32 && 2 * tpi * columns <= kDecodeThreads && 2 * tpi <= splits) tpi *= 2;
  const int sub = threadIdx.x & (tpi - 1);
  const int batches = ((splits + tpi - 1) / tpi + kMergeBatch - 1) / kMergeBatch;
  const int64_t z_stride = (int64_t)num_q_heads * D;  // floats between a row's splits
  float4 v[kMergeBatch];
  auto load = [&](int c, int b) {
    const int g = c / C4;
    const float* po = partial_out + (prow0 + g) * D + (c - g * C4) * 4;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const int z = sub + (b * kMergeBatch + u) * tpi;
      if (c < columns && z < splits) v[u] = __ldcg(reinterpret_cast<const float4*>(po + z * z_stride));
    }
  };
  load((int)threadIdx.x / tpi, 0);
  for (int g = warp; g < G; g += kDecodeWarps) {
    float m[2], s[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int z = lane + 32 * h;
      m[h] = z < splits ? __ldcg(partial_max + prow0 + (int64_t)z * num_q_heads + g) : -INFINITY;
      s[h] = z < splits ? __ldcg(partial_sum + prow0 + (int64_t)z * num_q_heads + g) : 0.0f;
    }
    float mx = fmaxf(m[0], m[1]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float tot = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float w = mx == -INFINITY ? 0.0f : s[h] * exp2f(m[h] - mx);  // 0 for an empty split
      if (lane + 32 * h < splits) w_s[g * kMaxSplits + lane + 32 * h] = w;
      tot += w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    if (lane == 0) {
      m_tot[g] = mx;
      l_tot[g] = tot;
    }
  }
  __syncthreads();
  // Every thread runs the same passes, so the shuffles below see whole warps.
  for (int base = 0; base < columns; base += kDecodeThreads / tpi) {
    const int c = base + (int)threadIdx.x / tpi;
    const int g = min(c, columns - 1) / C4;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int b = 0; b < batches; ++b) {
      if (b > 0 || base > 0) load(c, b);
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        const int z = sub + (b * kMergeBatch + u) * tpi;
        if (c < columns && z < splits) {
          const float w = w_s[g * kMaxSplits + z];
          o.x = fmaf(w, v[u].x, o.x);
          o.y = fmaf(w, v[u].y, o.y);
          o.z = fmaf(w, v[u].z, o.z);
          o.w = fmaf(w, v[u].w, o.w);
        }
      }
    }
    for (int x = tpi / 2; x > 0; x >>= 1) {
      o.x += __shfl_xor_sync(0xffffffffu, o.x, x);
      o.y += __shfl_xor_sync(0xffffffffu, o.y, x);
      o.z += __shfl_xor_sync(0xffffffffu, o.z, x);
      o.w += __shfl_xor_sync(0xffffffffu, o.w, x);
    }
    if (sub == 0 && c < columns) {
      const float sum = l_tot[g];
      const int d = (c - g * C4) * 4;
      T* dst = out + (row0 + g) * D + d;
      dst[0] = from_float<T>(sum > 0.0f ? o.x / sum : 0.0f);
      dst[1] = from_float<T>(sum > 0.0f ? o.y / sum : 0.0f);
      dst[2] = from_float<T>(sum > 0.0f ? o.z / sum : 0.0f);
      dst[3] = from_float<T>(sum > 0.0f ? o.w / sum : 0.0f);
      if (d == 0 && lse != nullptr) lse[row0 + g] = sum > 0.0f ? (m_tot[g] + log2f(sum)) * kLn2 : -INFINITY;
    }
  }
}

// kNarrowGroup is the largest GQA group of the narrow kernels (NARROW): the
// group's heads are the 8 columns of the mma tile instead of 8 of its 16 rows.
constexpr int kNarrowGroup = 8;

// WorkItem is what one block of a decode launch computes: split `split` of
// the `splits` splits of sequence `seq`. Its partial rows are those of item
// first + split (the sequence's items are consecutive from first).
struct WorkItem {
  int seq, split, splits, first;
};

// block_scan_add returns the inclusive prefix sum of x over the block's
// threads (in threadIdx order) and the block's total in *total; tmp holds
// kDecodeWarps ints of shared memory. Every thread must call it.
__device__ __forceinline__ int block_scan_add(int x, int* tmp, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();  // tmp may still be read by the previous call
  if (lane == 31) tmp[warp] = x;
  __syncthreads();
  int before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) {
    before += w < warp ? tmp[w] : 0;
    all += tmp[w];
  }
  *total = all;
  return x + before;
}

// kv_length is a sequence's KV length from its kv_lens entry n and the
// launch's kv_bias (0 or 1, see the top): n + kv_bias, INT_MAX where that
// passes INT_MAX (the callers clamp it to the table and record the fault).
__device__ __forceinline__ int kv_length(int n, int kv_bias) {
  constexpr int kIntMax = 0x7fffffff;
  return n > kIntMax - kv_bias ? kIntMax : n + kv_bias;
}

// partition_work writes the work list of a balanced decode (one block of
// kDecodeThreads; see decode_partition in partition.cu): work[y] = (seq,
// split, splits, first) for each of the items y, splits = 0 for an unused
// one. wave is how many items run at once per KV head (the device's block
// slots / num_kv_heads). Sequence s gets n_s(c) = clamp(⌈pages_s/c⌉, 1,
// kMaxSplits) splits of at most c pages, c ≥ min_pages. A batch of fewer
// sequences than a wave runs in one wave: items = wave, and c is the
// smallest that keeps Σ n_s ≤ items (a binary search), so the wave is as
// full as the lengths allow and no block waits. A larger batch gets c =
// ⌈P / wave⌉ (P: the batch's pages), one slot's share, and items ≥ num_seqs
// + wave ≥ P/c + num_seqs ≥ Σ n_s. Items are ordered longest first, for the
// greedy block scheduler: the splits of the sequences cut in several (each
// about c pages), then whole sequences of more than c/2 pages, more than
// c/4, and the rest; then the unused items.
__device__ __forceinline__ void partition_work(int4* __restrict__ work, const int* __restrict__ kv_lens,
                                               int kv_bias, int num_seqs, int items, int wave, int cap,
                                               int block_size_log2, int min_pages) {
  __shared__ int tmp[kDecodeWarps];
  const int bs_mask = (1 << block_size_log2) - 1;
  auto pages_of = [&](int s) -> int {
    const int len = min(max(kv_length(__ldg(kv_lens + s), kv_bias), 0), cap);
    return (len + bs_mask) >> block_size_log2;
  };
  // Thread t's sequences t + kDecodeThreads·k, k < kCached, keep their page
  // counts in registers: the binary search below passes over every sequence
  // once per step, and kv_lens' load latency would be each step's cost. Sequences
  // past them (batches over kCached·kDecodeThreads) are read again each time.
  constexpr int kCached = 4;
  int cached[kCached];
#pragma unroll
  for (int k = 0; k < kCached; ++k) {
    const int s = (int)threadIdx.x + kDecodeThreads * k;
    cached[k] = s < num_seqs ? pages_of(s) : 0;
  }
  // sum_over(f) returns Σ f(s, pages of s) over this thread's sequences.
  auto sum_over = [&](auto f) -> int {
    int n = 0;
#pragma unroll
    for (int k = 0; k < kCached; ++k) {
      const int s = (int)threadIdx.x + kDecodeThreads * k;
      if (s < num_seqs) n += f(cached[k]);
    }
    for (int s = (int)threadIdx.x + kDecodeThreads * kCached; s < num_seqs; s += kDecodeThreads) n += f(pages_of(s));
    return n;
  };
  int total;
  block_scan_add(sum_over([](int p) { return p; }), tmp, &total);
  auto splits_for = [&](int p, int c) -> int { return min(max((p + c - 1) / c, 1), kMaxSplits); };
  int c = max(min_pages, (total + max(wave, 1) - 1) / max(wave, 1));
  if (num_seqs < wave) {
    // Smallest c in [min_pages, max(P, min_pages)] with Σ n_s(c) ≤ items;
    // the upper end gives every sequence one split.
    int lo = min_pages, hi = max(total, min_pages);
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      int used;
      block_scan_add(sum_over([&](int p) { return splits_for(p, mid); }), tmp, &used);
      if (used <= items) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    c = lo;
  }
  // The class of a sequence of p pages: 0 cut in splits, 1..3 whole by
  // falling size.
  auto class_of = [&](int p, int n) -> int { return n > 1 ? 0 : 2 * p > c ? 1 : 4 * p > c ? 2 : 3; };
  int next = 0;  // items written so far (the same in every thread)
  for (int cls = 0; cls < 4; ++cls) {
    for (int k = 0, base = 0; base < num_seqs; ++k, base += kDecodeThreads) {
      const int s = base + (int)threadIdx.x;
      int p = 0;
#pragma unroll
      for (int q = 0; q < kCached; ++q) p = k == q ? cached[q] : p;
      if (k >= kCached && s < num_seqs) p = pages_of(s);
      const int n = s < num_seqs ? splits_for(p, c) : 0;
      const bool mine = s < num_seqs && class_of(p, n) == cls;
      int chunk;
      const int end = next + block_scan_add(mine ? n : 0, tmp, &chunk);
      if (mine) {
        for (int z = 0; z < n && end - n + z < items; ++z) work[end - n + z] = make_int4(s, z, n, end - n);
      }
      next += chunk;
    }
  }
  for (int y = next + threadIdx.x; y < items; y += kDecodeThreads) work[y] = make_int4(0, 0, 0, 0);
}

// The products of one warp tile (16 tokens), per kernel family and cache
// layout family (LAID: x-split or shuffle, whose K tile is piece-major and
// whose V tile is transposed; fp8 K lands in the fp8_slot order). Each reads
// its tiles from the warp's stage at kbase / vbase with ldmatrix; x4_row
// is the lane's ldmatrix x4 row (0-7, 8-15, 0-7, 8-15) and k_slot the slot
// of that row in a LAID fp8 K piece.

// narrow_scores accumulates Sᵀ = K·Qᵀ of a narrow kernel: rows are the
// tile's 16 tokens (A = K rows as stored), columns the group's heads (B =
// qb, Qᵀ's fragments per k-step); even k-steps into st, odd ones into
// st_odd (two chains).
template <typename T, typename C, int D, bool LAID>
__device__ __forceinline__ void narrow_scores(float (&st)[4], float (&st_odd)[4], uint32_t kbase,
                                              const uint32_t (*qb)[2], int lane, int x4_row, int k_slot) {
  constexpr bool kFP8 = sizeof(C) == 1;
  constexpr int CH = DecodeSmem<C, D>::kChunks;
  constexpr int KSTEPS = D / 16;
  if constexpr (!kFP8) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      uint32_t a[4];
      const int c = 2 * ks + (lane >> 4);
      ldmatrix_x4(a, kbase + (LAID ? c * 16 + x4_row : swizzle<CH>(x4_row, c)) * 16);
      mma16816<T>(ks & 1 ? st_odd : st, a, qb[ks][0], qb[ks][1]);
    }
  } else {
    // A 16-byte fp8 chunk is one k-step: lane (g, c) holds bytes 4c..4c+3
    // (d = 4c+e, in q's permuted k order) of tokens g and g+8; one x4
    // load covers chunks ks and ks+1.
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks += 2) {
      uint32_t r[4];
      const int c = ks + (lane >> 4);
      ldmatrix_x4(r, kbase + (LAID ? c * 16 + k_slot : swizzle<CH>(x4_row, c)) * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a[4] = {e4m3_pair<T>(r[2 * h], 0x1404), e4m3_pair<T>(r[2 * h + 1], 0x1404),
                               e4m3_pair<T>(r[2 * h], 0x3424), e4m3_pair<T>(r[2 * h + 1], 0x3424)};
        mma16816<T>(h ? st_odd : st, a, qb[ks + h][0], qb[ks + h][1]);
      }
    }
  }
}

// narrow_pv accumulates Oᵀ += Vᵀ·Pᵀ of a narrow kernel into acc (D/16
// m-tiles of d × heads); b0 and b1 are Pᵀ's B fragments (tokens 0-7 and
// 8-15 in the tile's k order).
template <typename T, typename C, int D, bool LAID>
__device__ __forceinline__ void narrow_pv(float (*acc)[4], uint32_t vbase, uint32_t b0, uint32_t b1, int lane,
                                          int x4_row, int layout) {
  constexpr bool kFP8 = sizeof(C) == 1;
  constexpr int CH = DecodeSmem<C, D>::kChunks;
  constexpr int ACC = D / 16;
  // A = Vᵀ, m-tile m (d 16m..16m+15): x4.trans of tokens 0-7 and 8-15,
  // d chunks 2m and 2m+1.
  if constexpr (LAID && kFP8) {
    // Vᵀ rows of 16 tokens: one x4 load is m-tiles m and m+1 (rows
    // 16m + l); bytes 0-1 of a word are k slots 2c, 2c+1, bytes 2-3
    // slots 2c+8, 2c+9 (see fp8_token).
#pragma unroll
    for (int m = 0; m < ACC; m += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, vbase + (16 * m + lane) * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a[4] = {e4m3_pair<T>(r[2 * h], 0x1404), e4m3_pair<T>(r[2 * h + 1], 0x1404),
                               e4m3_pair<T>(r[2 * h], 0x3424), e4m3_pair<T>(r[2 * h + 1], 0x3424)};
        mma16816<T>(acc[m + h], a, b0, b1);
      }
    }
  } else if constexpr (LAID) {
    // Vᵀ as stored: m-tile m is rows 16m … 16m+15, chunk 0 (tokens 0-7)
    // then 1; lane l reads row 16m + x4_row, chunk l/16.
    const bool xsplit = layout == kLayoutXSplit;
    const uint32_t vt_lane = vbase + vt_at<D>(xsplit, x4_row, lane >> 4) * 16;
    const int vt_m = xsplit ? 32 * 16 : 16 * 16;  // bytes from m-tile m to m+1
#pragma unroll
    for (int m = 0; m < ACC; ++m) {
      uint32_t a[4];
      ldmatrix_x4(a, vt_lane + m * vt_m);
      mma16816<T>(acc[m], a, b0, b1);
    }
  } else if constexpr (!kFP8) {
    const int v_row = (lane & 7) + (lane >> 4) * 8;
#pragma unroll
    for (int m = 0; m < ACC; ++m) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, vbase + swizzle<CH>(v_row, 2 * m + ((lane >> 3) & 1)) * 16);
      mma16816<T>(acc[m], a, b0, b1);
    }
  } else {
    // fp8: m-tile m is V chunk m (16 d) with rows g ↔ d = 16m+2g and
    // g+8 ↔ d = 16m+2g+1: the x4.trans load gives lane (g, c) the bytes
    // of d 2g, 2g+1 of tokens 2c, 2c+1 (and 8+2c, 9+2c), whose even and
    // odd bytes are the two row halves of the A fragment.
#pragma unroll
    for (int m = 0; m < ACC; m += 2) {
      uint32_t r[4];
      ldmatrix_x4_trans(r, vbase + swizzle<CH>(x4_row, m + (lane >> 4)) * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a[4] = {e4m3_pair<T>(r[2 * h], 0x2404), e4m3_pair<T>(r[2 * h], 0x3414),
                               e4m3_pair<T>(r[2 * h + 1], 0x2404), e4m3_pair<T>(r[2 * h + 1], 0x3414)};
        mma16816<T>(acc[m + h], a, b0, b1);
      }
    }
  }
}

// wide_scores accumulates S = Q·Kᵀ of a wide kernel: n-tile 0 is tokens
// 0-7 of the tile, n-tile 1 tokens 8-15 (LAID fp8: in fp8_token order); q's
// A fragments come from qa (Q_IN_REGS) or from q_s at q_base.
template <typename T, typename C, int D, bool LAID, bool Q_IN_REGS>
__device__ __forceinline__ void wide_scores(float (&s)[2][4], uint32_t kbase, uint32_t q_base,
                                            const uint32_t (*qa)[4], int lane, int x4_row, int k_slot) {
  constexpr bool kFP8 = sizeof(C) == 1;
  constexpr bool kQInRegs = Q_IN_REGS;
  constexpr int CH = DecodeSmem<C, D>::kChunks;
  constexpr int QCH = D / 8;
  constexpr int KSTEPS = D / 16;
  if constexpr (!kFP8) {
    const int k_row = (lane & 7) + (lane >> 4) * 8;  // matrices: tokens 0-7, 0-7, 8-15, 8-15
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      uint32_t a[4], b[4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = qa[ks][e];
      } else {
        ldmatrix_x4(a, q_base + swizzle<QCH>(x4_row, 2 * ks + (lane >> 4)) * 16);
      }
      const int c = 2 * ks + ((lane >> 3) & 1);
      ldmatrix_x4(b, kbase + (LAID ? c * 16 + k_row : swizzle<CH>(k_row, c)) * 16);
      mma16816<T>(s[0], a, b[0], b[1]);
      mma16816<T>(s[1], a, b[2], b[3]);
    }
  } else {
    // A 16-byte fp8 chunk is one k-step; one x4 load covers two, both n-tiles.
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks += 2) {
      uint32_t b[4];
      const int c = ks + (lane >> 4);
      ldmatrix_x4(b, kbase + (LAID ? c * 16 + k_slot : swizzle<CH>(x4_row, c)) * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t a[4];
        ldmatrix_x4(a, q_base + swizzle<QCH>(x4_row, 2 * (ks + h) + (lane >> 4)) * 16);
        mma16816<T>(s[0], a, e4m3_pair<T>(b[2 * h], 0x1404), e4m3_pair<T>(b[2 * h], 0x3424));
        mma16816<T>(s[1], a, e4m3_pair<T>(b[2 * h + 1], 0x1404), e4m3_pair<T>(b[2 * h + 1], 0x3424));
      }
    }
  }
}

// wide_pv accumulates O += P·V of a wide kernel into acc (D/8 n-tiles);
// p is P's A fragment (rows r0 and r1, the tile's 16 tokens).
template <typename T, typename C, int D, bool LAID>
__device__ __forceinline__ void wide_pv(float (*acc)[4], const uint32_t (&p)[4], uint32_t vbase, int lane,
                                        int x4_row, int layout) {
  constexpr bool kFP8 = sizeof(C) == 1;
  constexpr int CH = DecodeSmem<C, D>::kChunks;
  constexpr int NT = D / 8;
  // O += P·V: one x4.trans load gives the B fragments of two n-tiles.
  if constexpr (LAID && kFP8) {
    // Vᵀ rows of 16 tokens: one x4 load is n-tiles n … n+3 (rows 8n +
    // l), each a whole k step (see fp8_token).
#pragma unroll
    for (int n = 0; n < NT; n += 4) {
      uint32_t b[4];
      ldmatrix_x4(b, vbase + (8 * n + lane) * 16);
#pragma unroll
      for (int u = 0; u < 4; ++u) mma16816<T>(acc[n + u], p, e4m3_pair<T>(b[u], 0x1404), e4m3_pair<T>(b[u], 0x3424));
    }
  } else if constexpr (LAID) {
    // Vᵀ as stored: n-tile n is rows 8n … 8n+7; lane l reads row
    // 8n + l%8 + 8·(l/16) (n-tiles n, n+1), chunk (l/8)%2.
    const int vt_row = (lane & 7) + (lane >> 4) * 8;
    const bool xsplit = layout == kLayoutXSplit;
    const uint32_t vt_lane = vbase + vt_at<D>(xsplit, vt_row, (lane >> 3) & 1) * 16;
    const int vt_n = xsplit ? 16 * 16 : 8 * 16;  // bytes from n-tile n to n+1
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, vt_lane + n * vt_n);
      mma16816<T>(acc[n], p, b[0], b[1]);
      mma16816<T>(acc[n + 1], p, b[2], b[3]);
    }
  } else if constexpr (!kFP8) {
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vbase + swizzle<CH>(x4_row, n + (lane >> 4)) * 16);
      mma16816<T>(acc[n], p, b[0], b[1]);
      mma16816<T>(acc[n + 1], p, b[2], b[3]);
    }
  } else {
    // Chunk j (16 d) feeds n-tiles 2j (even d) and 2j+1 (odd d).
#pragma unroll
    for (int j = 0; j < CH; j += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vbase + swizzle<CH>(x4_row, j + (lane >> 4)) * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t lo = b[2 * h], hi = b[2 * h + 1];  // tokens 0-7, 8-15
        mma16816<T>(acc[2 * (j + h)], p, e4m3_pair<T>(lo, 0x2404), e4m3_pair<T>(hi, 0x2404));
        mma16816<T>(acc[2 * (j + h) + 1], p, e4m3_pair<T>(lo, 0x3414), e4m3_pair<T>(hi, 0x3414));
      }
    }
  }
}

// ring_stages returns how many cp.async stages of the ring fit in the
// launch's dynamic shared memory beside q (2 to Smem::kMaxStages): the
// planner sizes it per device (dispatch.DecodeSharedBytes), and a launch
// without room for two stages traps.
template <typename C, int D>
__device__ __forceinline__ int ring_stages() {
  using Smem = DecodeSmem<C, D>;
  uint32_t have;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
  const int stages = min(((int)have - Smem::kQBytes) / Smem::kStageBytes, Smem::kMaxStages);
  if (stages < 2) __trap();  // the launch must pass room for q and two stages
  return stages;
}

// tile_block_id returns the table entry of token (lane mod 16) of warp's
// tile i of a split starting at token s0 (0 past the table); unchecked.
__device__ __forceinline__ int tile_block_id(const int* table, int s0, int i, int warp, int lane,
                                             int block_size_log2, int max_blocks_per_seq) {
  const int page = (s0 + (warp + kDecodeWarps * i) * kTileTokens + (lane & 15)) >> block_size_log2;
  return page < max_blocks_per_seq ? __ldg(table + page) : 0;
}

// checked_kv_len returns the KV length len (kv_length of n, the
// sequence's kv_lens entry) clamped to [kv_bias, cap], and records a length
// outside it in fault once per sequence (by thread 0 of the block of KV
// head 0 and split 0). With kv_bias 1 kv_lens is a varlen batch's
// pos_offsets: a fault names the offset, and a negative one reads as 0 (KV
// length 1), as the varlen does.
__device__ __forceinline__ int checked_kv_len(int len, int n, int seq, int kv_bias, int cap, int kvh, int split,
                                              unsigned long long* fault) {
  if (len > cap || len < kv_bias) {  // kv_bias ≥ 0: a negative length too
    if (kvh == 0 && split == 0 && threadIdx.x == 0) {
      if (kv_bias == 0) {
        record_fault(fault, kFaultKVLenBeyondTable, seq, len, cap);
      } else {
        record_fault(fault, kFaultPosOffsetBeyondTable, seq, n, cap);
      }
    }
    len = len < kv_bias ? kv_bias : cap;
  }
  return len;
}

// split_range sets the part of a sequence of len KV tokens that this
// warp reads: its split covers tokens [start, end), whole pages [split·c,
// (split+1)·c) with c = ⌈pages / splits⌉, and the warp takes mine of the
// split's tiles of 16 tokens (tiles warp, warp + 4, ...).
//
// With a sliding window (lo: its first token, else 0) the splits cut the
// pages from lo's on, and the first split starts at the tile that holds
// lo (a multiple of 16 tokens, or lo's page start for pages under 16
// tokens): every tile then holds a token of the window.
template <bool MODS>
__device__ __forceinline__ void split_range(int len, int lo, int split, int splits, int block_size_log2, int warp,
                                            int& start, int& end, int& mine) {
  const int bs_mask = (1 << block_size_log2) - 1;
  if constexpr (MODS) {
    const int p0 = lo >> block_size_log2;
    const int pages = ((len + bs_mask) >> block_size_log2) - p0;
    const int chunk_pages = (pages + splits - 1) / splits;
    start = (p0 + split * chunk_pages) << block_size_log2;
    end = min(len, start + (chunk_pages << block_size_log2));
    if (split == 0) start = max(start, lo & ~(kTileTokens - 1));
  } else {
    const int pages = (len + bs_mask) >> block_size_log2;
    const int chunk_pages = (pages + splits - 1) / splits;
    start = (split * chunk_pages) << block_size_log2;
    end = min(len, start + (chunk_pages << block_size_log2));
  }
  const int tiles = end > start ? (end - start + kTileTokens - 1) / kTileTokens : 0;
  mine = tiles > warp ? (tiles - warp + kDecodeWarps - 1) / kDecodeWarps : 0;
}

// DecodeTiles loads one warp's K/V tiles (tokens [start, end) of its
// split, see split_range) into the warp's part of the shared-memory ring:
// a stage holds the tile's K rows and then its V rows, Smem::kTileBytes
// each, and tokens past end read as zeros. Block ids come from the
// sequence's table row (raw_id, read ahead of use) and are checked as a
// tile is issued (checked_id): an id outside the pool reads block 0 and is
// remembered in bad, recorded once after the loop, so the check costs no
// branch in the loop.
//
// It refers to the kernel's variables instead of holding copies, as a
// lambda capturing them by reference does, and is only passed by reference
// (so are DecodeRows and DecodeLoop): the compiled code is then the same as
// with the kernel's own variables. Copies in one struct let the optimizer
// reorder the loop's code, and ptxas then allocates registers differently
// (16 bytes of spills at D = 128 on sm_80).
//
// In the x-split and shuffle layouts (LAID) K's chunks are 16 contiguous
// bytes of one token as in the flash layout, from another place, and land
// piece-major (chunk c of token r at c·16 + r, as the cache holds them:
// ldmatrix reads 8 tokens of one chunk, 128 contiguous bytes); V's are 8
// consecutive tokens of one element d, so the V tile lands transposed: row
// d holds the tile's 16 tokens as two chunks, chunk h at vt_at<D>(xsplit,
// d, h), which P·V reads with plain (not transposing) ldmatrix. A chunk
// with tokens past end is read whole from its page (block_size ≥ 8 keeps it
// in one) and those tokens are zeroed once it has landed (zero_tail), as
// the flash tile's rows past end are zero-filled.
//
// DM < D (head dim 120 in the tiles of 128, flash layout, 16-bit caches):
// the cache's rows hold DM elements, chunks CHM… of each tile row are
// zero-filled (q's are zero too, so the padding adds nothing to a score).
template <typename C, int D, int DM = D>
struct DecodeTiles {
  using Smem = DecodeSmem<C, D>;
  static constexpr int CH = Smem::kChunks;
  static constexpr bool kFP8 = sizeof(C) == 1;
  static constexpr int CHM = DM * (int)sizeof(C) / 16;  // chunks of a cache row
  static constexpr int ROWS_PER_ISSUE = CH >= 32 ? 1 : 32 / CH;  // K/V rows one cp.async instruction covers
  static constexpr int ISSUES = kTileTokens / ROWS_PER_ISSUE;
  // kWholeRows: a warp's cp.async covers whole rows (CH divides 32, or 32
  // divides CH); else issue walks the tile's chunks.
  static constexpr bool kWholeRows = 32 % CH == 0 || CH % 32 == 0;
  static_assert(kWholeRows || kTileTokens * CH % 32 == 0, "whole chunk passes");
  static_assert(DM == D || (!kFP8 && kWholeRows && DM % 8 == 0 && DM < D), "padded rows: 16-bit, whole-row loads");

  const int& start;
  const int& warp;
  const int& lane;
  const int& mine;
  const int& end;
  BadBlock& bad;
  const uint32_t& nb;  // BadBlock's pool bound
  unsigned char* const& ring;
  const int& chunk;  // lane % CH: the 16-byte chunk of a row this lane copies (flash layout)
  const int& block_size_log2;
  const int& bs_mask;
  const int64_t& row_stride;  // elements between the rows of two tokens (flash rows: HeadRows)
  const C* const& k_head;     // K and V of this KV head, token 0 of block 0 (flash rows)
  const C* const& v_head;
  const C* __restrict__ const& k_cache;
  const int& num_kv_heads;
  const int& kvh;
  const int& layout;
  const C* __restrict__ const& v_cache;
  const int* const& table;  // the sequence's block-table row
  const int& max_blocks_per_seq;
  const HeadRows& hr;  // how the flash rows' loaders find this KV head's rows

  // raw_id is tile_block_id for this warp and table.
  __device__ __forceinline__ int raw_id(int s0, int i) const {
    return tile_block_id(table, s0, i, warp, lane, block_size_log2, max_blocks_per_seq);
  }

  // checked_id returns raw, the block id of token (lane mod 16) of this
  // warp's tile i, once checked: 0 past the end, and 0 for an id outside
  // the pool, which bad remembers; the flash rows' loaders read block
  // id·id_mul + id_add (HeadRows: the id itself but in the HND layout,
  // id·num_kv_heads + kvh). Unsigned: those ids reach 2^32. Two spellings
  // of the same value: ptxas 11.8, whose SASS the 16-bit kernels run, gave
  // the narrow head-dim-256 kernel 226 registers with HeadRows' (2 blocks
  // an SM where it had 3) and 162 with the layout test; the fp8 kernels
  // run the driver JIT's code, recorded for HeadRows' spelling.
  __device__ __forceinline__ int checked_id(int raw, int i) const {
    const int t = start + (warp + kDecodeWarps * i) * kTileTokens + (lane & 15);
    if constexpr (kFP8) {
      return i < mine && t < end ? (int)((uint32_t)bad.block(raw, t, nb) * (uint32_t)hr.id_mul + (uint32_t)hr.id_add)
                                 : 0;
    } else {
      if (!(i < mine && t < end)) return 0;
      const int id = bad.block(raw, t, nb);
      return layout == kLayoutHND ? (int)((uint32_t)id * (uint32_t)num_kv_heads + (uint32_t)kvh) : id;
    }
  }

  // stage returns the warp's K tile in ring stage st (its V tile follows).
  __device__ __forceinline__ unsigned char* stage(int st) const {
    return ring + (st * kDecodeWarps + warp) * 2 * Smem::kTileBytes;
  }

  // issue starts the copy of this warp's tile i into stage st; ids holds
  // the tile's block ids as checked_id returned them.
  template <bool LAID>
  __device__ __forceinline__ void issue(int i, int ids, int st) const {
    const int base = start + (warp + kDecodeWarps * i) * kTileTokens;
    const uint32_t kdst = smem_addr(stage(st));
    const uint32_t vdst = kdst + Smem::kTileBytes;
    if constexpr (!LAID && !kWholeRows) {
      // Rows of a chunk count that does not divide 32 (head dims 80, 96,
      // 112, 192): lane l copies chunks l + 32j of the tile, row by row.
#pragma unroll
      for (int j = 0; j < kTileTokens * CH / 32; ++j) {
        const int i = lane + 32 * j;
        const int r = i / CH, c = i - r * CH;
        const int t = base + r;
        const int blk = __shfl_sync(0xffffffffu, ids, r);  // 0 past end (checked_id)
        const bool ok = t < end;
        const int at = swizzle<CH>(r, c) * 16;
        const int64_t off = (int64_t)(((uint32_t)blk << block_size_log2) | ((uint32_t)t & bs_mask)) * row_stride;
        cp_async16(kdst + at, reinterpret_cast<const unsigned char*>(k_head + off) + c * 16, ok ? 16 : 0);
        cp_async16(vdst + at, reinterpret_cast<const unsigned char*>(v_head + off) + c * 16, ok ? 16 : 0);
      }
    } else if constexpr (!LAID) {
#pragma unroll
      for (int j = 0; j < ISSUES; ++j) {
        const int r = lane / CH + ROWS_PER_ISSUE * j;
        const int t = base + r;
        const int blk = __shfl_sync(0xffffffffu, ids, r);  // 0 past end (checked_id)
        const bool ok = t < end;
        const int at = swizzle<CH>(r, chunk) * 16;
        // Pool rows fit in 32 bits (see BadBlock).
        const int64_t off = (int64_t)(((uint32_t)blk << block_size_log2) | ((uint32_t)t & bs_mask)) * row_stride;
        if constexpr (DM < D) {
          // A padding chunk is zero-filled from the row's start (nothing read).
          const bool in = chunk < CHM;
          const int c16 = in ? chunk * 16 : 0;
          cp_async16(kdst + at, reinterpret_cast<const unsigned char*>(k_head + off) + c16, ok && in ? 16 : 0);
          cp_async16(vdst + at, reinterpret_cast<const unsigned char*>(v_head + off) + c16, ok && in ? 16 : 0);
        } else {
          cp_async16(kdst + at, reinterpret_cast<const unsigned char*>(k_head + off) + chunk * 16, ok ? 16 : 0);
          cp_async16(vdst + at, reinterpret_cast<const unsigned char*>(v_head + off) + chunk * 16, ok ? 16 : 0);
        }
      }
    } else {
      // Each lane keeps one token (K) and one token half (V) for the whole
      // tile, so its source steps by a constant and one instruction reads
      // contiguous bytes: K [blocks, heads, D/8, bs, 8] (both layouts), lane
      // l reads token l%16 of pieces l/16 + 2j (CH/2 of them); V chunk
      // l + 32j of the Vᵀ tile is element d = l/2 + 16j, tokens 8h … 8h+7
      // (h = l%2), a step of 16 elements a row (x-split [blocks, heads, D,
      // bs]: 16·bs; shuffle [blocks, heads, bs/8, D, 8]: 128).
      //
      // fp8 (x = 16): a piece is 16 elements of one token, and lane l
      // lands K's token l%16 at slot fp8_slot (see there); a V piece is the
      // tile's 16 tokens of one element (block_size ≥ 16 keeps them in one
      // page), so lane l reads element d = l + 32j into row d of the Vᵀ
      // tile (16 bytes a row), 512 contiguous bytes an instruction in the
      // shuffle layout and for blocks of 16 in the x-split one.
      static_assert(CH % 2 == 0 && kTileTokens == 16, "a lane's K pieces are l/16 + 2j");
      constexpr int X = 16 / (int)sizeof(C);  // elements a piece
      const int r = lane & 15;
      const int blk = __shfl_sync(0xffffffffu, ids, r);
      const bool ok = base + r < end;
      const C* kp = k_cache + ((((((int64_t)blk * num_kv_heads + kvh) * CH + (lane >> 4)) << block_size_log2) |
                                ((base + r) & bs_mask)) *
                               X);
      const int64_t kstep = (int64_t)(2 * X) << block_size_log2;  // two pieces
      const int h = kFP8 ? 0 : lane & 1, d0 = kFP8 ? lane : lane >> 1;
      const int tv = base + 8 * h;
      const int vblk = __shfl_sync(0xffffffffu, ids, 8 * h);
      const bool vok = tv < end;
      const int o = tv & bs_mask;  // a multiple of x
      const int64_t bh = (int64_t)vblk * num_kv_heads + kvh;
      const bool xsplit = layout == kLayoutXSplit;
      constexpr int XLOG2 = kFP8 ? 4 : 3;
      const C* vp = v_cache + (xsplit ? ((bh * D + d0) << block_size_log2) + o
                                      : ((bh << (block_size_log2 - XLOG2)) + (o >> XLOG2)) * (D * X) + d0 * X);
      // 32 lanes cover 16 elements d (16-bit: two token halves each) or 32 (fp8).
      constexpr int DSTEP = kFP8 ? 32 : 16;
      const int64_t vstep = xsplit ? (int64_t)DSTEP << block_size_log2 : DSTEP * X;
      const uint32_t vat = vdst + (kFP8 ? d0 : vt_at<D>(xsplit, d0, h)) * 16;
      const int vat_step = kFP8 || xsplit ? 512 : 256;  // DSTEP elements d (vt_chunk's swap is d0's)
      // piece-major: piece l/16 + 2j, token l%16 (fp8: at slot fp8_slot)
      const uint32_t kat = kdst + (kFP8 ? (lane >> 4) * 16 + fp8_slot(r) : lane) * 16;
#pragma unroll
      for (int j = 0; j < CH / 2; ++j) {
        cp_async16(kat + 512 * j, ok ? kp + j * kstep : k_cache, ok ? 16 : 0);
        cp_async16(vat + vat_step * j, vok ? vp + j * vstep : v_cache, vok ? 16 : 0);
      }
    }
  }

  // zero_tail zeroes the Vᵀ tile's tokens from valid on (LAID, a tile that
  // reaches past end): they hold whatever their page holds, and P·V must
  // see zeros there (0·NaN is NaN).
  __device__ __forceinline__ void zero_tail(unsigned char* vtile, int valid) const {
    if constexpr (kFP8) {  // row d: 16 bytes, token t in byte t
      uint32_t keep[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int n = min(max(valid - 4 * w, 0), 4);
        keep[w] = n == 4 ? 0xffffffffu : (1u << (8 * n)) - 1u;
      }
      for (int d = lane; d < D; d += 32) {
        uint4* row = reinterpret_cast<uint4*>(vtile + d * 16);
        const uint4 x = *row;
        *row = make_uint4(x.x & keep[0], x.y & keep[1], x.z & keep[2], x.w & keep[3]);
      }
      return;
    }
    uint16_t* v16 = reinterpret_cast<uint16_t*>(vtile);
    const bool xsplit = layout == kLayoutXSplit;
    for (int d = lane; d < D; d += 32) {
      for (int c = valid; c < kTileTokens; ++c) v16[vt_at<D>(xsplit, d, c >> 3) * 8 + (c & 7)] = 0;
    }
  }

  // zero_head zeroes the V tile's tokens 0 … n−1 (the _mods entries):
  // row-major in the flash layout, Vᵀ in the others (LAID; fp8: row d is
  // 16 bytes, token t in byte t, as zero_tail reads it).
  template <bool LAID>
  __device__ __forceinline__ void zero_head(unsigned char* vtile, int n) const {
    n = min(n, kTileTokens);
    if constexpr (kFP8 && LAID) {
      uint32_t keep[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int z = min(max(n - 4 * w, 0), 4);  // bytes of word w to zero
        keep[w] = z == 4 ? 0u : ~((1u << (8 * z)) - 1u);
      }
      for (int d = lane; d < D; d += 32) {
        uint4* row = reinterpret_cast<uint4*>(vtile + d * 16);
        const uint4 x = *row;
        *row = make_uint4(x.x & keep[0], x.y & keep[1], x.z & keep[2], x.w & keep[3]);
      }
    } else if constexpr (!LAID) {
      for (int i = lane; i < n * CH; i += 32) {
        *reinterpret_cast<uint4*>(vtile + swizzle<CH>(i / CH, i % CH) * 16) = make_uint4(0u, 0u, 0u, 0u);
      }
    } else {
      uint16_t* v16 = reinterpret_cast<uint16_t*>(vtile);
      const bool xsplit = layout == kLayoutXSplit;
      for (int d = lane; d < D; d += 32) {
        for (int c = 0; c < n; ++c) v16[vt_at<D>(xsplit, d, c >> 3) * 8 + (c & 7)] = 0;
      }
    }
  }
};

// DecodeRows refers to a lane's running state of two query heads, kept in
// the kernel's variables (see DecodeTiles for why references): rows r0 =
// lane/4 and r1 = r0 + 8 (shared by a lane quad), or for NARROW heads
// 2·(lane%4) and 2·(lane%4)+1 (shared by the 8 lanes of equal lane%4): the
// max in log2 units (m0, m1), this lane's part of the sum (l0, l1), and its
// part of the output tile acc (NARROW: its transpose, d × heads, in D/16
// m-tiles; else D/8 n-tiles).
template <int ACC>
struct DecodeRows {
  float& m0;
  float& m1;
  float& l0;
  float& l1;
  float (&acc)[ACC][4];
};

// mod_max is a running max as the _mods entries subtract it: a tile whose
// tokens a sliding window masks entirely leaves the max at -inf, and
// -inf − (−inf) would make the rescale NaN; 0 keeps it 0 (an empty state).
// Other entries never see such a tile.
template <bool MODS>
__device__ __forceinline__ float mod_max(float m) {
  if constexpr (MODS) {
    return m == -INFINITY ? 0.0f : m;
  } else {
    return m;
  }
}

// narrow_softmax turns a narrow tile's scores into log2 units (q_mul) —
// st and st_odd are narrow_scores' two chains — with -inf for the tokens
// from end on (base: the tile's first token), and folds them into the
// online softmax of heads 2c and 2c+1 (down each column: the 8 lanes of
// equal c); it rescales the output by how far each max moved and returns
// Pᵀ as the B fragments of Oᵀ += Vᵀ·Pᵀ (k = tokens, n = heads) in b0 and
// b1: the transposes of P's two 8 × 8 halves (tokens 0-7 and 8-15). Every
// tile holds a token below end.
template <typename T, typename C, int D, bool LAID, bool MODS>
__device__ __forceinline__ void narrow_softmax(const DecodeRows<D / 16>& rows, float (&st)[4],
                                               const float (&st_odd)[4], int base, int end, float q_mul, int lane,
                                               const ScoreMods& mods, uint32_t& b0, uint32_t& b1) {
  constexpr bool kFP8 = sizeof(C) == 1;
  // Lane (g, c) = (lane/4, lane%4) holds tokens g (st[0..1]) and g+8
  // (st[2..3]) of heads 2c (st[0], st[2]) and 2c+1 (st[1], st[3]).
  // (LAID fp8: row ρ is token fp8_token(ρ).)
  const int g = lane >> 2;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int rho = g + 8 * (e >> 1);
    const int t = base + (LAID && kFP8 ? fp8_token(rho) : rho);
    if constexpr (MODS) {
      st[e] = mod_score((st[e] + st_odd[e]) * q_mul, t, end, mods, (e & 1) ? mods.slope1 : mods.slope0);
    } else {
      st[e] = t < end ? (st[e] + st_odd[e]) * q_mul : -INFINITY;
    }
  }
  float mx0 = fmaxf(st[0], st[2]), mx1 = fmaxf(st[1], st[3]);
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
  }
  mx0 = fmaxf(mx0, rows.m0);
  mx1 = fmaxf(mx1, rows.m1);
  const float alpha0 = exp2_ftz(rows.m0 - mod_max<MODS>(mx0));  // 0 on the first tile (m = -inf)
  const float alpha1 = exp2_ftz(rows.m1 - mod_max<MODS>(mx1));
  rows.m0 = mx0;
  rows.m1 = mx1;
  mx0 = mod_max<MODS>(mx0);
  mx1 = mod_max<MODS>(mx1);
  const float p0 = exp2_ftz(st[0] - mx0), p1 = exp2_ftz(st[1] - mx1);
  const float p2 = exp2_ftz(st[2] - mx0), p3 = exp2_ftz(st[3] - mx1);
  rows.l0 = fmaf(rows.l0, alpha0, p0 + p2);
  rows.l1 = fmaf(rows.l1, alpha1, p1 + p3);
  b0 = movmatrix_trans(pack2<T>(p0, p1));
  b1 = movmatrix_trans(pack2<T>(p2, p3));
#pragma unroll
  for (int m = 0; m < D / 16; ++m) {
    rows.acc[m][0] *= alpha0;
    rows.acc[m][1] *= alpha1;
    rows.acc[m][2] *= alpha0;
    rows.acc[m][3] *= alpha1;
  }
}

// wide_softmax turns a wide tile's scores s into log2 units (q_mul), with
// -inf for the tokens from end on (base: the tile's first token), and
// folds them into the online softmax of rows r0 (s[n][0..1]) and r1
// (s[n][2..3]) (across the lane quad); it rescales the output by how far
// each max moved and returns P rounded to T as the A fragment of O += P·V
// in p: (r0, k 2c..), (r1, k 2c..), (r0, k 8+2c..), (r1, k 8+2c..). Every
// tile holds a token below end.
template <typename T, typename C, int D, bool LAID, bool MODS>
__device__ __forceinline__ void wide_softmax(const DecodeRows<D / 8>& rows, float (&s)[2][4], int base, int end,
                                             float q_mul, int lane, const ScoreMods& mods, uint32_t (&p)[4]) {
  constexpr bool kFP8 = sizeof(C) == 1;
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = 8 * n + 2 * (lane & 3) + (e & 1);  // LAID fp8: token fp8_token(col)
      const int t = base + (LAID && kFP8 ? fp8_token(col) : col);
      if constexpr (MODS) {
        s[n][e] = mod_score(s[n][e] * q_mul, t, end, mods, e < 2 ? mods.slope0 : mods.slope1);
      } else {
        s[n][e] = t < end ? s[n][e] * q_mul : -INFINITY;
      }
    }
    mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
    mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
  }
  mx0 = fmaxf(mx0, rows.m0);
  mx1 = fmaxf(mx1, rows.m1);
  const float alpha0 = exp2_ftz(rows.m0 - mod_max<MODS>(mx0));  // 0 on the first tile (m = -inf)
  const float alpha1 = exp2_ftz(rows.m1 - mod_max<MODS>(mx1));
  rows.m0 = mx0;
  rows.m1 = mx1;
  mx0 = mod_max<MODS>(mx0);
  mx1 = mod_max<MODS>(mx1);
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const float p0 = exp2_ftz(s[n][0] - mx0), p1 = exp2_ftz(s[n][1] - mx0);
    const float p2 = exp2_ftz(s[n][2] - mx1), p3 = exp2_ftz(s[n][3] - mx1);
    rows.l0 = fmaf(rows.l0, n == 0 ? alpha0 : 1.0f, p0 + p1);
    rows.l1 = fmaf(rows.l1, n == 0 ? alpha1 : 1.0f, p2 + p3);
    p[2 * n] = pack2<T>(p0, p1);
    p[2 * n + 1] = pack2<T>(p2, p3);
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    rows.acc[n][0] *= alpha0;
    rows.acc[n][1] *= alpha0;
    rows.acc[n][2] *= alpha1;
    rows.acc[n][3] *= alpha1;
  }
}

// narrow_tile folds one tile of a narrow kernel into rows, from its K and
// V tiles at kbase and vbase (tokens base … base+15; those from end on
// are masked): Sᵀ = K·Qᵀ (16 tokens × 8 heads, even and odd k-steps apart;
// qb: Qᵀ's B fragments), the online softmax, Oᵀ += Vᵀ·Pᵀ.
template <typename T, typename C, int D, bool LAID, bool MODS>
__device__ __forceinline__ void narrow_tile(const DecodeRows<D / 16>& rows, const uint32_t (*qb)[2], uint32_t kbase,
                                            uint32_t vbase, int base, int end, float q_mul, int lane, int x4_row,
                                            int k_slot, int layout, const ScoreMods& mods) {
  float st[4] = {0.0f, 0.0f, 0.0f, 0.0f}, st_odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  narrow_scores<T, C, D, LAID>(st, st_odd, kbase, qb, lane, x4_row, k_slot);
  uint32_t b0, b1;
  narrow_softmax<T, C, D, LAID, MODS>(rows, st, st_odd, base, end, q_mul, lane, mods, b0, b1);
  narrow_pv<T, C, D, LAID>(rows.acc, vbase, b0, b1, lane, x4_row, layout);
}

// wide_tile folds one tile of a wide kernel into rows, from its K and V
// tiles at kbase and vbase (tokens base … base+15; those from end on are
// masked): S = Q·Kᵀ (n-tile 0 is tokens 0-7 of the tile, n-tile 1 tokens
// 8-15; q's A fragments from qa or from q_s at q_base, see wide_scores),
// the online softmax, O += P·V.
template <typename T, typename C, int D, bool LAID, bool Q_IN_REGS, bool MODS>
__device__ __forceinline__ void wide_tile(const DecodeRows<D / 8>& rows, const uint32_t (*qa)[4], uint32_t q_base,
                                          uint32_t kbase, uint32_t vbase, int base, int end, float q_mul, int lane,
                                          int x4_row, int k_slot, int layout, const ScoreMods& mods) {
  float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  wide_scores<T, C, D, LAID, Q_IN_REGS>(s, kbase, q_base, qa, lane, x4_row, k_slot);
  uint32_t p[4];
  wide_softmax<T, C, D, LAID, MODS>(rows, s, base, end, q_mul, lane, mods, p);
  wide_pv<T, C, D, LAID>(rows.acc, p, vbase, lane, x4_row, layout);
}

// DecodeLoop is what attend_tiles works with, referring to the kernel's
// values (see DecodeTiles for why references): the ring's stage count,
// the warp's loader kv and the raw block ids of its next two tiles
// (id_cur, id_next), q in shared memory at q_base, the lane's ldmatrix x4
// row x4_row and its K slot k_slot (see paged_decode), the running state
// rows, and q_mul, the factor that turns scores into log2 units.
template <typename C, int D, bool NARROW, int DM = D>
struct DecodeLoop {
  // q's A fragments stay in registers for the whole loop (KSTEPS·4 of them,
  // 32 at D = 128) instead of being read from shared memory for every tile:
  // 1024 blocks of 512 tokens take 73 µs instead of 77 (H200, 2026-12-02).
  // Not at D = 256, whose output tile alone takes 128 registers, nor for
  // fp8 caches, whose k order reads q per half k-step.
  static constexpr bool kQInRegs = sizeof(C) != 1 && !NARROW && D <= 128;
  static constexpr int kAcc = NARROW ? D / 16 : D / 8;
  const int& stages;
  const DecodeTiles<C, D, DM>& kv;
  int& id_cur;
  int& id_next;
  const uint32_t& q_base;
  const int& x4_row;
  DecodeRows<kAcc> rows;
  const float& q_mul;
  const int& k_slot;
};

// load_q_fragments reads q's fragments from q_s at q_base into registers:
// the A fragments of Q into qa (IN_REGS), and for NARROW the B fragments
// of Qᵀ (d × heads 0-7) into qb, two k-steps per x4 load (matrices: d
// chunks 2kp, 2kp+1, 2kp+2, 2kp+3 of heads 0-7).
template <int D, bool NARROW, bool IN_REGS>
__device__ __forceinline__ void load_q_fragments(uint32_t (*qa)[4], uint32_t (*qb)[2], uint32_t q_base, int lane,
                                                 int x4_row) {
  constexpr int QCH = D / 8;
  constexpr int KSTEPS = D / 16;
  if constexpr (IN_REGS) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) ldmatrix_x4(qa[ks], q_base + swizzle<QCH>(x4_row, 2 * ks + (lane >> 4)) * 16);
  }
  if constexpr (NARROW) {
    // One x4 load is k-steps kp and kp + 1; an odd last k-step (head dims
    // 80 and 112) loads its two chunks twice and keeps one copy.
#pragma unroll
    for (int kp = 0; kp < KSTEPS; kp += 2) {
      uint32_t r[4];
      const int c = kp + 1 < KSTEPS ? 2 * kp + (lane >> 3) : 2 * kp + ((lane >> 3) & 1);
      ldmatrix_x4(r, q_base + swizzle<QCH>(lane & 7, c) * 16);
      qb[kp][0] = r[0];
      qb[kp][1] = r[1];
      if (kp + 1 < KSTEPS) {
        qb[kp + 1][0] = r[2];
        qb[kp + 1][1] = r[3];
      }
    }
  }
}

// attend_tiles runs this warp's tiles through its ring of stages, once
// per cache layout family (LAID: x-split or shuffle): tile j is issued
// with id_cur = its raw ids and id_next = tile j+1's, so tile j+2's are
// read then, two issues ahead of their use, and tile i + stages − 1 is
// issued while tile i is computed. q must be in shared memory from every
// thread's part before the call (the barrier here publishes it).
template <typename T, typename C, int D, bool NARROW, bool LAID, bool MODS, int DM = D>
__device__ __forceinline__ void attend_tiles(const DecodeLoop<C, D, NARROW, DM>& loop, const ScoreMods& mods) {
  using Smem = DecodeSmem<C, D>;
  constexpr bool kQInRegs = DecodeLoop<C, D, NARROW, DM>::kQInRegs;
  constexpr int KSTEPS = D / 16;
  const DecodeTiles<C, D, DM>& kv = loop.kv;
  const int stages = loop.stages;
  int& id_cur = loop.id_cur;
  int& id_next = loop.id_next;
  for (int j = 0; j < stages - 1; ++j) {
    if (j < kv.mine) kv.template issue<LAID>(j, kv.checked_id(id_cur, j), j);
    cp_async_commit();
    id_cur = id_next;
    id_next = kv.raw_id(kv.start, j + 2);
  }
  __syncthreads();  // q_s is written
  uint32_t qa[kQInRegs ? KSTEPS : 1][4];
  uint32_t qb[NARROW ? KSTEPS : 1][2];
  load_q_fragments<D, NARROW, kQInRegs>(qa, qb, loop.q_base, kv.lane, loop.x4_row);

  // slot is tile i's stage, i mod stages, kept as a counter (stages is a
  // parameter, and a modulo by it is a 20-instruction division); tile i +
  // stages − 1 goes to the stage tile i − 1 freed.
  for (int i = 0, slot = 0; i < kv.mine; ++i) {
    {
      const int j = i + stages - 1;
      if (j < kv.mine) kv.template issue<LAID>(j, kv.checked_id(id_cur, j), slot == 0 ? stages - 1 : slot - 1);
      cp_async_commit();
      id_cur = id_next;
      id_next = kv.raw_id(kv.start, j + 2);
    }
    // Wait for tile i: the stages - 1 groups committed after it may pend.
    if (stages == 2) {
      cp_async_wait<1>();
    } else if (stages == 3) {
      cp_async_wait<2>();
    } else {
      cp_async_wait<3>();
    }
    __syncwarp();
    unsigned char* kt = kv.stage(slot);
    slot = slot == stages - 1 ? 0 : slot + 1;
    const uint32_t kbase = smem_addr(kt);
    const uint32_t vbase = kbase + Smem::kTileBytes;
    const int base = kv.start + (kv.warp + kDecodeWarps * i) * kTileTokens;
    if constexpr (LAID) {
      if (base + kTileTokens > kv.end) {
        kv.zero_tail(kt + Smem::kTileBytes, kv.end - base);
        __syncwarp();
      }
    }
    if constexpr (MODS) {
      // The tile that holds a sliding window's first token: the V rows of
      // the tokens before it get weight 0, and must be finite.
      if (base < mods.lo) {
        kv.template zero_head<LAID>(kt + Smem::kTileBytes, mods.lo - base);
        __syncwarp();
      }
    }
    if constexpr (NARROW) {
      narrow_tile<T, C, D, LAID, MODS>(loop.rows, qb, kbase, vbase, base, kv.end, loop.q_mul, kv.lane, loop.x4_row,
                                       loop.k_slot, kv.layout, mods);
    } else {
      wide_tile<T, C, D, LAID, kQInRegs, MODS>(loop.rows, qa, loop.q_base, kbase, vbase, base, kv.end, loop.q_mul,
                                               kv.lane, loop.x4_row, loop.k_slot, kv.layout, mods);
    }
    __syncwarp();  // this stage is refilled next iteration
  }
}

// stash_warp adds up this warp's sums over the lanes that share a head and
// writes its state of heads < G to shared memory for merge_warps: the
// output rows to o_s [warps][kTileRows][D] (the ring, free once every warp
// is past its loop: the barrier here waits for them), max and sum to
// m_s[warp] and l_s[warp]. fp8_d: the output's d order is the fp8 flash
// layout's (see the top).
template <int D, bool NARROW>
__device__ __forceinline__ void stash_warp(const DecodeRows<NARROW ? D / 16 : D / 8>& rows, float* o_s,
                                           float (*m_s)[kTileRows], float (*l_s)[kTileRows], bool fp8_d, int G,
                                           int warp, int lane) {
  constexpr int ACC = NARROW ? D / 16 : D / 8;
#pragma unroll
  for (int o = NARROW ? 4 : 1; o < (NARROW ? 32 : 4); o <<= 1) {
    rows.l0 += __shfl_xor_sync(0xffffffffu, rows.l0, o);
    rows.l1 += __shfl_xor_sync(0xffffffffu, rows.l1, o);
  }
  __syncthreads();
  if constexpr (NARROW) {
    const int g = lane >> 2, h0 = 2 * (lane & 3);
#pragma unroll
    for (int m = 0; m < ACC; ++m) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = h0 + (e & 1);
        // Row g (g+8) of m-tile m is d = 16m+g (16m+g+8); for fp8 16m+2g (+1).
        const int d = fp8_d ? 16 * m + 2 * g + (e >> 1) : 16 * m + g + 8 * (e >> 1);
        if (h < G) o_s[(warp * kTileRows + h) * D + d] = rows.acc[m][e];
      }
    }
    if (g == 0) {
      m_s[warp][h0] = rows.m0;
      l_s[warp][h0] = rows.l0;
      m_s[warp][h0 + 1] = rows.m1;
      l_s[warp][h0 + 1] = rows.l1;
    }
  } else {
    const int r0 = lane >> 2;
#pragma unroll
    for (int n = 0; n < ACC; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + 8 * (e >> 1);
        const int col = 2 * (lane & 3) + (e & 1);
        // The d of column col of n-tile n (see the top for fp8).
        const int d = fp8_d ? 16 * (n >> 1) + 2 * col + (n & 1) : 8 * n + col;
        if (r < G) o_s[(warp * kTileRows + r) * D + d] = rows.acc[n][e];
      }
    }
    if ((lane & 3) == 0) {
      m_s[warp][r0] = rows.m0;
      l_s[warp][r0] = rows.l0;
      m_s[warp][r0 + 8] = rows.m1;
      l_s[warp][r0 + 8] = rows.l1;
    }
  }
}

// merge_warps merges the four warps' stashed states (o_s, m_s, l_s) by
// log-sum-exp into the block's result for the G heads of KV head kvh,
// scaled by v_mul: with one split the output rows of sequence seq in out
// and lse; for a cluster's split its normalized rows in place in o_s and
// its max and sum in split_m_s and split_l_s, for cluster_merge; else the
// rows of partial item pitem (the work item's first + split) in
// partial_out, partial_max and partial_sum, for global_merge. MODS with
// sinks: the first split adds each head's sink logit (in log2 units) to
// its max and sum, so every later merge counts it once. Rows in global
// memory hold DM elements (o_s's hold D; DM < D: padded tiles).
template <typename T, int D, bool CLUSTER, bool MODS, int DM = D>
__device__ __forceinline__ void merge_warps(T* __restrict__ out, float* __restrict__ lse,
                                            float* __restrict__ partial_out, float* __restrict__ partial_max,
                                            float* __restrict__ partial_sum, float* o_s,
                                            const float (*m_s)[kTileRows], const float (*l_s)[kTileRows],
                                            float* split_m_s, float* split_l_s, int seq, int pitem, int kvh, int G,
                                            int num_q_heads, int splits, float v_mul, const float* __restrict__ sinks,
                                            bool first_split) {
  static_assert(DM == D || !CLUSTER, "padded tiles merge in global memory");
  for (int i = threadIdx.x; i < G * DM; i += kDecodeThreads) {
    const int g = i / DM;
    const int d = i - g * DM;
    float mx = m_s[0][g];
#pragma unroll
    for (int w = 1; w < kDecodeWarps; ++w) mx = fmaxf(mx, m_s[w][g]);
    float sink = -INFINITY;
    if constexpr (MODS) {
      if (sinks != nullptr && first_split) sink = __ldg(sinks + kvh * G + g) * kLog2e;
      mx = fmaxf(mx, sink);
    }
    float sum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float f = exp2f(m_s[w][g] - mx);
        sum = fmaf(l_s[w][g], f, sum);
        o = fmaf(o_s[(w * kTileRows + g) * D + d], f, o);
      }
      if constexpr (MODS) sum += exp2f(sink - mx);
    }
    o = sum > 0.0f ? o * v_mul / sum : 0.0f;
    const int64_t row = (int64_t)seq * num_q_heads + kvh * G + g;
    if (splits == 1) {
      out[row * DM + d] = from_float<T>(o);
      if (d == 0 && lse != nullptr) lse[row] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    } else if constexpr (CLUSTER) {
      // In place: this thread alone reads and writes (g, d) of o_s.
      o_s[g * D + d] = o;
      if (d == 0) {
        split_m_s[g] = mx;
        split_l_s[g] = sum;
      }
    } else {
      const int64_t prow = (int64_t)pitem * num_q_heads + kvh * G + g;
      partial_out[prow * DM + d] = o;
      if (d == 0) {
        partial_max[prow] = mx;
        partial_sum[prow] = sum;
      }
    }
  }
}

// last_split returns, in every thread, whether this block is the last of
// the splits of (sequence seq, KV head kvh) to finish, counted in counters
// [num_seqs, num_kv_heads]; that block resets the counter, so the counters
// are zero again for the next launch (and graph replay). The counter's
// atomic releases this block's partials and acquires the others'
// (atomic_add_acq_rel); last_s is a shared flag.
__device__ __forceinline__ bool last_split(unsigned int* __restrict__ counters, int seq, int kvh, int num_kv_heads,
                                           int splits, bool& last_s) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int* counter = counters + (int64_t)seq * num_kv_heads + kvh;
    last_s = atomic_add_acq_rel(counter, 1u) == (unsigned int)(splits - 1);
    if (last_s) *counter = 0u;
  }
  __syncthreads();
  return last_s;
}

// decode_block is the body of every decode entry (see the top): it finds
// the block's work and stages q, runs each warp's tiles (attend_tiles),
// merges the four warps, and writes the result or the split's partials,
// then merges the splits on chip (CLUSTER) or in the last block to finish.
// MODS: the _mods entries' score modifiers (see the top): window, softcap,
// sinks and alibi (0 / null: off); the others pass zeros. The block's static
// shared memory (the warps' maxima and sums, the last-split flag, a cluster
// split's max and sum) is declared by the entries' bodies (paged_decode,
// paged_decode_mods): its PTX names are then their function's, and the
// plain entries' PTX, which recorded JIT images must match byte for byte,
// does not depend on how the _mods entries are built.
template <typename T, typename C, int D, bool CLUSTER, bool NARROW, int LAYOUTS, bool MODS, int DM = D>
__device__ __forceinline__ void decode_block(
    float (&m_s)[kDecodeWarps][kTileRows], float (&l_s)[kDecodeWarps][kTileRows], bool& last_s,
    float (&split_m_s)[kTileRows], float (&split_l_s)[kTileRows],
    T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_out,
    float* __restrict__ partial_max, float* __restrict__ partial_sum,
    unsigned int* __restrict__ counters, const T* __restrict__ q,
    const C* __restrict__ k_cache, const C* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ kv_lens,
    unsigned long long* fault, int64_t q_seq_stride, int num_q_heads, int max_blocks_per_seq,
    int block_size_log2, int64_t num_blocks, float scale, float k_scale, float v_scale,
    const int4* __restrict__ work, int layout, int kv_bias, int window, float softcap,
    const float* __restrict__ sinks, const float* __restrict__ alibi) {
  using Smem = DecodeSmem<C, D>;
  constexpr bool kFP8 = sizeof(C) == 1;
  constexpr int ACC = NARROW ? D / 16 : D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const int stages = ring_stages<C, D>();
  T* q_s = reinterpret_cast<T*>(smem);
  unsigned char* ring = smem + Smem::kQBytes;

  const int kvh = blockIdx.x;
  const int num_kv_heads = gridDim.x;
  const int cap = max_blocks_per_seq << block_size_log2;
  // Which split of which sequence: fixed by the grid (seq = y, split = z of
  // gridDim.z), or, for a balanced launch (work != null, never a cluster),
  // item y of the work list decode_partition wrote from the real lengths.
  WorkItem item = {(int)blockIdx.y, (int)blockIdx.z, (int)gridDim.z, (int)(blockIdx.y * gridDim.z)};
  const bool balanced = !CLUSTER && work != nullptr;
  if (balanced) {
    const int4 w = work[blockIdx.y];
    if (w.z == 0) return;  // an unused item
    item = {w.x, w.y, w.z, w.w};
  }
  const int seq = item.seq;
  const int split = item.split;
  const int splits = item.splits;
  const int G = num_q_heads / num_kv_heads;
  if (NARROW && G > kNarrowGroup) __trap();  // the planner never pairs them
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  // The block ids of this warp's first two tiles, read before kv_len
  // arrives on the guess that this split starts where it would if the
  // table were exactly full (always right for split 0); checked below. (A
  // balanced launch knows its lengths already: no guess.)
  const int* table = block_tables + (int64_t)seq * max_blocks_per_seq;
  const int guess = balanced ? -1 : (split * ((max_blocks_per_seq + splits - 1) / splits)) << block_size_log2;
  int id_cur = balanced ? 0 : tile_block_id(table, guess, 0, warp, lane, block_size_log2, max_blocks_per_seq);
  int id_next = balanced ? 0 : tile_block_id(table, guess, 1, warp, lane, block_size_log2, max_blocks_per_seq);
  const int n = kv_lens[seq];
  int len = kv_length(n, kv_bias);
  // q as <q>, rows ≥ G zero, in the k order of the cache type, swizzled:
  // each thread moves 16-element groups (two 16-byte loads, all issued
  // before the first store). It stays in the kernel's body: as a function
  // of its own, the compiler orders the registers of x (and of
  // global_merge) differently, and ptxas's code for the kernel changes.
  {
    constexpr int QCH = D / 8;  // 16-byte chunks per q row
    constexpr int GROUPS = kTileRows * D / 16;
    constexpr int PER_THREAD = (GROUPS + kDecodeThreads - 1) / kDecodeThreads;
    uint4 x[PER_THREAD][2];
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
      const int i = threadIdx.x + j * kDecodeThreads;
      const int g = i / (D / 16);
      x[j][0] = x[j][1] = make_uint4(0u, 0u, 0u, 0u);
      if constexpr (DM < D) {
        // Padded tiles: q's elements DM… stay zero.
        const int e0 = (i % (D / 16)) * 16;
        if (i < GROUPS && g < G) {
          const T* src = q + seq * q_seq_stride + (int64_t)(kvh * G + g) * DM + e0;
          if (e0 < DM) x[j][0] = load8(src);
          if (e0 + 8 < DM) x[j][1] = load8(src + 8);
        }
      } else if (i < GROUPS && g < G) {
        const T* src = q + seq * q_seq_stride + (int64_t)(kvh * G + g) * D + (i % (D / 16)) * 16;
        x[j][0] = load8(src);
        x[j][1] = load8(src + 8);
      }
    }
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
      const int i = threadIdx.x + j * kDecodeThreads;
      if (i >= GROUPS) break;
      const int g = i / (D / 16);
      const int c = (i % (D / 16)) * 2;  // first 16-byte chunk of the group
      uint4 lo = x[j][0], hi = x[j][1];
      if constexpr (kFP8) {
        // Position k holds d = q_position(k): from 32-bit words w = d/2 of
        // the group, k-words 0-3 take d-words 0,2,4,6 and k-words 4-7 take 1,3,5,7.
        lo = make_uint4(x[j][0].x, x[j][0].z, x[j][1].x, x[j][1].z);
        hi = make_uint4(x[j][0].y, x[j][0].w, x[j][1].y, x[j][1].w);
      }
      *reinterpret_cast<uint4*>(q_s + swizzle<QCH>(g, c) * 8) = lo;
      *reinterpret_cast<uint4*>(q_s + swizzle<QCH>(g, c + 1) * 8) = hi;
    }
  }
  len = checked_kv_len(len, n, seq, kv_bias, cap, kvh, split, fault);
  const int bs_mask = (1 << block_size_log2) - 1;
  // The query sits at position len − 1.
  ScoreMods mods = {0, 0, 0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (MODS) {
    mods.lo = window > 0 ? max(0, len - window) : 0;
    mods.qpos = len - 1;
    if (softcap > 0.0f) {
      mods.cap = softcap * kLog2e;
      mods.inv_cap = 1.0f / mods.cap;
    }
    if (alibi != nullptr) {
      // The lane's two heads: columns 2c and 2c+1 (NARROW), else rows r0, r0 + 8.
      const int h0 = NARROW ? 2 * (lane & 3) : lane >> 2, h1 = NARROW ? h0 + 1 : h0 + 8;
      mods.slope0 = h0 < G ? __ldg(alibi + kvh * G + h0) * kLog2e : 0.0f;
      mods.slope1 = h1 < G ? __ldg(alibi + kvh * G + h1) * kLog2e : 0.0f;
    }
  }
  int start, end, mine;
  split_range<MODS>(len, mods.lo, split, splits, block_size_log2, warp, start, end, mine);
  if (start != guess) {
    id_cur = tile_block_id(table, start, 0, warp, lane, block_size_log2, max_blocks_per_seq);
    id_next = tile_block_id(table, start, 1, warp, lane, block_size_log2, max_blocks_per_seq);
  }
  const HeadRows hr(layout, kvh, num_kv_heads, DM);
  const int64_t row_stride = hr.row_stride;
  const C* k_head = k_cache + hr.base;
  const C* v_head = v_cache + hr.base;
  BadBlock bad;
  const uint32_t nb = BadBlock::bound(num_blocks);
  const int chunk = lane % Smem::kChunks;
  const DecodeTiles<C, D, DM> kv{start, warp, lane, mine, end, bad, nb, ring, chunk, block_size_log2, bs_mask,
                             row_stride, k_head, v_head, k_cache, num_kv_heads, kvh, layout, v_cache, table,
                             max_blocks_per_seq, hr};

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float acc[ACC][4];
#pragma unroll
  for (int n = 0; n < ACC; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const DecodeRows<ACC> rows{m0, m1, l0, l1, acc};
  // Scores come out in log2 units: scale·log2(e)·k_scale (·mma_scale for fp8).
  const float q_mul = scale * kLog2e * k_scale * mma_scale<C>();
  const uint32_t q_base = smem_addr(q_s);
  const int x4_row = (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix x4 rows: 0-7, 8-15, 0-7, 8-15
  // The slot of K tile row x4_row in a piece of the x-split and shuffle
  // layouts' tile: the row itself, for fp8 the slot of its token.
  const int k_slot = kFP8 ? fp8_slot(fp8_token(x4_row)) : x4_row;
  const DecodeLoop<C, D, NARROW, DM> loop{stages, kv, id_cur, id_next, q_base, x4_row, rows, q_mul, k_slot};
  // The caller passes a layout the entry reads (LAYOUTS); padded tiles
  // read flash rows only (flash or HND).
  const bool flash = LAYOUTS == kLayoutsFlash || flash_rows(layout) || DM < D;
  if constexpr (DM < D) {
    attend_tiles<T, C, D, NARROW, false, MODS, DM>(loop, mods);
  } else if (!flash) {
    attend_tiles<T, C, D, NARROW, true, MODS>(loop, mods);
  } else {
    attend_tiles<T, C, D, NARROW, false, MODS>(loop, mods);
  }
  // fp8 caches in the flash layout give each lane other d than 16-bit ones
  // (see the top); in the other layouts the same as 16-bit ones.
  const bool fp8_d = kFP8 && flash;
  cp_async_wait<0>();
  bad.report(fault, seq, block_size_log2);

  float* o_s = reinterpret_cast<float*>(ring);  // [warps][kTileRows][D]
  stash_warp<D, NARROW>(rows, o_s, m_s, l_s, fp8_d, G, warp, lane);
  __syncthreads();
  merge_warps<T, D, CLUSTER, MODS, DM>(out, lse, partial_out, partial_max, partial_sum, o_s, m_s, l_s, split_m_s,
                                   split_l_s, seq, item.first + split, kvh, G, num_q_heads, splits,
                                   v_scale * mma_scale<C>(), sinks, split == 0);
  if (splits == 1) {
    return;
  }
  if constexpr (CLUSTER) {
    cluster_merge<T, D>(out, lse, o_s, split_m_s, split_l_s, seq, kvh, G, num_q_heads, split, splits);
    return;
  }
  // Split-K phase 2, fused: the last block of this (sequence, KV head) to
  // finish merges every split by log-sum-exp.
  if (!last_split(counters, seq, kvh, num_kv_heads, splits, last_s)) {
    return;
  }
  // Rows in global memory hold DM elements.
  global_merge<T, DM>(out, lse, partial_out, partial_max, partial_sum, (int64_t)item.first * num_q_heads + kvh * G,
                     (int64_t)seq * num_q_heads + kvh * G, num_q_heads, G, splits,
                     reinterpret_cast<float*>(ring),  // o_s is done
                     m_s[0], l_s[0]);
}

// paged_decode is the body of the plain entries (PKV_DECODE):
// decode_block over its own static shared memory.
template <typename T, typename C, int D, bool CLUSTER, bool NARROW, int LAYOUTS>
__device__ __forceinline__ void paged_decode(
    T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_out,
    float* __restrict__ partial_max, float* __restrict__ partial_sum,
    unsigned int* __restrict__ counters, const T* __restrict__ q,
    const C* __restrict__ k_cache, const C* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ kv_lens,
    unsigned long long* fault, int64_t q_seq_stride, int num_q_heads, int max_blocks_per_seq,
    int block_size_log2, int64_t num_blocks, float scale, float k_scale, float v_scale,
    const int4* __restrict__ work, int layout, int kv_bias) {
  __shared__ float m_s[kDecodeWarps][kTileRows];
  __shared__ float l_s[kDecodeWarps][kTileRows];
  __shared__ bool last_s;
  __shared__ float split_m_s[kTileRows], split_l_s[kTileRows];
  decode_block<T, C, D, CLUSTER, NARROW, LAYOUTS, false>(
      m_s, l_s, last_s, split_m_s, split_l_s, out, lse, partial_out, partial_max, partial_sum,
      counters, q, k_cache, v_cache, block_tables, kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq,
      block_size_log2, num_blocks, scale, k_scale, v_scale, work, layout, kv_bias, 0, 0.0f, nullptr, nullptr);
}

// paged_decode_mods is the body of the _mods entries (PKV_DECODE_MODS):
// decode_block with the score modifiers, never a cluster.
template <typename T, typename C, int D, bool NARROW>
__device__ __forceinline__ void paged_decode_mods(
    T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_out,
    float* __restrict__ partial_max, float* __restrict__ partial_sum,
    unsigned int* __restrict__ counters, const T* __restrict__ q,
    const C* __restrict__ k_cache, const C* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ kv_lens,
    unsigned long long* fault, int64_t q_seq_stride, int num_q_heads, int max_blocks_per_seq,
    int block_size_log2, int64_t num_blocks, float scale, float k_scale, float v_scale,
    const int4* __restrict__ work, int layout, int kv_bias, int window, float softcap,
    const float* __restrict__ sinks, const float* __restrict__ alibi) {
  __shared__ float m_s[kDecodeWarps][kTileRows];
  __shared__ float l_s[kDecodeWarps][kTileRows];
  __shared__ bool last_s;
  __shared__ float split_m_s[kTileRows], split_l_s[kTileRows];
  decode_block<T, C, D, false, NARROW, kLayoutsAny, true>(
      m_s, l_s, last_s, split_m_s, split_l_s, out, lse, partial_out, partial_max, partial_sum,
      counters, q, k_cache, v_cache, block_tables, kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq,
      block_size_log2, num_blocks, scale, k_scale, v_scale, work, layout, kv_bias, window, softcap, sinks, alibi);
}

// paged_decode_padded is the body of the entries for a head dim DM below
// the tile dim D (PKV_DECODE_PADDED): decode_block over padded tiles of a
// flash-layout cache of the queries' type, with the score modifiers
// (MODS) or without (window 0, softcap 0, no sinks or ALiBi); never a
// cluster. A function of its own, so that the other entries' shared
// variables keep their names (and their PTX its bytes).
template <typename T, int D, int DM, bool NARROW, bool MODS>
__device__ __forceinline__ void paged_decode_padded(
    T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_out,
    float* __restrict__ partial_max, float* __restrict__ partial_sum,
    unsigned int* __restrict__ counters, const T* __restrict__ q,
    const T* __restrict__ k_cache, const T* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ kv_lens,
    unsigned long long* fault, int64_t q_seq_stride, int num_q_heads, int max_blocks_per_seq,
    int block_size_log2, int64_t num_blocks, float scale, float k_scale, float v_scale,
    const int4* __restrict__ work, int layout, int kv_bias, int window, float softcap,
    const float* __restrict__ sinks, const float* __restrict__ alibi) {
  static_assert(DM < D, "padded tiles");
  __shared__ float m_s[kDecodeWarps][kTileRows];
  __shared__ float l_s[kDecodeWarps][kTileRows];
  __shared__ bool last_s;
  __shared__ float split_m_s[kTileRows], split_l_s[kTileRows];
  decode_block<T, T, D, false, NARROW, kLayoutsFlash, MODS, DM>(
      m_s, l_s, last_s, split_m_s, split_l_s, out, lse, partial_out, partial_max, partial_sum,
      counters, q, k_cache, v_cache, block_tables, kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq,
      block_size_log2, num_blocks, scale, k_scale, v_scale, work, layout, kv_bias, window, softcap, sinks, alibi);
}

}  // namespace pkv

// PKV_DECODE defines one entry; CLUSTER: its splits form a thread-block
// cluster and merge on chip (needs compute_90, see decode_*_sm90.cu);
// NARROW: for GQA groups up to kNarrowGroup; LAYOUTS: the cache layouts it
// reads (kLayoutsAny, kLayoutsFlash).
#define PKV_DECODE(name, T, C, D, CLUSTER, NARROW, LAYOUTS)                                          \
  extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads) name(                            \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum,                 \
      unsigned int* counters, const T* q, const C* k_cache, const C* v_cache,                         \
      const int* block_tables, const int* kv_lens, unsigned long long* fault, int64_t q_seq_stride,   \
      int num_q_heads, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,               \
      float scale, float k_scale, float v_scale, const int4* work, int layout, int kv_bias) {         \
    pkv::paged_decode<T, C, D, CLUSTER, NARROW, LAYOUTS>(                                             \
        out, lse, partial_out, partial_max, partial_sum, counters, q, k_cache, v_cache, block_tables, \
        kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks,   \
        scale, k_scale, v_scale, work, layout, kv_bias);                                              \
  }

// PKV_DECODE_MODS defines one _mods entry: PKV_DECODE's parameters, then
// the score modifiers (see paged_decode). Never a cluster: its splits
// merge in the last block.
#define PKV_DECODE_MODS(name, T, C, D, NARROW)                                                        \
  extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads) name(                            \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum,                 \
      unsigned int* counters, const T* q, const C* k_cache, const C* v_cache,                         \
      const int* block_tables, const int* kv_lens, unsigned long long* fault, int64_t q_seq_stride,   \
      int num_q_heads, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,               \
      float scale, float k_scale, float v_scale, const int4* work, int layout, int kv_bias,           \
      int window, float softcap, const float* sinks, const float* alibi) {                            \
    pkv::paged_decode_mods<T, C, D, NARROW>(                                                          \
        out, lse, partial_out, partial_max, partial_sum, counters, q, k_cache, v_cache, block_tables, \
        kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks,   \
        scale, k_scale, v_scale, work, layout, kv_bias, window, softcap, sinks, alibi);               \
  }

// PKV_DECODE_MODS_ALL: the wide (_mods) and narrow (_g8_mods) entries of
// every power-of-two head dim for a cache of type C (the queries' type, or
// e4m3), reading every layout.
#define PKV_DECODE_MODS_ALL(prefix, T, C)                 \
  PKV_DECODE_MODS(prefix##_hd64_mods, T, C, 64, false)   \
  PKV_DECODE_MODS(prefix##_hd128_mods, T, C, 128, false) \
  PKV_DECODE_MODS(prefix##_hd256_mods, T, C, 256, false) \
  PKV_DECODE_MODS(prefix##_hd64_g8_mods, T, C, 64, true)   \
  PKV_DECODE_MODS(prefix##_hd128_g8_mods, T, C, 128, true) \
  PKV_DECODE_MODS(prefix##_hd256_g8_mods, T, C, 256, true)

// PKV_DECODE_MORE_DIMS: the wide, narrow (_g8) and _mods entries for the
// head dims between the powers of two over a cache of the queries' type:
// 80, 96, 112 and 192 in every layout, 120 in tiles of 128 (padded, flash
// layout only). PKV_DECODE_FP8_DIMS: the same over an fp8 e4m3 cache at 96
// and 192 (whole 16-byte chunk passes; 80 and 112 have none), every
// layout, one build. Never clusters: their splits merge in global memory.
#define PKV_DECODE_MORE_DIM(prefix, T, C, D)                                  \
  PKV_DECODE(prefix##_hd##D, T, C, D, false, false, pkv::kLayoutsAny)         \
  PKV_DECODE(prefix##_hd##D##_g8, T, C, D, false, true, pkv::kLayoutsAny)     \
  PKV_DECODE_MODS(prefix##_hd##D##_mods, T, C, D, false)                      \
  PKV_DECODE_MODS(prefix##_hd##D##_g8_mods, T, C, D, true)
// PKV_DECODE_PADDED defines one entry for head dim DM in tiles of D
// (paged_decode_padded): PKV_DECODE's parameters, then with MODS the score
// modifiers as PKV_DECODE_MODS has them.
#define PKV_DECODE_PADDED(name, T, D, DM, NARROW)                                                     \
  extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads) name(                            \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum,                 \
      unsigned int* counters, const T* q, const T* k_cache, const T* v_cache,                         \
      const int* block_tables, const int* kv_lens, unsigned long long* fault, int64_t q_seq_stride,   \
      int num_q_heads, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,               \
      float scale, float k_scale, float v_scale, const int4* work, int layout, int kv_bias) {         \
    pkv::paged_decode_padded<T, D, DM, NARROW, false>(                                                \
        out, lse, partial_out, partial_max, partial_sum, counters, q, k_cache, v_cache, block_tables, \
        kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks,   \
        scale, k_scale, v_scale, work, layout, kv_bias, 0, 0.0f, nullptr, nullptr);                   \
  }
#define PKV_DECODE_MODS_PADDED(name, T, D, DM, NARROW)                                                \
  extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads) name(                            \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum,                 \
      unsigned int* counters, const T* q, const T* k_cache, const T* v_cache,                         \
      const int* block_tables, const int* kv_lens, unsigned long long* fault, int64_t q_seq_stride,   \
      int num_q_heads, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,               \
      float scale, float k_scale, float v_scale, const int4* work, int layout, int kv_bias,           \
      int window, float softcap, const float* sinks, const float* alibi) {                            \
    pkv::paged_decode_padded<T, D, DM, NARROW, true>(                                                 \
        out, lse, partial_out, partial_max, partial_sum, counters, q, k_cache, v_cache, block_tables, \
        kv_lens, fault, q_seq_stride, num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks,   \
        scale, k_scale, v_scale, work, layout, kv_bias, window, softcap, sinks, alibi);               \
  }
#define PKV_DECODE_PADDED_DIM(prefix, T, DM, D)                      \
  PKV_DECODE_PADDED(prefix##_hd##DM, T, D, DM, false)                \
  PKV_DECODE_PADDED(prefix##_hd##DM##_g8, T, D, DM, true)            \
  PKV_DECODE_MODS_PADDED(prefix##_hd##DM##_mods, T, D, DM, false)    \
  PKV_DECODE_MODS_PADDED(prefix##_hd##DM##_g8_mods, T, D, DM, true)
#define PKV_DECODE_MORE_DIMS(prefix, T)  \
  PKV_DECODE_MORE_DIM(prefix, T, T, 80)  \
  PKV_DECODE_MORE_DIM(prefix, T, T, 96)  \
  PKV_DECODE_MORE_DIM(prefix, T, T, 112) \
  PKV_DECODE_MORE_DIM(prefix, T, T, 192) \
  PKV_DECODE_PADDED_DIM(prefix, T, 120, 128)
#define PKV_DECODE_FP8_DIMS(prefix, T)          \
  PKV_DECODE_MORE_DIM(prefix, T, pkv::e4m3, 96) \
  PKV_DECODE_MORE_DIM(prefix, T, pkv::e4m3, 192)

// The _ALL macros define one family for every head dim: entries
// <prefix>_hd<D><kind><sfx> reading the layouts L (sfx: empty, or _laid
// for the fp8 kernels' kLayoutsAny build), through PKV_DECODE_DIMS.
#define PKV_DECODE_DIMS(prefix, kind, T, C, CLUSTER, NARROW, L, sfx)      \
  PKV_DECODE(prefix##_hd64##kind##sfx, T, C, 64, CLUSTER, NARROW, L)   \
  PKV_DECODE(prefix##_hd128##kind##sfx, T, C, 128, CLUSTER, NARROW, L) \
  PKV_DECODE(prefix##_hd256##kind##sfx, T, C, 256, CLUSTER, NARROW, L)

// PKV_DECODE_ALL: the wide entries (any GQA group).
#define PKV_DECODE_ALL(prefix, T, C, L, sfx) PKV_DECODE_DIMS(prefix, , T, C, false, false, L, sfx)
// PKV_DECODE_CLUSTER_ALL: the wide cluster entries, _cluster.
#define PKV_DECODE_CLUSTER_ALL(prefix, T, C, L, sfx) PKV_DECODE_DIMS(prefix, _cluster, T, C, true, false, L, sfx)
// PKV_DECODE_NARROW_ALL: the narrow entries, _g8 (a cache of type C: the
// queries' type or e4m3).
#define PKV_DECODE_NARROW_ALL(prefix, T, C, L, sfx) PKV_DECODE_DIMS(prefix, _g8, T, C, false, true, L, sfx)
// PKV_DECODE_NARROW_SM90_ALL: _g8_sm90, the narrow kernels of an fp8 cache
// built for compute_90, whose e4m3 moves are one instruction
// (PKV_CVT_E4M3).
#define PKV_DECODE_NARROW_SM90_ALL(prefix, T, C, L, sfx) PKV_DECODE_DIMS(prefix, _g8_sm90, T, C, false, true, L, sfx)
// PKV_DECODE_NARROW_CLUSTER_ALL: _g8_cluster.
#define PKV_DECODE_NARROW_CLUSTER_ALL(prefix, T, C, L, sfx) \
  PKV_DECODE_DIMS(prefix, _g8_cluster, T, C, true, true, L, sfx)
