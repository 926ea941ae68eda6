// decode_bf16_e4m3_laid_sm90.cu: the kernels of decode_bf16_e4m3_sm90.cu for fp8 e4m3
// caches in the x-split and shuffle layouts (entries ending _laid): the
// build that reads every layout, chosen at run time, where decode_bf16_e4m3_sm90.cu's
// reads the flash layout only (see kLayoutsAny in decode.cuh). Compiled
// for compute_90 (ptxgen: the _sm90 suffix).
#include "decode.cuh"

PKV_DECODE_CLUSTER_ALL(paged_decode_bf16_e4m3, __nv_bfloat16, pkv::e4m3, pkv::kLayoutsAny, _laid)
PKV_DECODE_NARROW_CLUSTER_ALL(paged_decode_bf16_e4m3, __nv_bfloat16, pkv::e4m3, pkv::kLayoutsAny, _laid)
PKV_DECODE_NARROW_SM90_ALL(paged_decode_bf16_e4m3, __nv_bfloat16, pkv::e4m3, pkv::kLayoutsAny, _laid)
