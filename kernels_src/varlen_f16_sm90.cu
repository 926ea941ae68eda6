// varlen_f16_sm90.cu: paged varlen attention with __half queries and a __half
// cache whose split-K blocks of a row tile form a thread-block cluster and
// merge on chip, for the flash-layout entries of varlen_f16.cu (see
// varlen.cuh). Compiled for compute_90 (ptxgen: the _sm90 suffix).
#include "varlen.cuh"

PKV_VARLEN_CLUSTER_ALL(paged_varlen_f16, __half)
