// cache.cu: writes new key/value tokens into the paged KV cache, and gathers
// them back.
//
// Layouts: see cache.cuh.
//
// cache_append_<in>[_e4m3]
//   key, value   [num_tokens, num_kv_heads, head_dim] of type <in> at element
//                strides (token, head); rows of 8 elements must be 16-byte aligned.
//   key_cache,   in the layout above, of type <in>, or fp8 e4m3 (value / scale,
//   value_cache  rounded to nearest even, saturated to ±448) for _e4m3.
//   slot_mapping int64 [num_tokens], read on the device; negative = skip token.
//   slot_remap   optional int64 [num_remap]: slot = slot_remap[slot] (sliding-
//                window caches); negative = skip. Null when unused.
//   fault        optional fault record (common.cuh): a slot or remap index out
//                of range is recorded there and that token is not written.
// cache_gather_<cache>
//   key_out, value_out [num_tokens, num_kv_heads, head_dim] of the cache type:
//                the elements of slots[t], bit for bit (the inverse of append
//                with an unconverted cache); a negative slot leaves row t as
//                it was, a slot beyond the cache is recorded in fault.
// Grid: ceil(num_tokens·num_kv_heads·head_dim/8 / 256) blocks of 256 threads;
// each thread moves 8 elements of K and 8 of V. No shared memory.
#include "cache.cuh"

namespace pkv {

template <typename In, bool FP8>
__device__ __forceinline__ void cache_append(
    const In* __restrict__ key, const In* __restrict__ value, void* __restrict__ key_cache,
    void* __restrict__ value_cache, const int64_t* __restrict__ slot_mapping,
    const int64_t* __restrict__ slot_remap, unsigned long long* fault, int64_t num_slots,
    int64_t num_remap, int num_tokens, int num_kv_heads, int head_dim, int64_t key_token_stride,
    int64_t key_head_stride, int64_t value_token_stride, int64_t value_head_stride, float k_scale,
    float v_scale, int layout, int block_size_log2) {
  constexpr int X = FP8 ? 16 : 8;
  const int vecs_per_head = head_dim >> 3;
  const int64_t vecs_per_token = (int64_t)num_kv_heads * vecs_per_head;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)num_tokens * vecs_per_token) return;
  const int64_t t = i / vecs_per_token;
  const int r = (int)(i - t * vecs_per_token);
  const int h = r / vecs_per_head;
  const int d = (r - h * vecs_per_head) << 3;

  const int64_t slot = resolve_slot(t, slot_mapping, slot_remap, num_remap, num_slots, fault);
  if (slot < 0) return;
  const uint4 k = load8(key + t * key_token_stride + h * key_head_stride + d);
  const uint4 v = load8(value + t * value_token_stride + h * value_head_stride + d);
  int ks, vs;
  const int64_t kat = cache_place<X>(layout, false, slot, h, d, num_kv_heads, head_dim, block_size_log2, &ks);
  const int64_t vat = cache_place<X>(layout, true, slot, h, d, num_kv_heads, head_dim, block_size_log2, &vs);
  if constexpr (FP8) {
    store8<1>(key_cache, kat, ks, to_e4m3x8<In>(k, k_scale));
    store8<1>(value_cache, vat, vs, to_e4m3x8<In>(v, v_scale));
  } else {
    store8<2>(key_cache, kat, ks, k);
    store8<2>(value_cache, vat, vs, v);
  }
}

template <int SIZE>
__device__ __forceinline__ void cache_gather(void* __restrict__ key_out, void* __restrict__ value_out,
                                             const void* __restrict__ key_cache,
                                             const void* __restrict__ value_cache,
                                             const int64_t* __restrict__ slots, unsigned long long* fault,
                                             int64_t num_slots, int num_tokens, int num_kv_heads,
                                             int head_dim, int layout, int block_size_log2) {
  constexpr int X = 16 / SIZE;
  const int vecs_per_head = head_dim >> 3;
  const int64_t vecs_per_token = (int64_t)num_kv_heads * vecs_per_head;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)num_tokens * vecs_per_token) return;
  const int64_t t = i / vecs_per_token;
  const int r = (int)(i - t * vecs_per_token);
  const int h = r / vecs_per_head;
  const int d = (r - h * vecs_per_head) << 3;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  if (slot >= num_slots) {
    record_fault(fault, kFaultSlotBeyondCache, t, slot, num_slots);
    return;
  }
  int ks, vs;
  const int64_t kat = cache_place<X>(layout, false, slot, h, d, num_kv_heads, head_dim, block_size_log2, &ks);
  const int64_t vat = cache_place<X>(layout, true, slot, h, d, num_kv_heads, head_dim, block_size_log2, &vs);
  const int64_t out = (t * num_kv_heads + h) * head_dim + d;
  store8<SIZE>(key_out, out, 1, load8_raw<SIZE>(key_cache, kat, ks));
  store8<SIZE>(value_out, out, 1, load8_raw<SIZE>(value_cache, vat, vs));
}

}  // namespace pkv

#define PKV_CACHE_APPEND(name, In, FP8)                                                          \
  extern "C" __global__ void __launch_bounds__(256) name(                                        \
      const In* key, const In* value, void* key_cache, void* value_cache,                        \
      const int64_t* slot_mapping, const int64_t* slot_remap, unsigned long long* fault,         \
      int64_t num_slots, int64_t num_remap, int num_tokens, int num_kv_heads, int head_dim,      \
      int64_t key_token_stride, int64_t key_head_stride, int64_t value_token_stride,             \
      int64_t value_head_stride, float k_scale, float v_scale, int layout, int block_size_log2) { \
    pkv::cache_append<In, FP8>(key, value, key_cache, value_cache, slot_mapping, slot_remap,     \
                               fault, num_slots, num_remap, num_tokens, num_kv_heads, head_dim,  \
                               key_token_stride, key_head_stride, value_token_stride,            \
                               value_head_stride, k_scale, v_scale, layout, block_size_log2);    \
  }

PKV_CACHE_APPEND(cache_append_f16, __half, false)
PKV_CACHE_APPEND(cache_append_bf16, __nv_bfloat16, false)
PKV_CACHE_APPEND(cache_append_f16_e4m3, __half, true)
PKV_CACHE_APPEND(cache_append_bf16_e4m3, __nv_bfloat16, true)

#define PKV_CACHE_GATHER(name, SIZE)                                                            \
  extern "C" __global__ void __launch_bounds__(256) name(                                       \
      void* key_out, void* value_out, const void* key_cache, const void* value_cache,           \
      const int64_t* slots, unsigned long long* fault, int64_t num_slots, int num_tokens,       \
      int num_kv_heads, int head_dim, int layout, int block_size_log2) {                        \
    pkv::cache_gather<SIZE>(key_out, value_out, key_cache, value_cache, slots, fault, num_slots, \
                            num_tokens, num_kv_heads, head_dim, layout, block_size_log2);       \
  }

PKV_CACHE_GATHER(cache_gather_f16, 2)
PKV_CACHE_GATHER(cache_gather_bf16, 2)
PKV_CACHE_GATHER(cache_gather_e4m3, 1)
