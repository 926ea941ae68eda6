// qkv.cu: split a fused QKV activation, RMSNorm q and k per head, apply RoPE,
// write q token-major and K/V into the paged cache in any layout (cache.cuh).
//
// qkv_norm_rope_<in>[_e4m3][_split][_tile]
//   qkv          [num_tokens, (num_q_heads + 2·num_kv_heads)·head_dim] of <in>,
//                token stride qkv_token_stride elements: q heads, k heads, v heads.
//   cu_seqlens   optional int32 [num_seqs + 1]: token t belongs to sequence s
//                with cu_seqlens[s] ≤ t < cu_seqlens[s+1] (null: one sequence).
//   pos_offsets  int32 [num_seqs]: token t of sequence s is at position
//                pos_offsets[s] + t − cu_seqlens[s], which is both its RoPE
//                position and its cache position.
//   norm         0: no norm; 1: RMSNorm of every q head with q_weight [head_dim]
//                and every k head with k_weight [head_dim] (of <in>):
//                x · w / sqrt(mean(x²) + eps), in f32.
//   cos_sin      f32 [max_pos, 2·rot]: each row rot cosines, then rot sines,
//                with rot = head_dim (one per element) or head_dim/2 (one per
//                pair); neox as rope.cuh.
//   q_out        [num_tokens, num_q_heads, head_dim] of <in>.
//   key_cache,   in layout (cache.cuh: flash [num_blocks, block_size,
//   value_cache  num_kv_heads, head_dim], x-split or shuffle), <in> or fp8 e4m3
//                (/ k_scale, v_scale). K's pieces are contiguous in every
//                layout; V's are written element by element in the x-split
//                and shuffle layouts (stride block_size or x), unless
//                value_cache is null and qkv_values writes V. The slot of
//                position p is block_tables[s][p / block_size]·block_size +
//                p % block_size.
//                A position outside the cos/sin table is recorded in fault and
//                nothing of that token is written; a position beyond the block
//                table or a block id outside the pool is recorded and that
//                token's cache rows are not written (q_out still is).
//   tile_tokens  the _tile kernels only (x-split and shuffle layouts, see
//                below): C, 2 to 16, a power of two dividing block_size;
//                the others ignore it.
// head_dim is a multiple of 8 from 16 to 256; the _split kernels serve those
// whose half is not a multiple of 8 (head_dim % 16 == 8), the others the
// rest.
//
// Block: blockDim.x threads per token, a multiple of 32 (so that a warp
// serves one token), blockDim.y tokens, blockDim.x·blockDim.y ≤ 256. Grid:
// the ceil(num_tokens / blockDim.y) token groups are dealt out in equal
// contiguous runs, one run per block (dispatch.PlanQKV sizes the grid).
// Dynamic shared memory: 2 to 4 stages of QKVStage bytes (the stage count is
// what %dynamic_smem_size holds, at most 4).
//
// Work is cut in units: unit c of a head holds its elements 8c..8c+7 and
// head_dim/2 + 8c..+7 (two pieces), which contain every rotated pair of both
// RoPE styles, so no lane needs another lane's elements. A head's
// ceil(head_dim/16) units sit on a group of adjacent lanes, as many as the
// next power of two, which reduce the norm with shuffles; the group's other
// lanes idle (none when head_dim is a power of two). In the _split kernels
// (SPLIT) the second piece is only 8-byte aligned and moves as two 8-byte
// halves, and the last unit holds 4 elements of each half (narrow); they are
// kernels of their own because their extra registers would cost the others
// occupancy. Thread x of a token takes units x, x + blockDim.x, … (q heads,
// then k, then v), kQKVUnits per pass: they all sit at the same c, so they
// use the same cos/sin values and norm weights, and a thread is idle, narrow
// or full for all of them. A step is one pass of one token group. The block streams its steps through a ring of shared-memory
// stages with cp.async: while it computes step i, the QKV pieces, cos/sin
// rows and block-table entries of steps i+1 … i+stages−1 are in flight, so
// DRAM stays busy through the compute and the per-token lookups. Each thread
// copies exactly the QKV pieces it later reads; the cos/sin rows and the
// block id are copied once per token and shared, behind one barrier per step.
//
// Page tiles (_tile). In the x-split and shuffle layouts a token's K row is
// 16-byte pieces block_size·16 bytes apart, so a token written on its own
// sends L2 one half-sector request per piece. The _tile kernels keep the K
// rows of C consecutive slots of one page (a chunk: slots c·C .. c·C+C−1)
// in shared memory after the ring ([C][K heads][head_dim] cache elements),
// and write the chunk when a token of another chunk comes, or a slot of
// the chunk comes again, and at the end: C·16 contiguous bytes per piece.
// V goes as in the plain kernels (qkv_values writes it for a prefill).
// Only slots the block's tokens wrote are stored. Every thread makes the
// same decisions from the ring's token records (after the step's barrier),
// at the first step of each token group; a token of the group that does
// not fit the tile (another chunk, or its slot taken) is written directly.
// Their launch bounds hold them to 168 registers, so that four blocks of
// 96 threads share an SM as in the plain kernels.
#include "append.cuh"

namespace pkv {

// kQKVUnits is how many units a thread holds per pass (dispatch.QKVUnitsPerThread).
constexpr int kQKVUnits = 4;
constexpr int kQKVMaxStages = 4;
// The _tile kernels' launch bounds: at most kQKVTileThreads threads a
// block, and registers for kQKVTileBlocks such blocks per SM (168 a
// thread), so that four blocks of 96 threads fit as in the plain kernels
// (dispatch.QKVTileMaxThreads).
constexpr int kQKVTileThreads = 128;
constexpr int kQKVTileBlocks = 3;

// QKVTokenMeta is what a stage records of one token at issue: its position,
// its sequence, and the block id of its page (copied by cp.async; -1 when the
// block table has no such page).
struct QKVTokenMeta {
  int64_t pos;
  int seq;
  int blk;
};

// QKVStage lays out one ring stage of a block of `threads` threads and
// `tokens` tokens: the QKV pieces, piece-major ([2·kQKVUnits][threads] of 16
// bytes, so the threads of a warp read consecutive chunks), the cos then sin
// row of each token ([tokens][2][rot] f32), and the tokens' QKVTokenMeta.
// dispatch.QKVStageBytes mirrors bytes().
struct QKVStage {
  int threads, tokens, rot;
  __device__ __forceinline__ int data_bytes() const { return threads * 2 * kQKVUnits * 16; }
  __device__ __forceinline__ int angle_bytes() const { return tokens * rot * 8; }
  __device__ __forceinline__ int bytes() const {
    return data_bytes() + angle_bytes() + tokens * (int)sizeof(QKVTokenMeta);
  }
};

// find_sequence returns the last s in [0, num_seqs) with cu_seqlens[s] ≤ t
// (0 when there is none), searched by the whole warp 32 points at a time, so
// that a batch of up to 33 sequences costs one dependent load. Every lane of
// the warp calls it with the same t.
__device__ __forceinline__ int find_sequence(const int* __restrict__ cu_seqlens, int num_seqs, int64_t t) {
  const int lane = threadIdx.x & 31;  // blockDim.x is a multiple of 32
  int lo = 0, hi = num_seqs - 1;      // the answer is in [lo, hi]
  while (lo < hi) {
    // Probe i at lo + ⌈(hi − lo)·(i+1)/32⌉: increasing, the last one at hi.
    const int p = lo + (int)(((int64_t)(hi - lo) * (lane + 1) + 31) >> 5);
    const unsigned holds = __ballot_sync(0xffffffffu, cu_seqlens[p] <= t);
    // k: how many leading probes hold (a prefix when cu_seqlens is sorted).
    const int k = holds == 0xffffffffu ? 32 : __ffs(~holds) - 1;
    const int below = __shfl_sync(0xffffffffu, p, k > 0 ? k - 1 : 0);
    const int above = __shfl_sync(0xffffffffu, p, k < 32 ? k : 31);
    if (k > 0) lo = below;
    if (k < 32) hi = above - 1;
  }
  return lo;
}

// cp_async8 copies 8 bytes global → shared (through L1), or writes 8 zero
// bytes when bytes is 0 (src is then not read).
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// store4 writes 4 raw elements, packed in w (16-bit elements: w.x and w.y;
// fp8: w.x), at element index at with the given element stride.
template <int SIZE>
__device__ __forceinline__ void store4(void* base, int64_t at, int stride, uint2 w) {
  using E = typename Raw<SIZE>::elem;
  E* dst = static_cast<E*>(base) + at;
  if (stride == 1) {
    if constexpr (SIZE == 1) {
      *reinterpret_cast<uint32_t*>(dst) = w.x;
    } else {
      *reinterpret_cast<uint2*>(dst) = w;
    }
    return;
  }
  const E* e = reinterpret_cast<const E*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[(int64_t)i * stride] = e[i];
}

// store_cache_halves writes the 8 elements of v (packed In) like
// store_cache8, as two runs of 4: elements 0..3 at element index at (stride
// sa), and, unless first_only, elements 4..7 at bt (stride sb).
template <typename In, bool FP8>
__device__ __forceinline__ void store_cache_halves(void* cache, int64_t at, int sa, int64_t bt, int sb,
                                                   bool first_only, uint4 v, float scale) {
  if constexpr (FP8) {
    const uint2 q = to_e4m3x8<In>(v, scale);
    store4<1>(cache, at, sa, make_uint2(q.x, 0u));
    if (!first_only) store4<1>(cache, bt, sb, make_uint2(q.y, 0u));
  } else {
    store4<2>(cache, at, sa, make_uint2(v.x, v.y));
    if (!first_only) store4<2>(cache, bt, sb, make_uint2(v.z, v.w));
  }
}

// load_pair_angles is load_angles with pairs from a row at p that is only
// 8-byte aligned (the second piece of a split unit).
__device__ __forceinline__ void load_pair_angles(const float* p, float f[8]) {
  const float2 a = reinterpret_cast<const float2*>(p)[0];
  const float2 b = reinterpret_cast<const float2*>(p)[1];
  f[0] = f[1] = a.x;
  f[2] = f[3] = a.y;
  f[4] = f[5] = b.x;
  f[6] = f[7] = b.y;
}

// load_angles reads the cos or sin values of one piece's 8 elements from a
// staged row at p (16-byte aligned): 8 consecutive floats, or with pairs 4,
// each serving an element pair (GPT-J with one value per pair).
__device__ __forceinline__ void load_angles(const float* p, bool pairs, float f[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  if (pairs) {
    f[0] = f[1] = a.x;
    f[2] = f[3] = a.y;
    f[4] = f[5] = a.z;
    f[6] = f[7] = a.w;
    return;
  }
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
  f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// token_slot is the cache slot of a staged token record, or -1 where
// qkv_norm_rope writes no cache row (a position outside [0, max_pos), past
// the block table, or a block id outside the pool).
__device__ __forceinline__ int64_t token_slot(const QKVTokenMeta& m, int64_t max_pos, int block_size_log2,
                                              int64_t num_blocks) {
  if (m.pos < 0 || m.pos >= max_pos || m.blk < 0 || m.blk >= num_blocks) return -1;
  return ((int64_t)m.blk << block_size_log2) | (m.pos & ((1 << block_size_log2) - 1));
}

template <typename In, bool FP8, bool SPLIT, bool TILE>
__device__ __forceinline__ void qkv_norm_rope(
    const In* __restrict__ qkv, In* __restrict__ q_out, void* __restrict__ key_cache,
    void* __restrict__ value_cache, const int* __restrict__ cu_seqlens,
    const int* __restrict__ pos_offsets, const int* __restrict__ block_tables,
    const In* __restrict__ q_weight, const In* __restrict__ k_weight,
    const float* __restrict__ cos_sin, int64_t max_pos, int rot, unsigned long long* fault,
    int num_tokens, int num_seqs, int num_q_heads, int num_kv_heads, int head_dim,
    int64_t qkv_token_stride, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,
    int norm, float eps, float k_scale, float v_scale, int neox, int layout, int tile_tokens) {
  constexpr int U = kQKVUnits;
  constexpr int X = FP8 ? 16 : 8;  // cache elements per 16 bytes
  using E = typename Raw<FP8 ? 1 : 2>::elem;
  extern __shared__ __align__(128) unsigned char smem[];
  const QKVStage geo{(int)(blockDim.x * blockDim.y), (int)blockDim.y, rot};
  // The page tile (TILE): C positions of tile_row cache elements (the K
  // heads of a slot), after the ring.
  const int C = TILE ? tile_tokens : 0;
  const int tile_row = num_kv_heads * head_dim;
  int stages;
  {
    uint32_t have;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
    stages = min(((int)have - C * tile_row * (int)sizeof(E)) / geo.bytes(), kQKVMaxStages);
    if (stages < 2) __trap();  // the launch must pass room for two stages and the tile
  }
  E* const tile = reinterpret_cast<E*>(smem + stages * geo.bytes());
  const int x = threadIdx.x;
  const int tid = threadIdx.y * blockDim.x + x;
  const int half = head_dim >> 1;
  const int head_units = (half + 7) >> 3;             // units of a head
  const int upr = 1 << (32 - __clz(head_units - 1));  // lanes per head: the next power of two
  const int upr_log2 = __ffs(upr) - 1;
  const int c = x & (upr - 1);  // the same for every unit of this thread
  const int d = c << 3;
  const bool idle = c >= head_units;  // a lane past the head's units
  constexpr bool split = SPLIT;       // second pieces 8-byte aligned
  const bool narrow = split && (half & 7) != 0 && c == head_units - 1;  // 4 elements of each half
  const int normed = num_q_heads + num_kv_heads;  // heads [0, normed) are normed and rotated
  // Null value_cache: V is qkv_values' (heads [normed, normed + num_kv_heads) skipped).
  const int units = (normed + (value_cache != nullptr ? num_kv_heads : 0)) << upr_log2;
  const int per_pass = U * (int)blockDim.x;
  const int passes = (units + per_pass - 1) / per_pass;
  const float inv_dim = 1.0f / head_dim;  // exact for a power of two, else rounded once
  const bool vec = (reinterpret_cast<uintptr_t>(cos_sin) & 15) == 0;  // rows are 16-byte multiples: rot % 4 == 0
  const int bs_mask = (1 << block_size_log2) - 1;

  // This block's run of token groups, and its steps (the same count for
  // every thread: they all meet at each step's barrier).
  const int64_t groups = ((int64_t)num_tokens + blockDim.y - 1) / blockDim.y;
  const int64_t run = (groups + gridDim.x - 1) / gridDim.x;
  const int64_t g0 = (int64_t)blockIdx.x * run;
  const int steps = g0 < groups ? (int)(min(groups, g0 + run) - g0) * passes : 0;
  auto token_of = [&](int k) -> int64_t { return (g0 + k / passes) * blockDim.y + threadIdx.y; };

  // The sequence of the token last issued by this warp, cached: a block's
  // tokens are consecutive, so most steps need no search.
  int seq = 0;
  int64_t seq_start = 0, seq_end = -1, seq_pos = 0;

  // issue starts the copies of step k into stage st.
  auto issue = [&](int k, int st) {
    const int64_t t = token_of(k);
    if (t >= num_tokens) return;  // the token's whole warps
    unsigned char* stage = smem + st * geo.bytes();
    const In* src_tok = qkv + t * qkv_token_stride;
    const int base = (k % passes) * per_pass;
    const uint32_t dst = smem_addr(stage) + tid * 16;
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = base + x + j * (int)blockDim.x;
      if (u < units && !idle) {
        const In* p = src_tok + (int64_t)(u >> upr_log2) * head_dim + d;
        cp_async16(dst + (2 * j) * geo.threads * 16, p, 16);
        if (!split) {
          cp_async16(dst + (2 * j + 1) * geo.threads * 16, p + half, 16);
        } else {
          // Elements half+d.. and half+d+4..; a narrow unit's second 8
          // bytes would be the next head's: zeros (nothing read).
          cp_async8(dst + (2 * j + 1) * geo.threads * 16, p + half, 8);
          cp_async8(dst + (2 * j + 1) * geo.threads * 16 + 8, narrow ? p + half : p + half + 4, narrow ? 0 : 8);
        }
      }
    }
    if (t >= seq_end) {
      if (cu_seqlens != nullptr) {
        seq = find_sequence(cu_seqlens, num_seqs, t);
        seq_start = cu_seqlens[seq];
        seq_end = cu_seqlens[seq + 1];
      } else {
        seq_end = num_tokens;
      }
      seq_pos = pos_offsets[seq];
    }
    const int64_t pos = seq_pos + (t - seq_start);
    QKVTokenMeta* meta = reinterpret_cast<QKVTokenMeta*>(stage + geo.data_bytes() + geo.angle_bytes()) + threadIdx.y;
    if (x == 0) {
      meta->pos = pos;
      meta->seq = seq;
    }
    if (pos < 0 || pos >= max_pos) return;
    // The token's table row, rot cosines then rot sines, staged as it is
    // stored, in 16- or 4-byte pieces.
    float* rows = reinterpret_cast<float*>(stage + geo.data_bytes()) + threadIdx.y * 2 * rot;
    const float* row = cos_sin + pos * 2 * rot;
    if (vec) {
      for (int i = x; i < rot / 2; i += blockDim.x) cp_async16(smem_addr(rows + 4 * i), row + 4 * i, 16);
    } else {
      for (int i = x; i < 2 * rot; i += blockDim.x) cp_async4(smem_addr(rows + i), row + i);
    }
    if (x == 0) {
      const int64_t page = pos >> block_size_log2;
      if (page < max_blocks_per_seq) {
        cp_async4(smem_addr(&meta->blk), block_tables + (int64_t)seq * max_blocks_per_seq + page);
      } else {
        meta->blk = -1;
      }
    }
  };

  // process computes step k from stage st.
  // store_pieces writes this thread's two pieces of head h of slot (elements
  // d… and half+d…) to the K (value false) or V cache, in the layout.
  // A split unit writes its second piece as two halves, a narrow one only
  // the first half of each piece.
  // In a _tile kernel a token given a tile position (tile_pos ≥ 0) writes
  // to the tile instead, where its pieces are contiguous.
  int tile_pos = -1;  // this thread's token's, for the steps of its group
  auto store_pieces = [&](void* cache, bool value, int64_t slot, int h, uint4 a, uint4 b, float scale) {
    int st;
    const int64_t at = cache_place<X>(layout, value, slot, h, d, num_kv_heads, head_dim, block_size_log2, &st);
    if (narrow) {
      store_cache_halves<In, FP8>(cache, at, st, 0, 1, true, a, scale);
    } else {
      store_cache8<In, FP8>(cache, at, st, a, scale);
    }
    const int64_t bt = cache_place<X>(layout, value, slot, h, d + half, num_kv_heads, head_dim, block_size_log2, &st);
    if (!split) {
      store_cache8<In, FP8>(cache, bt, st, b, scale);
      return;
    }
    int sc;
    const int64_t ct = cache_place<X>(layout, value, slot, h, d + half + 4, num_kv_heads, head_dim, block_size_log2, &sc);
    store_cache_halves<In, FP8>(cache, bt, st, ct, sc, narrow, b, scale);
  };
  // store_tile writes K head h's two pieces of this thread's token to its
  // tile position, where the head's elements are contiguous.
  auto store_tile = [&](int h, uint4 a, uint4 b, float scale) {
    const int at = tile_pos * tile_row + h * head_dim + d;
    if (narrow) {
      store_cache_halves<In, FP8>(tile, at, 1, 0, 1, true, a, scale);
    } else {
      store_cache8<In, FP8>(tile, at, 1, a, scale);
    }
    if (!split) {
      store_cache8<In, FP8>(tile, at + half, 1, b, scale);
      return;
    }
    store_cache_halves<In, FP8>(tile, at + half, 1, at + half + 4, 1, narrow, b, scale);
  };
  auto process = [&](int k, int st) {
    const int64_t t = token_of(k);
    if (t >= num_tokens) return;  // the token's whole warps: no shuffle is left waiting
    const unsigned char* stage = smem + st * geo.bytes();
    const bool first = k % passes == 0;  // faults are recorded once per token
    const QKVTokenMeta meta =
        reinterpret_cast<const QKVTokenMeta*>(stage + geo.data_bytes() + geo.angle_bytes())[threadIdx.y];
    if (meta.pos < 0 || meta.pos >= max_pos) {
      if (x == 0 && first) record_fault(fault, kFaultPositionBeyondTable, t, meta.pos, max_pos);
      return;
    }
    // The cache slot, or -1 when the table cannot place this position.
    int64_t slot = -1;
    if (meta.blk == -1 && (meta.pos >> block_size_log2) >= max_blocks_per_seq) {
      if (x == 0 && first)
        record_fault(fault, kFaultKVLenBeyondTable, meta.seq, meta.pos + 1, (int64_t)max_blocks_per_seq << block_size_log2);
    } else if (meta.blk < 0 || meta.blk >= num_blocks) {
      if (x == 0 && first) record_fault(fault, kFaultBlockBeyondPool, meta.seq, meta.pos >> block_size_log2, meta.blk);
    } else {
      slot = ((int64_t)meta.blk << block_size_log2) | (meta.pos & bs_mask);
    }
    // This thread's cos/sin values: piece a (elements d..) and piece b (half + d..).
    float ca[8], sa[8], cb[8], sb[8];
    {
      const float* crow = reinterpret_cast<const float*>(stage + geo.data_bytes()) + threadIdx.y * 2 * rot;
      const float* srow = crow + rot;
      const bool full = rot == head_dim;
      const bool pairs = !neox && !full;  // GPT-J, one value per pair
      const int oa = full || neox ? d : d >> 1;
      const int ob = full ? d + half : neox ? d : (d + half) >> 1;
      load_angles(crow + oa, pairs, ca);
      load_angles(srow + oa, pairs, sa);
      if (pairs && split) {
        load_pair_angles(crow + ob, cb);
        load_pair_angles(srow + ob, sb);
      } else {
        load_angles(crow + ob, pairs, cb);
        load_angles(srow + ob, pairs, sb);
      }
    }
    const In* src_tok = qkv + t * qkv_token_stride;  // only its type is used
    const int base = (k % passes) * per_pass;
    uint4 ra[U], rb[U];
    {
      const uint4* src = reinterpret_cast<const uint4*>(stage) + tid;
#pragma unroll
      for (int j = 0; j < U; ++j) {
        ra[j] = src[(2 * j) * geo.threads];
        rb[j] = src[(2 * j + 1) * geo.threads];
        if (narrow) ra[j].z = ra[j].w = 0u;  // elements half.., unit 0's: out of the norm
      }
    }
    // inv[j]: 1/√(mean(x²) + eps) of unit j's head, reduced over its lanes;
    // the reductions of the U units interleave. Units past the last are
    // stale data that no store uses.
    float inv[U];
    if (norm) {
#pragma unroll
      for (int j = 0; j < U; ++j) {
        float xa[8], xb[8];
        to_float8(ra[j], src_tok, xa);
        to_float8(rb[j], src_tok, xb);
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(xa[e], xa[e], ss);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(xb[e], xb[e], ss);
        inv[j] = idle ? 0.0f : ss;
      }
      for (int o = upr >> 1; o > 0; o >>= 1) {
#pragma unroll
        for (int j = 0; j < U; ++j) inv[j] += __shfl_xor_sync(0xffffffffu, inv[j], o);
      }
#pragma unroll
      for (int j = 0; j < U; ++j) inv[j] = rsqrtf(inv[j] * inv_dim + eps);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = base + x + j * (int)blockDim.x;
      if (u >= units || idle) continue;
      const int hh = u >> upr_log2;
      if (hh >= normed) {  // V: copied (or quantized) as given
        if (slot >= 0) store_pieces(value_cache, true, slot, hh - normed, ra[j], rb[j], v_scale);
        continue;
      }
      const bool is_q = hh < num_q_heads;
      if (!is_q && slot < 0) continue;
      float xa[8], xb[8];
      to_float8(ra[j], src_tok, xa);
      to_float8(rb[j], src_tok, xb);
      if (norm) {
        float wa[8], wb[8];
        const In* w = (is_q ? q_weight : k_weight) + d;
        to_float8(load8(w), w, wa);
        if (!split) {
          to_float8(load8(w + half), w, wb);
        } else {
          const uint2 w0 = *reinterpret_cast<const uint2*>(w + half);
          const uint2 w1 = narrow ? make_uint2(0u, 0u) : *reinterpret_cast<const uint2*>(w + half + 4);
          to_float8(make_uint4(w0.x, w0.y, w1.x, w1.y), w, wb);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          xa[e] = xa[e] * inv[j] * wa[e];
          xb[e] = xb[e] * inv[j] * wb[e];
        }
      }
      float oa[8], ob[8];
      if (neox) {
        // Element d+e pairs with half+d+e.
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          oa[e] = xa[e] * ca[e] - xb[e] * sa[e];
          ob[e] = xb[e] * cb[e] + xa[e] * sb[e];
        }
      } else {
        // Elements 2i and 2i+1 of each piece pair up.
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          oa[e] = xa[e] * ca[e] - xa[e + 1] * sa[e];
          oa[e + 1] = xa[e + 1] * ca[e + 1] + xa[e] * sa[e + 1];
          ob[e] = xb[e] * cb[e] - xb[e + 1] * sb[e];
          ob[e + 1] = xb[e + 1] * cb[e + 1] + xb[e] * sb[e + 1];
        }
      }
      const uint4 pa = pack8<In>(oa), pb = pack8<In>(ob);
      if (is_q) {
        In* dst = q_out + (t * num_q_heads + hh) * head_dim + d;
        if (!split) {
          *reinterpret_cast<uint4*>(dst) = pa;
          *reinterpret_cast<uint4*>(dst + half) = pb;
        } else {
          if (narrow) {
            *reinterpret_cast<uint2*>(dst) = make_uint2(pa.x, pa.y);
          } else {
            *reinterpret_cast<uint4*>(dst) = pa;
            *reinterpret_cast<uint2*>(dst + half + 4) = make_uint2(pb.z, pb.w);
          }
          *reinterpret_cast<uint2*>(dst + half) = make_uint2(pb.x, pb.y);
        }
      } else if (TILE && tile_pos >= 0) {
        store_tile(hh - num_q_heads, pa, pb, k_scale);
      } else {
        store_pieces(key_cache, false, slot, hh - num_q_heads, pa, pb, k_scale);
      }
    }
  };

  // Step k is issued stages − 1 steps ahead into stage k % stages; the
  // barrier of step k both publishes its shared rows and frees stage
  // (k − 1) % stages, which step k + stages − 1 then refills.
  //
  // The tile's chunk (slot >> c_log2; slots are below 2^31, -1: none) and
  // which of its positions hold a row, kept in shared memory so that they
  // hold no registers through the steps: place_group of token group g
  // reads copy g % 2 and writes copy (g + 1) % 2, which the next group
  // reads after a step's barrier.
  __shared__ int tile_chunks[2];
  __shared__ uint32_t tile_masks[2];
  if (TILE && tid == 0) {
    tile_chunks[0] = -1;
    tile_masks[0] = 0u;
  }
  const int c_log2 = TILE ? __ffs(C) - 1 : 0;
  // flush writes the tile's rows of chunk to the K cache (every thread;
  // the tile complete, that is after a barrier).
  auto flush = [&](int chunk, uint32_t mask) {
    const int64_t s0 = (int64_t)chunk << c_log2;
    // The C pieces of X elements of each (head, piece) are contiguous.
    const int xs = head_dim / X;
    for (int i = tid; i < num_kv_heads * xs * C; i += geo.threads) {
      const int p = i & (C - 1);
      if (!((mask >> p) & 1u)) continue;
      const int r = i >> c_log2;
      const int h = r / xs, e = (r - h * xs) * X;
      int st;
      const int64_t at = cache_place<X>(layout, false, s0 + p, h, e, num_kv_heads, head_dim, block_size_log2, &st);
      *reinterpret_cast<uint4*>(static_cast<E*>(key_cache) + at) =
          *reinterpret_cast<const uint4*>(tile + p * tile_row + h * head_dim + e);
    }
  };
  // place_group, at token group g's first step k: flush the tile when one
  // of the group's tokens cannot join it, then give each token that can
  // its position (tile_pos of the token's threads).
  auto place_group = [&](int k) {
    const int g = k / passes;
    int chunk = tile_chunks[g & 1];
    uint32_t mask = tile_masks[g & 1];
    const QKVTokenMeta* metas =
        reinterpret_cast<const QKVTokenMeta*>(smem + (k % stages) * geo.bytes() + geo.data_bytes() + geo.angle_bytes());
    const int64_t t0 = (g0 + g) * blockDim.y;
    const int ny = (int)min((int64_t)blockDim.y, (int64_t)num_tokens - t0);
    bool clash = false;
    for (int y = 0; y < ny; ++y) {
      const int64_t s = token_slot(metas[y], max_pos, block_size_log2, num_blocks);
      if (s >= 0 && mask != 0 && ((int)(s >> c_log2) != chunk || ((mask >> (s & (C - 1))) & 1u))) clash = true;
    }
    if (clash) {
      flush(chunk, mask);
      __syncthreads();  // the tile is free again
      mask = 0;
      chunk = -1;
    }
    tile_pos = -1;
    for (int y = 0; y < ny; ++y) {
      const int64_t s = token_slot(metas[y], max_pos, block_size_log2, num_blocks);
      if (s < 0) continue;
      if (chunk < 0) chunk = (int)(s >> c_log2);
      const int p = (int)(s & (C - 1));
      if ((int)(s >> c_log2) == chunk && !((mask >> p) & 1u)) {
        mask |= 1u << p;
        if (y == (int)threadIdx.y) tile_pos = p;
      }
    }
    if (tid == 0) {
      tile_chunks[(g + 1) & 1] = chunk;
      tile_masks[(g + 1) & 1] = mask;
    }
  };
  for (int k = 0; k < stages - 1; ++k) {
    if (k < steps) issue(k, k);
    cp_async_commit();
  }
  for (int k = 0; k < steps; ++k) {
    if (stages == 2) {
      cp_async_wait<0>();
    } else if (stages == 3) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<2>();
    }
    __syncthreads();
    if (TILE && k % passes == 0) place_group(k);
    const int n = k + stages - 1;
    if (n < steps) issue(n, n % stages);
    cp_async_commit();
    process(k, k % stages);
  }
  if (TILE) {
    __syncthreads();
    const int g = steps / passes;  // the groups this block placed
    if (tile_masks[g & 1] != 0) flush(tile_chunks[g & 1], tile_masks[g & 1]);
  }
}

// TableSlots is the slot source of qkv_values (cache_append): the slot of
// token t, as qkv_norm_rope places it, from cu_seqlens, pos_offsets and
// the block table; -1 (skipped, not recorded: qkv_norm_rope records it)
// where qkv_norm_rope writes no cache row: a position outside [0, max_pos),
// past the block table, or a block id outside the pool.
struct TableSlots {
  static constexpr bool kMapped = false;
  const int* cu_seqlens;  // null: one sequence
  const int* pos_offsets;
  const int* block_tables;
  int64_t max_pos, num_blocks;
  int num_seqs, max_blocks_per_seq, block_size_log2;

  // resolve: slot[j] of token t0 + j for j < n, else -1. The sequence of t0
  // is the last s with cu_seqlens[s] ≤ t0 (0 when none), as find_sequence
  // has it, found by bisection; later tokens step forward from it.
  template <int N>
  __device__ __forceinline__ void resolve(int64_t t0, int n, int64_t (&slot)[N]) const {
    int s = 0;
    if (cu_seqlens != nullptr) {
      int lo = 0, hi = num_seqs - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cu_seqlens[mid] <= t0) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      s = lo;
    }
    int64_t next = cu_seqlens != nullptr && s + 1 < num_seqs ? cu_seqlens[s + 1] : INT64_MAX;
    int64_t base = pos_offsets[s] - (cu_seqlens != nullptr ? cu_seqlens[s] : 0);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      slot[j] = -1;
      if (j >= n) continue;
      const int64_t t = t0 + j;
      while (t >= next) {  // only with cu_seqlens, s + 1 < num_seqs
        ++s;
        base = pos_offsets[s] - next;
        next = s + 1 < num_seqs ? cu_seqlens[s + 1] : INT64_MAX;
      }
      const int64_t pos = base + t;
      if (pos < 0 || pos >= max_pos) continue;
      const int64_t page = pos >> block_size_log2;
      if (page >= max_blocks_per_seq) continue;
      const int blk = block_tables[(int64_t)s * max_blocks_per_seq + page];
      if (blk < 0 || blk >= num_blocks) continue;
      slot[j] = ((int64_t)blk << block_size_log2) | (pos & ((1 << block_size_log2) - 1));
    }
  }
};

}  // namespace pkv

// qkv_values_<in>[_e4m3]: the V heads of qkv (value points at the first V
// head of token 0, token stride value_token_stride elements) into the
// x-split or shuffle layout, where qkv_norm_rope (value_cache null) writes
// Q and K: cache_append's token path without keys, so that 8-token runs of
// one page are written as whole pieces of token-minor V rather than
// element by element. Grid and block as cache_append (dispatch.PlanQKV).
#define PKV_QKV_VALUES(name, In, FP8)                                                              \
  extern "C" __global__ void __launch_bounds__(pkv::kAppendThreads) name(                        \
      const In* value, void* value_cache, const int* cu_seqlens, const int* pos_offsets,           \
      const int* block_tables, int64_t max_pos, int num_tokens, int num_seqs, int num_kv_heads,    \
      int head_dim, int64_t value_token_stride, int max_blocks_per_seq, int block_size_log2,       \
      int64_t num_blocks, float v_scale, int layout) {                                             \
    const pkv::TableSlots slots{cu_seqlens, pos_offsets, block_tables, max_pos, num_blocks,       \
                                num_seqs, max_blocks_per_seq, block_size_log2};                    \
    pkv::cache_append<In, FP8, pkv::kGroupTokens, false>(                                          \
        nullptr, value, nullptr, value_cache, nullptr, nullptr, nullptr, 0, 0, num_tokens,         \
        num_kv_heads, head_dim, 0, 0, value_token_stride, head_dim, 1.0f, v_scale, layout,         \
        block_size_log2, slots);                                                                   \
  }

#define PKV_QKV(name, In, FP8, SPLIT, TILE)                                                       \
  extern "C" __global__ void __launch_bounds__(TILE ? pkv::kQKVTileThreads : 256,                 \
                                               TILE ? pkv::kQKVTileBlocks : 1) name(              \
      const In* qkv, In* q_out, void* key_cache, void* value_cache, const int* cu_seqlens,        \
      const int* pos_offsets, const int* block_tables, const In* q_weight, const In* k_weight,    \
      const float* cos_sin, int64_t max_pos, int rot,                                             \
      unsigned long long* fault, int num_tokens, int num_seqs, int num_q_heads, int num_kv_heads, \
      int head_dim, int64_t qkv_token_stride, int max_blocks_per_seq, int block_size_log2,        \
      int64_t num_blocks, int norm, float eps, float k_scale, float v_scale, int neox,            \
      int layout, int tile_tokens) {                                                              \
    pkv::qkv_norm_rope<In, FP8, SPLIT, TILE>(qkv, q_out, key_cache, value_cache, cu_seqlens,      \
                                       pos_offsets, block_tables, q_weight, k_weight, cos_sin,    \
                                       max_pos, rot, fault, num_tokens, num_seqs, num_q_heads,    \
                                       num_kv_heads, head_dim, qkv_token_stride,                  \
                                       max_blocks_per_seq, block_size_log2, num_blocks, norm,     \
                                       eps, k_scale, v_scale, neox, layout, tile_tokens);         \
  }

PKV_QKV(qkv_norm_rope_f16, __half, false, false, false)
PKV_QKV(qkv_norm_rope_bf16, __nv_bfloat16, false, false, false)
PKV_QKV(qkv_norm_rope_f16_e4m3, __half, true, false, false)
PKV_QKV(qkv_norm_rope_bf16_e4m3, __nv_bfloat16, true, false, false)
PKV_QKV(qkv_norm_rope_f16_split, __half, false, true, false)
PKV_QKV(qkv_norm_rope_bf16_split, __nv_bfloat16, false, true, false)
PKV_QKV(qkv_norm_rope_f16_e4m3_split, __half, true, true, false)
PKV_QKV(qkv_norm_rope_bf16_e4m3_split, __nv_bfloat16, true, true, false)

PKV_QKV(qkv_norm_rope_f16_tile, __half, false, false, true)
PKV_QKV(qkv_norm_rope_bf16_tile, __nv_bfloat16, false, false, true)
PKV_QKV(qkv_norm_rope_f16_e4m3_tile, __half, true, false, true)
PKV_QKV(qkv_norm_rope_bf16_e4m3_tile, __nv_bfloat16, true, false, true)
PKV_QKV(qkv_norm_rope_f16_split_tile, __half, false, true, true)
PKV_QKV(qkv_norm_rope_bf16_split_tile, __nv_bfloat16, false, true, true)

PKV_QKV_VALUES(qkv_values_f16, __half, false)
PKV_QKV_VALUES(qkv_values_bf16, __nv_bfloat16, false)
PKV_QKV_VALUES(qkv_values_f16_e4m3, __half, true)
PKV_QKV_VALUES(qkv_values_bf16_e4m3, __nv_bfloat16, true)
