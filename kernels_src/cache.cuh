// cache.cuh: paged KV-cache layouts and the element moves shared by the
// cache-writing kernels (cache.cu, rope.cu).
//
// Layouts (layout argument; x = 16 bytes / cache element size, so 8 for
// f16/bf16 and 16 for fp8; b = block, o = row in the block):
//   0 flash:   K, V [num_blocks, block_size, num_kv_heads, head_dim]
//   1 x-split: K [num_blocks, num_kv_heads, head_dim/x, block_size, x],
//              V [num_blocks, num_kv_heads, head_dim, block_size]
//   2 shuffle: K as x-split, V [num_blocks, num_kv_heads, block_size/x, head_dim, x]
//   3 HND:     K, V [num_blocks, num_kv_heads, block_size, head_dim]
//              (head-major pages: the flash layout of a one-head cache
//              whose block b·num_kv_heads + h is head h of block b)
// The host checks that head_dim (x-split, shuffle) and block_size (shuffle)
// are multiples of x.
#pragma once
#include "common.cuh"

namespace pkv {

enum CacheLayout : int { kLayoutFlash = 0, kLayoutXSplit = 1, kLayoutShuffle = 2, kLayoutHND = 3 };

// flash_rows reports whether layout keeps each token's head_dim elements
// of a head contiguous (flash, HND): the attention kernels read both with
// the flash layout's loaders (see HeadRows).
__device__ __forceinline__ bool flash_rows(int layout) { return layout == kLayoutFlash || layout == kLayoutHND; }

// HeadRows is how an attention kernel reads the rows of KV head kvh with
// the flash layout's loaders: row r of block id b sits at element
// ((b·id_mul + id_add)·block_size + r)·row_stride from base. In the flash
// layout that is b's row r at head kvh (id_mul 1, id_add 0, row_stride
// num_kv_heads·dm, base kvh·dm); in the HND layout a page of one head is a
// block of a one-head flash cache (id_mul num_kv_heads, id_add kvh,
// row_stride dm, base 0). The host bounds num_blocks·num_kv_heads·
// block_size to 2^32, so the rows fit in 32 bits.
struct HeadRows {
  int id_mul, id_add;
  int64_t row_stride, base;
  __device__ __forceinline__ HeadRows(int layout, int kvh, int num_kv_heads, int dm) {
    const bool hnd = layout == kLayoutHND;
    id_mul = hnd ? num_kv_heads : 1;
    id_add = hnd ? kvh : 0;
    row_stride = hnd ? (int64_t)dm : (int64_t)num_kv_heads * dm;
    base = hnd ? 0 : (int64_t)kvh * dm;
  }
};

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
  if (layout == kLayoutHND) return ((b * num_kv_heads + h) * bs + o) * head_dim + d;
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

// word returns 32-bit word k (a constant after unrolling) of v.
__device__ __forceinline__ uint32_t word(const uint4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// transpose8x8 transposes 8 vectors of 8 elements: element j of out[e] is
// element e of in[j]. It is its own inverse, so it turns 8 token rows into 8
// token-minor element columns and back.
//
// 16-bit elements: word k of a vector holds elements 2k (low half) and 2k+1
// (high half), so each output word pairs one half of two input words: one
// byte permute per output word, 64 in all.
__device__ __forceinline__ void transpose8x8(const uint4 (&in)[8], uint4 (&out)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t sel = (e & 1) ? 0x7632u : 0x5410u;
    uint32_t w[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) w[m] = __byte_perm(word(in[2 * m], e / 2), word(in[2 * m + 1], e / 2), sel);
    out[e] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// fp8 elements: two rounds of 16 byte permutes. The first interleaves rows
// 2p and 2p+1 byte by byte: for elements e and e+1 it gives the word holding
// (row 2p, e), (row 2p+1, e), (row 2p, e+1), (row 2p+1, e+1). The second
// takes the halves for element e (or e+1) of two such words, of row pairs 2q
// and 2q+1, giving word q of column e: rows 4q..4q+3.
__device__ __forceinline__ void transpose8x8(const uint2 (&in)[8], uint2 (&out)[8]) {
  uint32_t lo[4][2], hi[4][2];  // [pair][word]: elements 4w, 4w+1 and 4w+2, 4w+3
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    lo[p][0] = __byte_perm(in[2 * p].x, in[2 * p + 1].x, 0x5140u);
    hi[p][0] = __byte_perm(in[2 * p].x, in[2 * p + 1].x, 0x7362u);
    lo[p][1] = __byte_perm(in[2 * p].y, in[2 * p + 1].y, 0x5140u);
    hi[p][1] = __byte_perm(in[2 * p].y, in[2 * p + 1].y, 0x7362u);
  }
  uint32_t col[8][2];  // [element][word q: rows 4q..4q+3]
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      col[4 * w + 0][q] = __byte_perm(lo[2 * q][w], lo[2 * q + 1][w], 0x5410u);
      col[4 * w + 1][q] = __byte_perm(lo[2 * q][w], lo[2 * q + 1][w], 0x7632u);
      col[4 * w + 2][q] = __byte_perm(hi[2 * q][w], hi[2 * q + 1][w], 0x5410u);
      col[4 * w + 3][q] = __byte_perm(hi[2 * q][w], hi[2 * q + 1][w], 0x7632u);
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = make_uint2(col[e][0], col[e][1]);
}

template <typename In>
__device__ __forceinline__ uint2 to_e4m3x8(uint4 v, const E4M3Divisor& scale) {
  float f[8];
  to_float8(v, static_cast<const In*>(nullptr), f);
  return e4m3x8(f, scale);
}
template <typename In>
__device__ __forceinline__ uint2 to_e4m3x8(uint4 v, float scale) {
  return to_e4m3x8<In>(v, e4m3_divisor(scale));
}

// resolve_slots applies the slot rules of every cache write to the n ≤ N
// tokens t0, t0+1, ... (slot[j] = -1 for j ≥ n): a negative slot skips the
// token; with a remap table, slot = slot_remap[slot] (negative skips); a
// slot or remap index out of range is recorded in fault and skips. -1 means
// "skip". The N slots, then the N remap entries, are each loaded as one batch
// before any branch on them.
template <int N>
__device__ __forceinline__ void resolve_slots(int64_t t0, int n, const int64_t* slot_mapping,
                                              const int64_t* slot_remap, int64_t num_remap,
                                              int64_t num_slots, unsigned long long* fault,
                                              int64_t (&slot)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) slot[j] = j < n ? slot_mapping[t0 + j] : -1;
  if (slot_remap != nullptr) {
    int64_t remapped[N];
#pragma unroll
    for (int j = 0; j < N; ++j) remapped[j] = slot[j] >= 0 && slot[j] < num_remap ? slot_remap[slot[j]] : -1;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (slot[j] >= num_remap) record_fault(fault, kFaultRemapBeyondTable, t0 + j, slot[j], num_remap);
      slot[j] = remapped[j];
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (slot[j] >= num_slots) {
      record_fault(fault, kFaultSlotBeyondCache, t0 + j, slot[j], num_slots);
      slot[j] = -1;
    }
  }
}

// resolve_slot is resolve_slots for the one token t.
__device__ __forceinline__ int64_t resolve_slot(int64_t t, const int64_t* slot_mapping,
                                                const int64_t* slot_remap, int64_t num_remap,
                                                int64_t num_slots, unsigned long long* fault) {
  int64_t slot[1];
  resolve_slots(t, 1, slot_mapping, slot_remap, num_remap, num_slots, fault, slot);
  return slot[0];
}

// pack8 rounds 8 floats to In and packs them as 16 bytes.
template <typename In>
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  uint4 v;
  In* e = reinterpret_cast<In*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = from_float<In>(f[i]);
  return v;
}

// store_cache8 writes 8 elements (packed In) to a cache at element index at,
// stride elements apart (cache_place's): as they are, or as fp8 e4m3 of
// value / scale.
template <typename In, bool FP8>
__device__ __forceinline__ void store_cache8(void* cache, int64_t at, int stride, uint4 v, float scale) {
  if constexpr (FP8) {
    store8<1>(cache, at, stride, to_e4m3x8<In>(v, scale));
  } else {
    store8<2>(cache, at, stride, v);
  }
}

}  // namespace pkv
