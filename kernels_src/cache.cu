// cache.cu: the cache append and gather kernels (append.cuh) for every input
// and cache dtype, built for compute_80.
#include "append.cuh"

PKV_CACHE_APPEND(cache_append_f16, __half, false)
PKV_CACHE_APPEND(cache_append_bf16, __nv_bfloat16, false)
PKV_CACHE_APPEND(cache_append_f16_e4m3, __half, true)
PKV_CACHE_APPEND(cache_append_bf16_e4m3, __nv_bfloat16, true)

PKV_CACHE_PAGES(cache_claim_f16, cache_append_pages_f16, __half, false)
PKV_CACHE_PAGES(cache_claim_bf16, cache_append_pages_bf16, __nv_bfloat16, false)
PKV_CACHE_PAGES(cache_claim_f16_e4m3, cache_append_pages_f16_e4m3, __half, true)
PKV_CACHE_PAGES(cache_claim_bf16_e4m3, cache_append_pages_bf16_e4m3, __nv_bfloat16, true)

PKV_CACHE_GATHER(cache_gather_f16, 2)
PKV_CACHE_GATHER(cache_gather_bf16, 2)
PKV_CACHE_GATHER(cache_gather_e4m3, 1)
