// cache_sm90.cu: the fp8 cache appends of cache.cu built for compute_90,
// where one cvt.rn.satfinite.e4m3x2.f32 rounds two elements to e4m3
// (f32x4_to_e4m3x4 in common.cuh) in place of the branch-free software
// rounding (ptxgen: the _sm90 suffix). The planner takes them on devices of
// compute capability 9.0 and newer: the _t2 entries (2 tokens per thread,
// see cache_append) for the flash layout, the others for the x-split and
// shuffle layouts, whose page runs need groups of 8.
#include "append.cuh"

PKV_CACHE_APPEND(cache_append_f16_e4m3_sm90, __half, true)
PKV_CACHE_APPEND(cache_append_bf16_e4m3_sm90, __nv_bfloat16, true)
PKV_CACHE_APPEND_TOKENS(cache_append_f16_e4m3_t2_sm90, __half, true, 2)
PKV_CACHE_APPEND_TOKENS(cache_append_bf16_e4m3_t2_sm90, __nv_bfloat16, true, 2)
