// varlen_f16_e4m3_mods.cu: the paged varlen kernels of varlen_f16_e4m3.cu
// with score modifiers (sliding window, logit soft-cap, sinks, ALiBi; see
// varlen.cuh), over a flash-layout fp8 e4m3 cache, for every power-of-two
// head dim. A module of their own, so that the plain kernels' code and load
// time stay as they are; the split-K partials merge with varlen_f16.cu's
// merge kernels.
#include "varlen.cuh"

PKV_VARLEN_MODS_ALL(paged_varlen_f16_e4m3, __half, pkv::e4m3)
