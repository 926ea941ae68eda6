// cache.cuh: paged KV-cache layouts and the element moves shared by the
// cache-writing kernels (cache.cu, rope.cu).
//
// Layouts (layout argument; x = 16 bytes / cache element size, so 8 for
// f16/bf16 and 16 for fp8; b = block, o = row in the block):
//   0 flash:   K, V [num_blocks, block_size, num_kv_heads, head_dim]
//   1 x-split: K [num_blocks, num_kv_heads, head_dim/x, block_size, x],
//              V [num_blocks, num_kv_heads, head_dim, block_size]
//   2 shuffle: K as x-split, V [num_blocks, num_kv_heads, block_size/x, head_dim, x]
// The host checks that head_dim (x-split, shuffle) and block_size (shuffle)
// are multiples of x.
#pragma once
#include "common.cuh"

namespace pkv {

enum CacheLayout : int { kLayoutFlash = 0, kLayoutXSplit = 1, kLayoutShuffle = 2 };

// cache_place returns the element index of element d (a multiple of 8) of
// head h of slot in the K (value = false) or V cache, and in *stride the
// distance between elements d and d+1 (1 where the 8 are contiguous).
template <int X>
__device__ __forceinline__ int64_t cache_place(int layout, bool value, int64_t slot, int h, int d,
                                               int num_kv_heads, int head_dim, int bs_log2,
                                               int* stride) {
  *stride = 1;
  if (layout == kLayoutFlash) return (slot * num_kv_heads + h) * head_dim + d;
  const int64_t b = slot >> bs_log2;
  const int o = (int)(slot & ((1 << bs_log2) - 1));
  const int bs = 1 << bs_log2;
  if (!value) return (((b * num_kv_heads + h) * (head_dim / X) + d / X) * bs + o) * X + d % X;
  if (layout == kLayoutXSplit) {
    *stride = bs;
    return ((b * num_kv_heads + h) * head_dim + d) * bs + o;
  }
  *stride = X;
  return (((b * num_kv_heads + h) * (bs / X) + o / X) * head_dim + d) * X + o % X;
}

// Raw element types: 8 elements are a uint4 (16-bit) or a uint2 (fp8).
template <int SIZE>
struct Raw;
template <>
struct Raw<2> {
  using elem = uint16_t;
  using vec = uint4;
};
template <>
struct Raw<1> {
  using elem = uint8_t;
  using vec = uint2;
};

// store8 writes 8 raw elements at dst with the given element stride.
template <int SIZE>
__device__ __forceinline__ void store8(void* base, int64_t at, int stride, typename Raw<SIZE>::vec v) {
  using E = typename Raw<SIZE>::elem;
  E* dst = static_cast<E*>(base) + at;
  if (stride == 1) {
    *reinterpret_cast<typename Raw<SIZE>::vec*>(dst) = v;
    return;
  }
  const E* e = reinterpret_cast<const E*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) dst[(int64_t)i * stride] = e[i];
}

// load8 reads 8 raw elements at src with the given element stride.
template <int SIZE>
__device__ __forceinline__ typename Raw<SIZE>::vec load8_raw(const void* base, int64_t at, int stride) {
  using E = typename Raw<SIZE>::elem;
  const E* src = static_cast<const E*>(base) + at;
  typename Raw<SIZE>::vec v;
  if (stride == 1) return *reinterpret_cast<const typename Raw<SIZE>::vec*>(src);
  E* e = reinterpret_cast<E*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = src[(int64_t)i * stride];
  return v;
}

template <typename In>
__device__ __forceinline__ uint2 to_e4m3x8(uint4 v, float scale) {
  float f[8];
  to_float8(v, static_cast<const In*>(nullptr), f);
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i / 4] |= f32_to_e4m3(__fdiv_rn(f[i], scale)) << (8 * (i % 4));
  return make_uint2(w[0], w[1]);
}

// resolve_slot applies the slot rules of every cache write: a negative slot
// skips the token; with a remap table, slot = slot_remap[slot] (negative
// skips); a slot or remap index out of range is recorded in fault and skips.
// Returns -1 for "skip".
__device__ __forceinline__ int64_t resolve_slot(int64_t t, const int64_t* slot_mapping,
                                                const int64_t* slot_remap, int64_t num_remap,
                                                int64_t num_slots, unsigned long long* fault) {
  int64_t slot = slot_mapping[t];
  if (slot < 0) return -1;
  if (slot_remap != nullptr) {
    if (slot >= num_remap) {
      record_fault(fault, kFaultRemapBeyondTable, t, slot, num_remap);
      return -1;
    }
    slot = slot_remap[slot];
    if (slot < 0) return -1;
  }
  if (slot >= num_slots) {
    record_fault(fault, kFaultSlotBeyondCache, t, slot, num_slots);
    return -1;
  }
  return slot;
}

}  // namespace pkv
