// decode_bf16_e4m3_mods.cu: the paged decode kernels of decode_bf16_e4m3.cu
// with score modifiers (sliding window, logit soft-cap, sinks, ALiBi; see
// decode.cuh), wide (_mods) and narrow (_g8_mods), for every power-of-two
// head dim and every layout. A module of their own, so that the plain
// kernels' code and load time stay as they are.
#include "decode.cuh"

PKV_DECODE_MODS_ALL(paged_decode_bf16_e4m3, __nv_bfloat16, pkv::e4m3)
