// varlen_f16_mods.cu: the paged varlen kernels of varlen_f16.cu with score
// modifiers (sliding window, logit soft-cap, sinks, ALiBi; see varlen.cuh),
// over a flash-layout __half cache, for every head dim. A module of their
// own, so that the plain kernels' code and load time stay as they are; the
// split-K partials merge with varlen_f16.cu's merge kernels.
#include "varlen.cuh"

PKV_VARLEN_MODS_ALL(paged_varlen_f16, __half, __half)
