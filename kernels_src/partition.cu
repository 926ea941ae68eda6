// partition.cu: the work list of a balanced decode (dispatch.Plan.BalanceMinPages),
// and the arrays of a varlen batch split into a decode and a varlen.
//
// decode_partition
//   work         int4 [items]: (seq, split, splits, first) per work item, as
//                partition_work in decode.cuh lays them out; splits = 0 marks
//                an unused item. The balanced decode launch that follows on
//                the same stream reads item blockIdx.y.
//   items        the decode's gridDim.y; wave: the items one wave runs per KV
//                head (partition_work in decode.cuh says how both are used).
//   kv_lens      int32 [num_seqs], read on the device (clamped to
//                0..max_blocks_per_seq·block_size; the decode records the fault).
// Grid: 1 block of 128 threads. Static shared memory only.
#include "decode.cuh"

extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads)
    decode_partition(int4* work, const int* kv_lens, int num_seqs, int items, int wave, int max_blocks_per_seq,
                     int block_size_log2, int min_pages) {
  pkv::partition_work(work, kv_lens, num_seqs, items, wave, max_blocks_per_seq << block_size_log2,
                      block_size_log2, min_pages);
}

// varlen_decode_prefix: the device arrays of a varlen batch split into a
// decode of its first d sequences (one query token each) and a varlen of
// the rest (pagedkv's Varlen, Plan.DecodePrefix).
//   kv_lens      int32 [d] out: pos_offsets[s] + 1, the decode's KV lengths
//                (a negative offset stays negative, one past INT_MAX stays
//                INT_MAX: the decode clamps them and records the fault).
//   cu_rest      int32 [n − d + 1] out: cu_seqlens_q[d + i] − cu_seqlens_q[d]
//                (wrapping; the varlen clamps bad bounds and records them).
//   cu_seqlens_q int32 [n + 1], pos_offsets int32 [n]: the batch's.
// Grid: any, block 128.
extern "C" __global__ void __launch_bounds__(128)
    varlen_decode_prefix(int* kv_lens, int* cu_rest, const int* cu_seqlens_q, const int* pos_offsets, int d, int n) {
  const unsigned base = (unsigned)__ldg(cu_seqlens_q + d);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= n - d || i < d; i += gridDim.x * blockDim.x) {
    if (i < d) {
      const int p = __ldg(pos_offsets + i);
      kv_lens[i] = p == 0x7fffffff ? p : p + 1;
    }
    if (i <= n - d) cu_rest[i] = (int)((unsigned)__ldg(cu_seqlens_q + d + i) - base);
  }
}
