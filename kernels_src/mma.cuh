// mma.cuh: the tensor-core building blocks shared by the attention kernels
// (decode.cuh, varlen.cuh): swizzled shared-memory tiles, ldmatrix and
// movmatrix, mma.sync m16n8k16 with f32 accumulators, packing to 16-bit pairs,
// and the widening of fp8 e4m3 pairs to the mma's input type.
#pragma once

#include "common.cuh"

namespace pkv {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// swizzle returns the position, in 16-byte chunks, of chunk c of row r of a
// tile whose rows are CHUNKS chunks long: the eight rows an ldmatrix reads
// (eight consecutive rows from a multiple of 8, one chunk each) land in
// eight different bank groups. A row of a multiple of 8 chunks (or a power
// of two below 8) permutes its chunks within aligned groups of 8 by XOR;
// any other row (head dims 80, 96 and 112: 10, 12 and 14 chunks at 16
// bits; fp8 rows of 6 chunks at head dim 96) permutes its last, shorter
// group by rotation, by (r mod 8)/2 for 4 chunks and (r mod 8)/4 for 2 or
// 6 (an XOR would leave the row), the only rotations that, with the row
// stride, leave no two of the eight rows in one bank group (checked for
// every chunk of the 16-bit rows).
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int r, int c) {
  if constexpr (CHUNKS % 8 != 0 && (CHUNKS & (CHUNKS - 1)) != 0) {
    constexpr int full = CHUNKS & ~7, tail = CHUNKS & 7, shift = tail == 4 ? 1 : 2;
    static_assert(tail % 2 == 0, "whole 32-byte pairs in the last group");
    return r * CHUNKS + (c < full ? c ^ (r & 7) : full + (c - full + ((r & 7) >> shift)) % tail);
  } else {
    constexpr int mask = CHUNKS >= 8 ? 7 : CHUNKS - 1;
    constexpr int shift = CHUNKS >= 8 ? 0 : (CHUNKS == 4 ? 1 : 2);
    return r * CHUNKS + (c ^ ((r >> shift) & mask));
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// movmatrix_trans transposes an 8×8 matrix of 16-bit values held one 32-bit
// pair per lane (lane 4r + c holds row r, columns 2c and 2c+1): afterwards
// the lane holds row r, columns 2c and 2c+1 of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// mma16816 accumulates c += a·b for one m16n8k16 tile of T (f16 or bf16).
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0,
                                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// pack2 rounds two floats to T and packs them, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// PKV_CVT_E4M3: compute capability 8.9 and newer convert two e4m3 values to
// f16x2 in one instruction (cvt.rn.f16x2.e4m3x2), exactly; the compute_90
// modules (decode_*_sm90) use it, the compute_80 ones the bit move of
// common.cuh, whose values come out divided by 256 (mma_scale folds it back).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define PKV_CVT_E4M3 1
#endif

// mma_scale returns what the decode's tensor-core inputs of cache type C
// must be multiplied by to give real values (before k_scale / v_scale).
template <typename C>
__device__ __forceinline__ float mma_scale() {
#ifdef PKV_CVT_E4M3
  return 1.0f;
#else
  return decode_scale<C>();
#endif
}

// e4m3_half2 widens two e4m3 bytes of x to an f16 pair: selector is a
// __byte_perm selector that puts the low value's byte in result byte 1 and
// the high value's in byte 3 (0x1404: bytes 0 and 1; 0x3424: 2 and 3;
// 0x2404: 0 and 2; 0x3414: 1 and 3). The pair holds value/256 without
// PKV_CVT_E4M3, the value itself with it (see mma_scale).
__device__ __forceinline__ uint32_t e4m3_half2(uint32_t x, uint32_t selector) {
#ifdef PKV_CVT_E4M3
  const uint32_t lo = (selector >> 4) & 0xF, hi = (selector >> 12) & 0xF;
  const unsigned short pair = (unsigned short)__byte_perm(x, 0u, lo | (hi << 4));
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(pair));
  return h;
#else
  return e4m3_pair_to_half2_bits_div256(x, selector);
#endif
}

// e4m3_pair widens two e4m3 bytes of x (picked by selector, see
// e4m3_half2) to a pair of T, exactly.
template <typename T>
__device__ __forceinline__ uint32_t e4m3_pair(uint32_t x, uint32_t selector);
template <>
__device__ __forceinline__ uint32_t e4m3_pair<__half>(uint32_t x, uint32_t selector) {
  return e4m3_half2(x, selector);
}
template <>
__device__ __forceinline__ uint32_t e4m3_pair<__nv_bfloat16>(uint32_t x, uint32_t selector) {
  uint32_t h = e4m3_half2(x, selector);
  const float2 f = __half22float2(*reinterpret_cast<__half2*>(&h));
  return pack2<__nv_bfloat16>(f.x, f.y);
}

}  // namespace pkv
