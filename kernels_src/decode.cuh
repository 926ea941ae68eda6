// decode.cuh: batched paged decode attention, one query token per sequence,
// single-pass and split-K (phase 1), grouped by KV head.
//
// paged_decode_<q>[_e4m3]_hd<D>_g<GT>
//   q            [num_seqs, num_q_heads, D] of type <q>, sequence stride q_seq_stride
//                elements (heads contiguous).
//   k_cache,     flash layout [num_blocks, block_size, num_kv_heads, D] of type <q>,
//   v_cache      or fp8 e4m3 (real value = stored · k_scale / v_scale) for _e4m3.
//   block_tables int32 [num_seqs, max_blocks_per_seq]; kv_lens int32 [num_seqs].
//                Both are read on the device. kv_len is clamped to
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
// Grid: (num_kv_heads, num_seqs, splits). Block: 128 threads. One block loads
// each K/V row of its KV head once for all G = num_q_heads/num_kv_heads query
// heads (G ≤ GT, the next power of two). Threads form groups of D/8 lanes;
// each lane owns 8 of the D elements, each group streams its own tokens with
// an online softmax, and the groups are merged at the end through shuffles
// and static shared memory (GT·D + 8·GT floats + GT·D floats of q).
#pragma once
#include "common.cuh"

namespace pkv {

constexpr int kDecodeThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// The largest split count: the fused merge keeps GT·kMaxSplits weights in
// the shared memory of the accumulators (GT·D floats, D ≥ 64).
constexpr int kMaxSplits = 64;

template <typename T, typename C, int D, int GT>
__device__ __forceinline__ void paged_decode(
    T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_out,
    float* __restrict__ partial_max, float* __restrict__ partial_sum,
    unsigned int* __restrict__ counters, const T* __restrict__ q,
    const C* __restrict__ k_cache, const C* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ kv_lens,
    unsigned long long* fault, int64_t q_seq_stride, int num_q_heads, int max_blocks_per_seq,
    int block_size_log2, int64_t num_blocks, float scale, float k_scale, float v_scale) {
  constexpr int LPT = D / 8;             // lanes per token
  constexpr int GPW = 32 / LPT;          // token groups per warp
  constexpr int NG = (kDecodeThreads / 32) * GPW;  // token groups per block
  constexpr int U = GT >= 8 ? 2 : 4;     // tokens in flight per group
  constexpr int NW = kDecodeThreads / 32;

  __shared__ __align__(16) float q_s[GT][D];
  __shared__ __align__(16) float acc_s[GT][D];
  __shared__ float m_s[NW][GT];
  __shared__ float l_s[NW][GT];

  const int kvh = blockIdx.x;
  const int num_kv_heads = gridDim.x;
  const int seq = blockIdx.y;
  const int split = blockIdx.z;
  const int splits = gridDim.z;
  const int G = num_q_heads / num_kv_heads;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gl = lane % LPT;

  // q is pre-multiplied by scale·log2(e)·k_scale so scores come out in log2 units.
  const float q_mul = scale * kLog2e * k_scale * decode_scale<C>();
  for (int i = threadIdx.x; i < GT * D; i += kDecodeThreads) {
    const int g = i / D;
    const int d = i - g * D;
    float x = 0.0f;
    if (g < G) x = to_float(q[seq * q_seq_stride + (int64_t)(kvh * G + g) * D + d]) * q_mul;
    q_s[g][d] = x;
    acc_s[g][d] = 0.0f;
  }

  int len = kv_lens[seq];
  const int cap = max_blocks_per_seq << block_size_log2;
  if (len > cap || len < 0) {
    if (kvh == 0 && split == 0 && threadIdx.x == 0) record_fault(fault, kFaultKVLenBeyondTable, seq, len, cap);
    len = len < 0 ? 0 : cap;
  }
  const int bs_mask = (1 << block_size_log2) - 1;
  const int pages = (len + bs_mask) >> block_size_log2;
  const int chunk_pages = (pages + splits - 1) / splits;
  const int start = (split * chunk_pages) << block_size_log2;
  const int end = min(len, start + (chunk_pages << block_size_log2));
  const int* table = block_tables + (int64_t)seq * max_blocks_per_seq;
  const int64_t row_stride = (int64_t)num_kv_heads * D;
  const int64_t head_off = (int64_t)kvh * D + gl * 8;

  float m[GT], l[GT], acc[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }
  __syncthreads();

  using V8 = typename Vec8<C>::type;
  // The trip count must be the same for every lane of a warp (the score
  // reduction shuffles across the whole warp), so the loop runs over the
  // warp's tiles and each group masks the tokens past end.
  for (int wbase = start + warp * GPW; wbase < end; wbase += NG * U) {
    const int base = wbase + lane / LPT;
    V8 kr[U], vr[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int t = base + j * NG;
      if (t < end) {
        int blk = table[t >> block_size_log2];
        if (blk < 0 || blk >= num_blocks) {
          record_fault(fault, kFaultBlockBeyondPool, seq, t >> block_size_log2, blk);
          blk = 0;
        }
        const int64_t off = (((int64_t)blk << block_size_log2) | (t & bs_mask)) * row_stride + head_off;
        kr[j] = load8(k_cache + off);
        vr[j] = load8(v_cache + off);
      } else {
        kr[j] = V8{};
        vr[j] = V8{};
      }
    }
    float s[U][GT];
    {
      float kf[U][8];
#pragma unroll
      for (int j = 0; j < U; ++j) to_float8(kr[j], k_cache, kf[j]);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        const float4 qa = *reinterpret_cast<const float4*>(&q_s[g][gl * 8]);
        const float4 qb = *reinterpret_cast<const float4*>(&q_s[g][gl * 8 + 4]);
#pragma unroll
        for (int j = 0; j < U; ++j) {
          float x = qa.x * kf[j][0];
          x = fmaf(qa.y, kf[j][1], x);
          x = fmaf(qa.z, kf[j][2], x);
          x = fmaf(qa.w, kf[j][3], x);
          x = fmaf(qb.x, kf[j][4], x);
          x = fmaf(qb.y, kf[j][5], x);
          x = fmaf(qb.z, kf[j][6], x);
          x = fmaf(qb.w, kf[j][7], x);
          s[j][g] = x;
        }
      }
    }
#pragma unroll
    for (int o = LPT / 2; o > 0; o >>= 1) {
#pragma unroll
      for (int j = 0; j < U; ++j)
#pragma unroll
        for (int g = 0; g < GT; ++g) s[j][g] += __shfl_xor_sync(0xffffffffu, s[j][g], o);
    }
    // Online softmax over this tile. A group whose tokens all lie past end
    // (and that has seen none before) keeps max -inf: alpha 1, weights 0.
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float mt = m[g];
#pragma unroll
      for (int j = 0; j < U; ++j) {
        if (base + j * NG >= end) s[j][g] = -INFINITY;
        mt = fmaxf(mt, s[j][g]);
      }
      const bool none = mt == -INFINITY;
      const float alpha = none ? 1.0f : exp2f(m[g] - mt);
      float psum = 0.0f;
#pragma unroll
      for (int j = 0; j < U; ++j) {
        s[j][g] = none ? 0.0f : exp2f(s[j][g] - mt);
        psum += s[j][g];
      }
      l[g] = l[g] * alpha + psum;
      m[g] = mt;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      float vf[8];
      to_float8(vr[j], v_cache, vf);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(s[j][g], vf[e], acc[g][e]);
    }
  }

  // Merge the token groups of each warp.
#pragma unroll
  for (int o = LPT; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mn = fmaxf(m[g], mo);
      const float a = mn == -INFINITY ? 0.0f : exp2f(m[g] - mn);
      const float b = mn == -INFINITY ? 0.0f : exp2f(mo - mn);
      l[g] = l[g] * a + lo * b;
      m[g] = mn;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][e], o);
        acc[g][e] = acc[g][e] * a + ao * b;
      }
    }
  }
  // Merge the warps through shared memory.
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
  }
  __syncthreads();
  if (lane < LPT) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float mx = m_s[0][g];
#pragma unroll
      for (int w = 1; w < NW; ++w) mx = fmaxf(mx, m_s[w][g]);
      const float f = mx == -INFINITY ? 0.0f : exp2f(m[g] - mx);
#pragma unroll
      for (int e = 0; e < 8; ++e) atomicAdd(&acc_s[g][gl * 8 + e], acc[g][e] * f);
    }
  }
  __syncthreads();

  const float v_mul = v_scale * decode_scale<C>();
  for (int i = threadIdx.x; i < G * D; i += kDecodeThreads) {
    const int g = i / D;
    const int d = i - g * D;
    float mx = m_s[0][g];
#pragma unroll
    for (int w = 1; w < NW; ++w) mx = fmaxf(mx, m_s[w][g]);
    float sum = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NW; ++w) sum += l_s[w][g] * exp2f(m_s[w][g] - mx);
    }
    const float o = sum > 0.0f ? acc_s[g][d] * v_mul / sum : 0.0f;
    const int64_t row = (int64_t)seq * num_q_heads + kvh * G + g;
    if (splits == 1) {
      out[row * D + d] = from_float<T>(o);
      if (d == 0 && lse != nullptr) lse[row] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    } else {
      const int64_t prow = row * splits + split;
      partial_out[prow * D + d] = o;
      if (d == 0) {
        partial_max[prow] = mx;
        partial_sum[prow] = sum;
      }
    }
  }
  if (splits == 1) return;

  // Split-K phase 2, fused: the last block of this (sequence, KV head) to
  // finish merges every split by log-sum-exp and resets the counter, so the
  // counters are zero again for the next launch (and graph replay).
  __shared__ bool last_s;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int* counter = counters + (int64_t)seq * num_kv_heads + kvh;
    last_s = atomicAdd(counter, 1u) == (unsigned int)(splits - 1);
    if (last_s) *counter = 0u;
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  // Weights of each split for each head: w = sum_z · 2^(max_z − M) / L.
  float* w_s = &acc_s[0][0];  // reused: GT·D ≥ GT·kMaxSplits floats
  for (int i = threadIdx.x; i < G * splits; i += kDecodeThreads) {
    const int g = i / splits;
    const int z = i - g * splits;
    const int64_t prow = ((int64_t)seq * num_q_heads + kvh * G + g) * splits + z;
    w_s[g * kMaxSplits + z] = __ldcg(partial_max + prow);
    q_s[g][z] = __ldcg(partial_sum + prow);  // q_s is free now
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
    for (int z = 0; z < splits; ++z) mx = fmaxf(mx, w_s[g * kMaxSplits + z]);
    float sum = 0.0f;
    for (int z = 0; z < splits; ++z) {
      const float w = mx == -INFINITY ? 0.0f : q_s[g][z] * exp2f(w_s[g * kMaxSplits + z] - mx);
      w_s[g * kMaxSplits + z] = w;
      sum += w;
    }
    m_s[0][g] = mx;
    l_s[0][g] = sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += kDecodeThreads) {
    const int g = i / D;
    const int d = i - g * D;
    const int64_t row = (int64_t)seq * num_q_heads + kvh * G + g;
    const float sum = l_s[0][g];
    float o = 0.0f;
    for (int z = 0; z < splits; ++z) o = fmaf(w_s[g * kMaxSplits + z], __ldcg(partial_out + (row * splits + z) * D + d), o);
    out[row * D + d] = from_float<T>(sum > 0.0f ? o / sum : 0.0f);
    if (d == 0 && lse != nullptr) lse[row] = sum > 0.0f ? (m_s[0][g] + log2f(sum)) * kLn2 : -INFINITY;
  }
}

}  // namespace pkv
#define PKV_DECODE(name, T, C, D, GT)                                                           \
  extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads) name(                       \
      T* out, float* lse, float* partial_out, float* partial_max, float* partial_sum,            \
      unsigned int* counters, const T* q, const C* k_cache, const C* v_cache, const int* block_tables,                   \
      const int* kv_lens, unsigned long long* fault, int64_t q_seq_stride, int num_q_heads,      \
      int max_blocks_per_seq, int block_size_log2, int64_t num_blocks, float scale,              \
      float k_scale, float v_scale) {                                                            \
    pkv::paged_decode<T, C, D, GT>(out, lse, partial_out, partial_max, partial_sum, counters, q, \
                                   k_cache,                                                      \
                                   v_cache, block_tables, kv_lens, fault, q_seq_stride,          \
                                   num_q_heads, max_blocks_per_seq, block_size_log2, num_blocks, \
                                   scale, k_scale, v_scale);                                     \
  }

#define PKV_DECODE_ALL_G(prefix, T, C, D) \
  PKV_DECODE(prefix##_hd##D##_g1, T, C, D, 1) \
  PKV_DECODE(prefix##_hd##D##_g2, T, C, D, 2) \
  PKV_DECODE(prefix##_hd##D##_g4, T, C, D, 4) \
  PKV_DECODE(prefix##_hd##D##_g8, T, C, D, 8) \
  PKV_DECODE(prefix##_hd##D##_g16, T, C, D, 16)

#define PKV_DECODE_ALL(prefix, T, C) \
  PKV_DECODE_ALL_G(prefix, T, C, 64)  \
  PKV_DECODE_ALL_G(prefix, T, C, 128) \
  PKV_DECODE_ALL_G(prefix, T, C, 256)

