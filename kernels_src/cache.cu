// cache.cu: writes new key/value tokens into the paged KV cache.
//
// cache_append_flash_<in>[_e4m3]
//   key, value   [num_tokens, num_kv_heads, head_dim] of type <in> at element
//                strides (token, head); rows of 8 elements must be 16-byte aligned.
//   key_cache,   flash layout [num_blocks, block_size, num_kv_heads, head_dim] of
//   value_cache  type <in>, or fp8 e4m3 (value / scale, rounded to nearest even,
//                saturated to ±448) for the _e4m3 entries. Slot s is row s of
//                the [num_blocks·block_size, num_kv_heads, head_dim] view, so the
//                block size never enters the address.
//   slot_mapping int64 [num_tokens], read on the device; negative = skip token.
//   slot_remap   optional int64 [num_remap]: slot = slot_remap[slot] (sliding-
//                window caches); negative = skip. Null when unused.
//   fault        optional fault record (common.cuh): a slot or remap index out
//                of range is recorded there and that token is not written.
// Grid: ceil(num_tokens·num_kv_heads·head_dim/8 / 256) blocks of 256 threads;
// each thread moves 8 elements of K and 8 of V. No shared memory.
#include "common.cuh"

namespace pkv {

template <typename T>
__device__ __forceinline__ void store8(T* dst, uint4 v, float) {
  *reinterpret_cast<uint4*>(dst) = v;
}

template <typename In>
__device__ __forceinline__ void store8_e4m3(uint8_t* dst, uint4 v, float scale) {
  float f[8];
  to_float8(v, static_cast<const In*>(nullptr), f);
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    w[i / 4] |= f32_to_e4m3(__fdiv_rn(f[i], scale)) << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
}

template <typename In, bool FP8>
__device__ __forceinline__ void cache_append_flash(
    const In* __restrict__ key, const In* __restrict__ value, void* __restrict__ key_cache,
    void* __restrict__ value_cache, const int64_t* __restrict__ slot_mapping,
    const int64_t* __restrict__ slot_remap, unsigned long long* fault, int64_t num_slots,
    int64_t num_remap, int num_tokens, int num_kv_heads, int head_dim, int64_t key_token_stride,
    int64_t key_head_stride, int64_t value_token_stride, int64_t value_head_stride, float k_scale,
    float v_scale) {
  const int vecs_per_head = head_dim >> 3;
  const int64_t vecs_per_token = (int64_t)num_kv_heads * vecs_per_head;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)num_tokens * vecs_per_token) return;
  const int64_t t = i / vecs_per_token;
  const int r = (int)(i - t * vecs_per_token);
  const int h = r / vecs_per_head;
  const int d = (r - h * vecs_per_head) << 3;

  int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  if (slot_remap != nullptr) {
    if (slot >= num_remap) {
      record_fault(fault, kFaultRemapBeyondTable, t, slot, num_remap);
      return;
    }
    slot = slot_remap[slot];
    if (slot < 0) return;
  }
  if (slot >= num_slots) {
    record_fault(fault, kFaultSlotBeyondCache, t, slot, num_slots);
    return;
  }
  const uint4 k = load8(key + t * key_token_stride + h * key_head_stride + d);
  const uint4 v = load8(value + t * value_token_stride + h * value_head_stride + d);
  const int64_t dst = (slot * num_kv_heads + h) * head_dim + d;
  if constexpr (FP8) {
    store8_e4m3<In>(static_cast<uint8_t*>(key_cache) + dst, k, k_scale);
    store8_e4m3<In>(static_cast<uint8_t*>(value_cache) + dst, v, v_scale);
  } else {
    store8(static_cast<In*>(key_cache) + dst, k, k_scale);
    store8(static_cast<In*>(value_cache) + dst, v, v_scale);
  }
}

}  // namespace pkv

#define PKV_CACHE_APPEND_FLASH(name, In, FP8)                                                    \
  extern "C" __global__ void __launch_bounds__(256) name(                                        \
      const In* key, const In* value, void* key_cache, void* value_cache,                        \
      const int64_t* slot_mapping, const int64_t* slot_remap, unsigned long long* fault,         \
      int64_t num_slots, int64_t num_remap, int num_tokens, int num_kv_heads, int head_dim,      \
      int64_t key_token_stride, int64_t key_head_stride, int64_t value_token_stride,             \
      int64_t value_head_stride, float k_scale, float v_scale) {                                 \
    pkv::cache_append_flash<In, FP8>(key, value, key_cache, value_cache, slot_mapping,           \
                                     slot_remap, fault, num_slots, num_remap, num_tokens,        \
                                     num_kv_heads, head_dim, key_token_stride, key_head_stride,  \
                                     value_token_stride, value_head_stride, k_scale, v_scale);   \
  }

PKV_CACHE_APPEND_FLASH(cache_append_flash_f16, __half, false)
PKV_CACHE_APPEND_FLASH(cache_append_flash_bf16, __nv_bfloat16, false)
PKV_CACHE_APPEND_FLASH(cache_append_flash_f16_e4m3, __half, true)
PKV_CACHE_APPEND_FLASH(cache_append_flash_bf16_e4m3, __nv_bfloat16, true)
