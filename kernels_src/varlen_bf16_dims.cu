// varlen_bf16_dims.cu: paged varlen attention with __nv_bfloat16 queries over a
// flash-layout __nv_bfloat16 cache for the head dims between the powers of two
// (80, 96, 112, 192): the entries of varlen_bf16.cu (with _r64 below 128),
// their _mods twins and the split-K merges (see varlen.cuh). A module of
// their own, so that the other head dims' code and load time stay as they
// are.
#include "varlen.cuh"

PKV_VARLEN_MORE_DIMS(paged_varlen_bf16, paged_varlen_merge_bf16, __nv_bfloat16)
