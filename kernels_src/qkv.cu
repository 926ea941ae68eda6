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
// token), blockDim.x·blockDim.y ≤ 256. Static shared memory: 16 KB, the cos
// and sin rows of up to 8 tokens.
// Work is cut in units: unit c of a head holds its elements 8c..8c+7 and
// head_dim/2 + 8c..+7 (two 16-byte pieces), which contain every rotated pair
// of both RoPE styles, so no lane needs another lane's elements; a head is
// head_dim/16 units on as many adjacent lanes, which reduce the norm with
// shuffles. Thread x of a token takes units x, x + blockDim.x, … (q heads,
// then k, then v), kQKVUnits per pass: they all sit at the same c, so its
// norm weights always come from the same two pieces. Its QKV loads go out
// before the sequence, position and block-table lookups, which they do not
// depend on, so the lookup chain overlaps the DRAM reads. The cos/sin values
// a token needs are copied once to shared memory (cp.async, 16 bytes at a
// time when both tables are 16-byte aligned) by the lanes of its first head,
// and read back 4 per piece where they are used; each unit is computed 4
// elements of each piece at a time. Both keep the compute phase's registers
// down (sm_90: 80 for f16/bf16), so that more warps, and more QKV loads, are
// resident per SM.
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

// kQKVMaxTokensPerBlock is the most tokens a block can hold (256 threads,
// a warp per token at least); each has its cos and sin rows staged in shared
// memory.
constexpr int kQKVMaxTokensPerBlock = 8;
constexpr int kQKVMaxRot = 256;

// cp_async4 and cp_async16 start a 4- or 16-byte copy from global to shared
// memory (address dst) through L1, holding no register while it flies.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// stage_angles starts the copy of n consecutive floats (4 or 8) at src to
// shared address dst: as 16-byte pieces when vec (src 16-byte aligned), else
// one by one.
__device__ __forceinline__ void stage_angles(uint32_t dst, const float* src, int n, bool vec) {
  if (vec) {
    cp_async16(dst, src);
    if (n == 8) cp_async16(dst + 16, src + 4);
  } else {
    for (int e = 0; e < n; ++e) cp_async4(dst + 4 * e, src + e);
  }
}

// lds4 reads 16 bytes of shared memory at shared address a. Volatile, so
// that a thread's reads of the same values for its several units are neither
// merged into one set held in registers across the units nor hoisted out of
// the pass loop: they come back where they are used, which is what keeps the
// compute phase's registers low.
__device__ __forceinline__ float4 lds4(uint32_t a) {
  float4 v;
  asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a));
  return v;
}

// angles4 reads the cos or sin values of elements 4h..4h+3 of a piece whose
// 8 values start at shared address a: 4 consecutive floats, or with pairs the
// 2 at a + 8h, each serving an element pair (GPT-J with one value per pair).
// One 16-byte read either way, and the choice is a select, not a branch.
__device__ __forceinline__ void angles4(uint32_t a, int h, bool pairs, float f[4]) {
  const float4 v = lds4(pairs ? a : a + 16 * h);
  const float p0 = h == 0 ? v.x : v.z, p1 = h == 0 ? v.y : v.w;
  f[0] = pairs ? p0 : v.x;
  f[1] = pairs ? p0 : v.y;
  f[2] = pairs ? p1 : v.z;
  f[3] = pairs ? p1 : v.w;
}

// to_float4 converts words 2h, 2h+1 (elements 4h..4h+3) of v to float.
template <typename In>
__device__ __forceinline__ void to_float4(uint4 v, int h, float f[4]) {
  float f8[8];
  to_float8(h == 0 ? make_uint4(v.x, v.y, 0u, 0u) : make_uint4(v.z, v.w, 0u, 0u), static_cast<const In*>(nullptr), f8);
#pragma unroll
  for (int e = 0; e < 4; ++e) f[e] = f8[e];
}

// pack2 rounds 2 floats to In and packs them as one 32-bit word (element 2i
// in the low half, as pack8).
template <typename In>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const In e[2] = {from_float<In>(lo), from_float<In>(hi)};
  uint32_t w;
  memcpy(&w, e, 4);
  return w;
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
  // The token's cos and sin rows, as far as its threads read them, go to
  // shared memory: the lanes of the first head (which between them have
  // every d) copy each piece's values once, while the block table lookup
  // below is in flight. Pieces: a (elements d..) at offset oa of a row, b
  // (half + d..) at ob.
  const bool full = rot == head_dim;
  const bool pairs = !neox && !full;  // GPT-J, one value per pair
  const int oa = full || neox ? d : d >> 1;
  const int ob = full ? d + half : neox ? d : (d + half) >> 1;
  __shared__ __align__(16) float angle_rows[kQKVMaxTokensPerBlock][2][kQKVMaxRot];
  const uint32_t cos_s = (uint32_t)__cvta_generic_to_shared(angle_rows[threadIdx.y][0]);
  const uint32_t sin_s = cos_s + 4 * kQKVMaxRot;
  if ((int)threadIdx.x < upr) {
    const bool vec = ((reinterpret_cast<uintptr_t>(cos_t) | reinterpret_cast<uintptr_t>(sin_t)) & 15) == 0;
    const float* crow = cos_t + pos * rot;
    const float* srow = sin_t + pos * rot;
    const int n = pairs ? 4 : 8;
    stage_angles(cos_s + 4 * oa, crow + oa, n, vec);
    stage_angles(sin_s + 4 * oa, srow + oa, n, vec);
    if (ob != oa) {  // NeoX with one value per pair reads the same values twice
      stage_angles(cos_s + 4 * ob, crow + ob, n, vec);
      stage_angles(sin_s + 4 * ob, srow + ob, n, vec);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
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

  // The rows are complete once the copying lanes have waited for their
  // copies and the token's warps have met (barrier 1 + threadIdx.y, one per
  // token of the block; every thread of the token gets here).
  if ((int)threadIdx.x < upr) asm volatile("cp.async.wait_all;\n" ::: "memory");
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + (int)threadIdx.y), "r"((int)blockDim.x) : "memory");
  const uint32_t ca_s = cos_s + 4 * oa, sa_s = sin_s + 4 * oa;
  const uint32_t cb_s = cos_s + 4 * ob, sb_s = sin_s + 4 * ob;

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
      // The unit is converted, normed and rotated 4 elements of each piece
      // at a time (h = 0, 1), so that only 4 of its cos, sin and weight
      // values per piece are live at once.
      uint4 pa, pb;  // the rotated pieces, packed
      const In* w = (is_q ? q_weight : k_weight) + d;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float xa[4], xb[4];
        to_float4<In>(ra[j], h, xa);
        to_float4<In>(rb[j], h, xb);
        if (norm) {
          float wa[4], wb[4];
          const uint2 qa = *reinterpret_cast<const uint2*>(w + 4 * h);
          const uint2 qb = *reinterpret_cast<const uint2*>(w + half + 4 * h);
          to_float4<In>(make_uint4(qa.x, qa.y, 0u, 0u), 0, wa);
          to_float4<In>(make_uint4(qb.x, qb.y, 0u, 0u), 0, wb);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            xa[e] = xa[e] * inv[j] * wa[e];
            xb[e] = xb[e] * inv[j] * wb[e];
          }
        }
        // NeoX: element d+e pairs with half+d+e; GPT-J: elements 2i and 2i+1
        // of each piece pair up. The style picks each element's partner and
        // sign by selects, in one code path for both. Piece a first, then
        // piece b: 8 angle values live at a time.
        float oa4[4], ob4[4];
        {
          float ca[4], sa[4];
          angles4(ca_s, h, pairs, ca);
          angles4(sa_s, h, pairs, sa);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float partner = neox ? xb[e] : xa[e ^ 1];
            const float sae = neox || (e & 1) == 0 ? -sa[e] : sa[e];
            oa4[e] = xa[e] * ca[e] + partner * sae;
          }
        }
        {
          float cb[4], sb[4];
          angles4(cb_s, h, pairs, cb);
          angles4(sb_s, h, pairs, sb);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float partner = neox ? xa[e] : xb[e ^ 1];
            const float sbe = !neox && (e & 1) == 0 ? -sb[e] : sb[e];
            ob4[e] = xb[e] * cb[e] + partner * sbe;
          }
        }
        const uint32_t a0 = pack2<In>(oa4[0], oa4[1]), a1 = pack2<In>(oa4[2], oa4[3]);
        const uint32_t b0 = pack2<In>(ob4[0], ob4[1]), b1 = pack2<In>(ob4[2], ob4[3]);
        if (h == 0) {
          pa.x = a0, pa.y = a1, pb.x = b0, pb.y = b1;
        } else {
          pa.z = a0, pa.w = a1, pb.z = b0, pb.w = b1;
        }
      }
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
