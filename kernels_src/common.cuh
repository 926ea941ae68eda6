// common.cuh: helpers shared by every pagedkv kernel: element types, 16-byte
// vector loads and their conversion to float, fp8 e4m3 encode/decode, and the
// fault record through which kernels report bad device-resident indices.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace pkv {

// fp8 e4m3 (OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN) is stored
// as a raw byte; compute_80 has no conversion instruction for it.
struct e4m3 {
  uint8_t bits;
};

// Fault codes written to the fault record (see record_fault). Keep in sync with
// faultCode in the Go root package.
enum FaultCode : long long {
  kFaultNone = 0,
  kFaultSlotBeyondCache = 1,   // a = token, b = slot, c = cache slots
  kFaultRemapBeyondTable = 2,  // a = token, b = slot, c = remap entries
  kFaultKVLenBeyondTable = 3,  // a = sequence, b = kv_len, c = table capacity
  kFaultBlockBeyondPool = 4,   // a = sequence, b = table entry index, c = block id
  kFaultPositionBeyondTable = 5,  // a = token, b = position, c = cos/sin rows
  kFaultCuSeqlensInvalid = 6,     // a = sequence, b = cu_seqlens_q[a], c = cu_seqlens_q[a+1]
  kFaultPosOffsetBeyondTable = 7, // a = sequence, b = pos_offset, c = table capacity
};

// record_fault keeps the first fault of a launch: fault points at four
// unsigned long longs {code, a, b, c}; later faults are dropped. A null
// record means the caller does not track faults.
__device__ __forceinline__ void record_fault(unsigned long long* fault, long long code, long long a,
                                             long long b, long long c) {
  if (fault == nullptr) return;
  if (atomicCAS(fault, 0ull, (unsigned long long)code) == 0ull) {
    fault[1] = (unsigned long long)a;
    fault[2] = (unsigned long long)b;
    fault[3] = (unsigned long long)c;
  }
}

// exp2_ftz is 2^x by the special-function unit, flushing a result below
// 2^-126 to zero (no probability that small changes a row's sum or output);
// exp2f without fast-math adds a denormal fix-up around the same
// instruction.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh_approx is tanh(x) by the special-function unit (absolute error
// about 2^-11, below a 16-bit output's rounding), for logit soft-capping.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ScoreMods are the score modifiers of the attention entries ending _mods,
// for one lane, in log2 units: a score x (scale·q·k·log2(e)) of token t
// becomes cap·tanh(x/cap) (cap > 0) plus slope·(t − qpos) of the lane's
// head, and only tokens lo … end−1 count (lo: the sliding window's first
// token, 0 without one). Sinks are added by the merges.
struct ScoreMods {
  int lo;
  int qpos;
  float cap;      // soft-cap·log2(e); 0 = off
  float inv_cap;  // 1/cap
  float slope0;   // ALiBi slope·log2(e) of the lane's first and second head (0: none)
  float slope1;
};

// mod_score applies m to a score x of token t, slope being the head's; end
// is the first token past the sequence or split.
__device__ __forceinline__ float mod_score(float x, int t, int end, const ScoreMods& m, float slope) {
  if (m.cap != 0.0f) x = m.cap * tanh_approx(x * m.inv_cap);
  x = fmaf(slope, (float)(t - m.qpos), x);
  return t < end && t >= m.lo ? x : -INFINITY;
}

// BadBlock keeps a loader's block-table checks out of its branches (the
// varlen and decode loaders): row
// maps an entry to the pool row of a KV position, reading block 0 for an
// entry outside [0, num_blocks) and remembering it, and report records the
// last such entry once, after the loop (kFaultBlockBeyondPool). Past a
// sequence's end lookups return 0, which is always in the pool. Without
// branches and with rows in 32 bits, the 128-row kernels' loop is 746 SASS
// instructions instead of 842 and the 64-row one's 774 instead of 1189
// (ptxas 11.8); prefill runs 5–7% faster, small-query 15% (H200,
// 2026-12-02).
struct BadBlock {
  int pos = -1, blk = 0;

  // bound returns row's nb for a pool of num_blocks: entries compare as
  // unsigned, so negative ones are out too. Validate bounds NumBlocks
  // below 2^31 and NumBlocks·BlockSize to 2^32, so rows fit in 32 bits.
  static __device__ __forceinline__ uint32_t bound(int64_t num_blocks) {
    return (uint32_t)min(num_blocks, (int64_t)1 << 31);
  }
  // block returns entry id of KV position pos_, or 0 outside the pool.
  __device__ __forceinline__ int block(int id, int pos_, uint32_t nb) {
    const bool out = (uint32_t)id >= nb;
    pos = out ? pos_ : pos;
    blk = out ? id : blk;
    return out ? 0 : id;
  }
  // row returns the pool row of KV position pos_ in entry id's block, read
  // as block id·id_mul + id_add (HeadRows in cache.cuh), or in block 0
  // outside the pool.
  __device__ __forceinline__ int64_t row(int id, int pos_, int block_size_log2, uint32_t nb, int id_mul = 1,
                                         int id_add = 0) {
    const uint32_t b = (uint32_t)block(id, pos_, nb) * (uint32_t)id_mul + (uint32_t)id_add;
    return (int64_t)((b << block_size_log2) | ((uint32_t)pos_ & ((1u << block_size_log2) - 1)));
  }
  __device__ __forceinline__ void report(unsigned long long* fault, int seq, int block_size_log2) const {
    if (pos >= 0) record_fault(fault, kFaultBlockBeyondPool, seq, pos >> block_size_log2, blk);
  }
};

// Vec8 is the register type that holds 8 elements of T: 16 bytes for 16-bit
// types, 8 bytes for fp8.
template <typename T>
struct Vec8 {
  using type = uint4;
};
template <>
struct Vec8<e4m3> {
  using type = uint2;
};

// smem_addr is p's address in the shared window, as cp.async and ldmatrix
// take it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// cluster_sync is a barrier over every thread of the thread-block cluster:
// writes to shared memory before it are visible to the whole cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive;\n" ::: "memory");
  asm volatile("barrier.cluster.wait;\n" ::: "memory");
}

// cluster_load reads the f32 at p in the shared memory of cluster block rank.
__device__ __forceinline__ float cluster_load(const float* p, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// cluster_load4 reads the four f32 at p (16-byte aligned) in the shared
// memory of cluster block rank.
__device__ __forceinline__ float4 cluster_load4(const float* p, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

// cp_async16 copies 16 bytes global → shared, or writes 16 zero bytes when
// bytes is 0 (src is then not read); cp_async4 copies 4 bytes (through L1).
// A thread sees the data after its cp_async_wait; other threads after a
// barrier that follows it.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <typename T>
__device__ __forceinline__ typename Vec8<T>::type load8(const T* p) {
  return *reinterpret_cast<const typename Vec8<T>::type*>(p);
}

// e4m3x2_to_half2 decodes the two low bytes of x into a half2 holding the
// values divided by 256: moving the 4-bit exponent and 3-bit mantissa into a
// half's fields keeps the bias difference (15 - 7) as a power of two, and
// e4m3 subnormals land on half subnormals, so the decode is exact.
// The two bytes are picked from x by a __byte_perm selector that puts them
// in bytes 1 and 3 and zeros in bytes 0 and 2 (0x1404: bytes 0 and 1).
__device__ __forceinline__ uint32_t e4m3_pair_to_half2_bits_div256(uint32_t x, uint32_t selector) {
  const uint32_t u = __byte_perm(x, 0u, selector);
  return (u & 0x80008000u) | ((u & 0x7F007F00u) >> 1);
}
__device__ __forceinline__ __half2 e4m3x2_to_half2_div256(uint32_t x) {
  uint32_t h = e4m3_pair_to_half2_bits_div256(x, 0x1404);
  return *reinterpret_cast<__half2*>(&h);
}

// to_float8 converts 8 elements to float. For e4m3 the results are the
// stored values divided by 256 (see e4m3x2_to_half2_div256); callers fold the
// 256 into the tensor scale.
__device__ __forceinline__ void to_float8(uint4 v, const __half*, float f[8]) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __half22float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void to_float8(uint4 v, const __nv_bfloat16*, float f[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void to_float8(uint2 v, const e4m3*, float f[8]) {
  uint32_t w[2] = {v.x, v.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float2 a = __half22float2(e4m3x2_to_half2_div256(w[i]));
    float2 b = __half22float2(e4m3x2_to_half2_div256(w[i] >> 16));
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

// The scale that turns to_float8's output into real values.
template <typename T>
__device__ __forceinline__ float decode_scale() {
  return 1.0f;
}
template <>
__device__ __forceinline__ float decode_scale<e4m3>() {
  return 256.0f;
}

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// f32_to_e4m3 rounds to the nearest e4m3 value, ties to even, saturating
// finite overflow and infinities to ±448; NaN becomes 0x7F. Branch-free:
// both the normal and the subnormal encodings are computed and one is
// selected, so lanes of a warp never split over a value's range (the cache
// writes convert every element of K and V this way).
__device__ __forceinline__ uint32_t f32_to_e4m3(float f) {
  const uint32_t sign = (__float_as_uint(f) >> 24) & 0x80u;
  const float a = fabsf(f);
  // Normal: round the mantissa to 3 bits (ties to even), rebias 127 → 7.
  // Garbage below 2^-6, where the subnormal encoding is selected instead.
  const uint32_t ax = __float_as_uint(a) + 0x7FFFFu + ((__float_as_uint(a) >> 20) & 1u);
  const uint32_t normal = ((((ax >> 23) - 120u) << 3) | ((ax >> 20) & 7u)) & 0x7Fu;
  // Subnormal: multiples of 2^-9 below the smallest normal, 2^-6.
  const uint32_t subnormal = (uint32_t)__float2int_rn(a * 512.0f);
  uint32_t v = a < 0.015625f ? subnormal : normal;
  v = a >= 448.0f ? 0x7Eu : v;
  return a != a ? 0x7Fu : (sign | v);
}

// f32x4_to_e4m3x4 returns f32_to_e4m3(a) | f32_to_e4m3(b) << 8 |
// f32_to_e4m3(c) << 16 | f32_to_e4m3(d) << 24. On compute_89 and newer two
// cvt.rn.satfinite.e4m3x2.f32 round the four (ties to even; finite overflow
// and infinities to ±448, as f32_to_e4m3); a NaN, whose sign the instruction
// may keep, becomes 0x7F as f32_to_e4m3 makes it: the bytes whose low 7 bits
// are all set (only NaN's are) lose bit 7, found for all four at once (the
// low 7 bits plus one carry into bit 7 exactly then, and never further).
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4(float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t w;
  asm("{\n\t.reg .b16 lo, hi;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
      "mov.b32 %0, {lo, hi};\n\t}"
      : "=r"(w)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  const uint32_t nan = ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
  return w & ~nan;
#else
  return f32_to_e4m3(a) | f32_to_e4m3(b) << 8 | f32_to_e4m3(c) << 16 | f32_to_e4m3(d) << 24;
#endif
}

// quotient_by_reciprocal returns x / b for y = __frcp_rn(b): q = x·y, then
// one correction from the exact residual x − b·q (Markstein's theorem: the
// result is x / b rounded to nearest even). Three instructions against the
// IEEE division's eight or so and its range check, and two more that need
// no predicate: the corrected value takes q's sign (a zero q would lose a
// negative sign to the residual's sum), and where |q| ≥ 2^127 (infinite,
// NaN, or far past e4m3's ±448 either way, where the correction could make
// a NaN) q is returned as it is. Callers keep b in [2^-64, 2^64]: there the
// result has the e4m3 rounding of the IEEE quotient for every f16 and bf16
// x (fp8_model_test.go checks all of them on the same arithmetic); only
// quotients far below e4m3's range (whose residual underflows) may differ
// in their last bits.
__device__ __forceinline__ float quotient_by_reciprocal(float x, float b, float y) {
  const float q = __fmul_rn(x, y);
  const float q1 = __fmaf_rn(__fmaf_rn(-b, q, x), y, q);
  const float signed_q1 = __uint_as_float((__float_as_uint(q1) & 0x7FFFFFFFu) | (__float_as_uint(q) & 0x80000000u));
  return fabsf(q) < 0x1p127f ? signed_q1 : q;
}

// E4M3Divisor divides by a tensor scale b as the references' IEEE division
// rounds: by its reciprocal y = __frcp_rn(b) and one correction
// (quotient_by_reciprocal) where b ∈ [2^-64, 2^64], else by __fdiv_rn.
// Made once per thread (e4m3_divisor), not once per 8 elements.
struct E4M3Divisor {
  float b, y;
  bool recip;
};
__device__ __forceinline__ E4M3Divisor e4m3_divisor(float scale) {
  const bool recip = scale >= 0x1p-64f && scale <= 0x1p64f;
  return E4M3Divisor{scale, recip ? __frcp_rn(scale) : 0.0f, recip};
}

// e4m3x8 packs the e4m3 of f[i] / scale (rounded as the references' IEEE
// division rounds) for i = 0..7, element i in byte i.
__device__ __forceinline__ uint2 e4m3x8(const float f[8], const E4M3Divisor& s) {
  float q[8];
  if (s.recip) {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = quotient_by_reciprocal(f[i], s.b, s.y);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = __fdiv_rn(f[i], s.b);
  }
  return make_uint2(f32x4_to_e4m3x4(q[0], q[1], q[2], q[3]), f32x4_to_e4m3x4(q[4], q[5], q[6], q[7]));
}
__device__ __forceinline__ uint2 e4m3x8(const float f[8], float scale) { return e4m3x8(f, e4m3_divisor(scale)); }

}  // namespace pkv
