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
// Grid: num_tokens blocks of 128 threads. Lanes work in groups of head_dim/8,
// one group per head, each lane 8 elements; the norm reduces across the
// group with shuffles and NeoX partners are exchanged with shuffles.
#include "cache.cuh"

namespace pkv {

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
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  // The sequence of this token: the last s with cu_seqlens[s] ≤ t.
  int s = 0;
  if (cu_seqlens != nullptr) {
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (cu_seqlens[mid] <= t) lo = mid; else hi = mid - 1;
    }
    s = lo;
  }
  const int64_t pos = pos_offsets[s] + (t - (cu_seqlens != nullptr ? cu_seqlens[s] : 0));
  if (pos < 0 || pos >= max_pos) {
    if (threadIdx.x == 0) record_fault(fault, kFaultPositionBeyondTable, t, pos, max_pos);
    return;
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
  const int lpt = head_dim >> 3;  // lanes per head
  const int lane = threadIdx.x & 31;
  const int gl = lane % lpt;
  const int groups_per_warp = 32 / lpt;
  const int groups = (blockDim.x >> 5) * groups_per_warp;
  const int heads = num_q_heads + num_kv_heads;  // normed and rotated
  const int half = head_dim >> 1;
  const In* src_tok = qkv + (int64_t)t * qkv_token_stride;
  const float* crow = cos_t + pos * rot;
  const float* srow = sin_t + pos * rot;
  // Warp-uniform trip count: every lane takes part in the shuffles.
  for (int hb = (threadIdx.x >> 5) * groups_per_warp; hb < heads; hb += groups) {
    const int hh = hb + lane / lpt;
    const bool valid = hh < heads;
    const bool is_q = hh < num_q_heads;
    const int h = is_q ? hh : hh - num_q_heads;
    const int d = gl * 8;
    float x[8];
    if (valid) {
      const In* src = src_tok + (int64_t)hh * head_dim + d;
      to_float8(load8(src), src, x);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = 0.0f;
    }
    if (norm) {
      float ss = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(x[e], x[e], ss);
      for (int o = lpt >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss / head_dim + eps);
      float w[8];
      if (valid) {
        const In* wp = (is_q ? q_weight : k_weight) + d;
        to_float8(load8(wp), wp, w);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) w[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = x[e] * inv * w[e];
    }
    float o[8];
    if (neox) {
      // The partner of element d+e is d+e ± half, held by lane gl ± lpt/2.
      const bool first = d < half;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float partner = __shfl_xor_sync(0xffffffffu, x[e], lpt >> 1);
        const int el = d + e;
        const int ci = rot == head_dim ? el : (first ? el : el - half);
        o[e] = first ? x[e] * crow[ci] - partner * srow[ci] : x[e] * crow[ci] + partner * srow[ci];
      }
    } else {
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const int ea = d + 2 * p;
        const int ca = rot == head_dim ? ea : ea >> 1;
        const int cb = rot == head_dim ? ea + 1 : ea >> 1;
        o[2 * p] = x[2 * p] * crow[ca] - x[2 * p + 1] * srow[ca];
        o[2 * p + 1] = x[2 * p + 1] * crow[cb] + x[2 * p] * srow[cb];
      }
    }
    if (!valid) continue;
    uint4 packed;
    In* pe = reinterpret_cast<In*>(&packed);
#pragma unroll
    for (int e = 0; e < 8; ++e) pe[e] = from_float<In>(o[e]);
    if (is_q) {
      *reinterpret_cast<uint4*>(q_out + ((int64_t)t * num_q_heads + h) * head_dim + d) = packed;
    } else if (slot >= 0) {
      const int64_t at = (slot * num_kv_heads + h) * head_dim + d;
      if constexpr (FP8) {
        store8<1>(key_cache, at, 1, to_e4m3x8<In>(packed, k_scale));
      } else {
        store8<2>(key_cache, at, 1, packed);
      }
    }
  }
  if (slot < 0) return;
  // V: copied (or quantized) as given.
  const int vecs = num_kv_heads * lpt;
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
    const int h = i / lpt;
    const int d = (i - h * lpt) << 3;
    const uint4 v = load8(src_tok + (int64_t)(heads + h) * head_dim + d);
    const int64_t at = (slot * num_kv_heads + h) * head_dim + d;
    if constexpr (FP8) {
      store8<1>(value_cache, at, 1, to_e4m3x8<In>(v, v_scale));
    } else {
      store8<2>(value_cache, at, 1, v);
    }
  }
}

}  // namespace pkv

#define PKV_QKV(name, In, FP8)                                                                    \
  extern "C" __global__ void __launch_bounds__(128) name(                                         \
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
