// qkv.cu: split a fused QKV activation, RMSNorm q and k per head, apply RoPE,
// write q token-major and K/V into the flash-layout paged cache.
//
// qkv_norm_rope_<in>[_e4m3]
//   qkv          [num_tokens, (num_q_heads + 2·num_kv_heads)·head_dim] of <in>,
//                token stride qkv_token_stride elements: q heads, k heads, v heads.
//   cu_seqlens   optional int32 [num_seqs + 1]: token t belongs to sequence s
//                with cu_seqlens[s] ≤ t < cu_seqlens[s+1] (null: one sequence).
//   pos_offsets  int64 [num_seqs]: token t of sequence s is at position
//                pos_offsets[s] + t − cu_seqlens[s], which is both its RoPE
//                position and its cache position.
//   norm         0: no norm; 1: RMSNorm of every q head with q_weight [head_dim]
//                and every k head with k_weight [head_dim] (of <in>):
//                x · w / sqrt(mean(x²) + eps), in f32.
//   cos, sin     f32 [max_pos, rot] with rot = head_dim (one per element) or
//                head_dim/2 (one per pair); neox as rope.cuh.
//   q_out        [num_tokens, num_q_heads, head_dim] of <in>.
//   key_cache,   flash layout [num_blocks, block_size, num_kv_heads, head_dim],
//   value_cache  <in> or fp8 e4m3 (/ k_scale, v_scale). The slot of position p
//                is block_tables[s][p / block_size]·block_size + p % block_size.
//                A position outside the cos/sin table is recorded in fault and
//                nothing of that token is written; a position beyond the block
//                table or a block id outside the pool is recorded and that
//                token's cache rows are not written (q_out still is).
// head_dim is a power of two from 16 to 256.
//
// Grid: ceil(num_tokens / blockDim.y) blocks; blockDim.y tokens per block,
// blockDim.x threads per token, a multiple of 32 (so that a warp serves one
// token), blockDim.x·blockDim.y ≤ 256. No shared memory.
// Work is cut in units: unit c of a head holds its elements 8c..8c+7 and
// head_dim/2 + 8c..+7 (two 16-byte pieces), which contain every rotated pair
// of both RoPE styles, so no lane needs another lane's elements; a head is
// head_dim/16 units on as many adjacent lanes, which reduce the norm with
// shuffles. Thread x of a token takes units x, x + blockDim.x, … (q heads,
// then k, then v), kQKVUnits per pass: they all sit at the same c, so its
// cos/sin values are loaded once per token (as float4 when both tables are
// 16-byte aligned) and its norm weights always come from the same two pieces.
// Its QKV loads go out before the sequence, position and block-table
// lookups, which they do not depend on, so the lookup chain overlaps the
// DRAM reads.
#include "cache.cuh"

namespace pkv {

// kQKVUnits is how many units a thread holds per pass (dispatch.QKVUnitsPerThread).
constexpr int kQKVUnits = 4;

// find_sequence returns the last s in [0, num_seqs) with cu_seqlens[s] ≤ t
// (0 when there is none), searched by the whole warp 32 points at a time, so
// that a batch of up to 33 sequences costs one dependent load. Every lane of
// the warp calls it with the same t.
__device__ __forceinline__ int find_sequence(const int* __restrict__ cu_seqlens, int num_seqs, int t) {
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

// load_units loads the two pieces of each of this thread's units of the pass
// at base (zeros past the last unit).
template <typename In>
__device__ __forceinline__ void load_units(const In* __restrict__ src_tok, int base, int units,
                                           int upr_log2, int head_dim, int d, uint4 ra[kQKVUnits],
                                           uint4 rb[kQKVUnits]) {
#pragma unroll
  for (int j = 0; j < kQKVUnits; ++j) {
    const int u = base + (int)threadIdx.x + j * (int)blockDim.x;
    ra[j] = rb[j] = make_uint4(0u, 0u, 0u, 0u);
    if (u < units) {
      const In* p = src_tok + (int64_t)(u >> upr_log2) * head_dim + d;
      ra[j] = load8(p);
      rb[j] = load8(p + (head_dim >> 1));
    }
  }
}

// load_angles reads the cos or sin values of one piece's 8 elements at p: 8
// consecutive floats, or with pairs 4, each serving an element pair (GPT-J
// with one value per pair). vec: p is 16-byte aligned.
__device__ __forceinline__ void load_angles(const float* __restrict__ p, bool pairs, bool vec, float f[8]) {
  if (pairs) {
    const float4 a = vec ? *reinterpret_cast<const float4*>(p) : make_float4(p[0], p[1], p[2], p[3]);
    f[0] = f[1] = a.x;
    f[2] = f[3] = a.y;
    f[4] = f[5] = a.z;
    f[6] = f[7] = a.w;
  } else if (vec) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = p[e];
  }
}

template <typename In, bool FP8>
__device__ __forceinline__ void qkv_norm_rope(
    const In* __restrict__ qkv, In* __restrict__ q_out, void* __restrict__ key_cache,
    void* __restrict__ value_cache, const int* __restrict__ cu_seqlens,
    const int64_t* __restrict__ pos_offsets, const int* __restrict__ block_tables,
    const In* __restrict__ q_weight, const In* __restrict__ k_weight, const float* __restrict__ cos_t,
    const float* __restrict__ sin_t, int64_t max_pos, int rot, unsigned long long* fault,
    int num_tokens, int num_seqs, int num_q_heads, int num_kv_heads, int head_dim,
    int64_t qkv_token_stride, int max_blocks_per_seq, int block_size_log2, int64_t num_blocks,
    int norm, float eps, float k_scale, float v_scale, int neox) {
  constexpr int U = kQKVUnits;
  const int64_t t = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
  if (t >= num_tokens) return;  // the token's whole warps: no shuffle is left waiting
  const int upr = head_dim >> 4;  // units (and lanes) per head
  const int upr_log2 = __ffs(upr) - 1;
  const int half = head_dim >> 1;
  const int d = ((int)threadIdx.x & (upr - 1)) << 3;  // the same for every unit of this thread
  const int normed = num_q_heads + num_kv_heads;     // heads [0, normed) are normed and rotated
  const int units = (normed + num_kv_heads) << upr_log2;
  const int stride = U * (int)blockDim.x;  // units per pass
  const float inv_dim = 1.0f / head_dim;   // exact: head_dim is a power of two
  const In* src_tok = qkv + t * qkv_token_stride;

  // The first pass's loads go out before anything that waits.
  uint4 ra[U], rb[U];
  load_units(src_tok, 0, units, upr_log2, head_dim, d, ra, rb);

  // The sequence and position of this token.
  int s = 0;
  int64_t start = 0;
  if (cu_seqlens != nullptr) {
    s = find_sequence(cu_seqlens, num_seqs, (int)t);
    start = cu_seqlens[s];
  }
  const int64_t pos = pos_offsets[s] + (t - start);
  if (pos < 0 || pos >= max_pos) {
    if (threadIdx.x == 0) record_fault(fault, kFaultPositionBeyondTable, t, pos, max_pos);
    return;
  }
  // This thread's cos/sin values: piece a (elements d..) and piece b (half + d..).
  float ca[8], sa[8], cb[8], sb[8];
  {
    const bool full = rot == head_dim;
    const bool pairs = !neox && !full;  // GPT-J, one value per pair
    const int oa = full || neox ? d : d >> 1;
    const int ob = full ? d + half : neox ? d : (d + half) >> 1;
    const bool vec = ((reinterpret_cast<uintptr_t>(cos_t) | reinterpret_cast<uintptr_t>(sin_t)) & 15) == 0;
    const float* crow = cos_t + pos * rot;
    const float* srow = sin_t + pos * rot;
    load_angles(crow + oa, pairs, vec, ca);
    load_angles(srow + oa, pairs, vec, sa);
    load_angles(crow + ob, pairs, vec, cb);
    load_angles(srow + ob, pairs, vec, sb);
  }
  // The cache slot, or -1 when the table cannot place this position.
  int64_t slot = -1;
  {
    const int64_t page = pos >> block_size_log2;
    if (page >= max_blocks_per_seq) {
      if (threadIdx.x == 0) record_fault(fault, kFaultKVLenBeyondTable, s, pos + 1, (int64_t)max_blocks_per_seq << block_size_log2);
    } else {
      const int blk = block_tables[(int64_t)s * max_blocks_per_seq + page];
      if (blk < 0 || blk >= num_blocks) {
        if (threadIdx.x == 0) record_fault(fault, kFaultBlockBeyondPool, s, page, blk);
      } else {
        slot = ((int64_t)blk << block_size_log2) | (pos & ((1 << block_size_log2) - 1));
      }
    }
  }

  // The pass loop's trip count is the same for every thread of the token, and
  // the shuffles sit outside any per-unit branch: every lane takes part.
  for (int base = 0;;) {
    // inv[j]: 1/√(mean(x²) + eps) of unit j's head, reduced over its lanes;
    // the reductions of the U units interleave.
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
        inv[j] = ss;
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
      const int u = base + (int)threadIdx.x + j * (int)blockDim.x;
      if (u >= units) continue;
      const int hh = u >> upr_log2;
      if (hh >= normed) {  // V: copied (or quantized) as given
        if (slot >= 0) {
          const int64_t at = (slot * num_kv_heads + (hh - normed)) * head_dim + d;
          store_cache8<In, FP8>(value_cache, at, ra[j], v_scale);
          store_cache8<In, FP8>(value_cache, at + half, rb[j], v_scale);
        }
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
        to_float8(load8(w + half), w, wb);
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
        *reinterpret_cast<uint4*>(dst) = pa;
        *reinterpret_cast<uint4*>(dst + half) = pb;
      } else {
        const int64_t at = (slot * num_kv_heads + (hh - num_q_heads)) * head_dim + d;
        store_cache8<In, FP8>(key_cache, at, pa, k_scale);
        store_cache8<In, FP8>(key_cache, at + half, pb, k_scale);
      }
    }
    base += stride;
    if (base >= units) break;
    load_units(src_tok, base, units, upr_log2, head_dim, d, ra, rb);
  }
}

}  // namespace pkv

#define PKV_QKV(name, In, FP8)                                                                    \
  extern "C" __global__ void __launch_bounds__(256) name(                                         \
      const In* qkv, In* q_out, void* key_cache, void* value_cache, const int* cu_seqlens,        \
      const int64_t* pos_offsets, const int* block_tables, const In* q_weight,                    \
      const In* k_weight, const float* cos_t, const float* sin_t, int64_t max_pos, int rot,       \
      unsigned long long* fault, int num_tokens, int num_seqs, int num_q_heads, int num_kv_heads, \
      int head_dim, int64_t qkv_token_stride, int max_blocks_per_seq, int block_size_log2,        \
      int64_t num_blocks, int norm, float eps, float k_scale, float v_scale, int neox) {          \
    pkv::qkv_norm_rope<In, FP8>(qkv, q_out, key_cache, value_cache, cu_seqlens, pos_offsets,      \
                                block_tables, q_weight, k_weight, cos_t, sin_t, max_pos, rot,     \
                                fault, num_tokens, num_seqs, num_q_heads, num_kv_heads, head_dim, \
                                qkv_token_stride, max_blocks_per_seq, block_size_log2,            \
                                num_blocks, norm, eps, k_scale, v_scale, neox);                   \
  }

PKV_QKV(qkv_norm_rope_f16, __half, false)
PKV_QKV(qkv_norm_rope_bf16, __nv_bfloat16, false)
PKV_QKV(qkv_norm_rope_f16_e4m3, __half, true)
PKV_QKV(qkv_norm_rope_bf16_e4m3, __nv_bfloat16, true)
