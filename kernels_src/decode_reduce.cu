// decode_reduce.cu: the split-K merge kernels of paged decode attention (see
// decode.cuh), for f16 and bf16 outputs and every head dim.
#include "decode.cuh"

PKV_DECODE_REDUCE(paged_decode_reduce_f16_hd64, __half, 64)
PKV_DECODE_REDUCE(paged_decode_reduce_f16_hd128, __half, 128)
PKV_DECODE_REDUCE(paged_decode_reduce_f16_hd256, __half, 256)
PKV_DECODE_REDUCE(paged_decode_reduce_bf16_hd64, __nv_bfloat16, 64)
PKV_DECODE_REDUCE(paged_decode_reduce_bf16_hd128, __nv_bfloat16, 128)
PKV_DECODE_REDUCE(paged_decode_reduce_bf16_hd256, __nv_bfloat16, 256)
