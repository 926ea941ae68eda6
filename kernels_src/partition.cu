// partition.cu: the work list of a balanced decode (dispatch.Plan.BalanceMinPages).
//
// decode_partition
//   work         int4 [items]: (seq, split, splits, first) per work item, as
//                partition_work in decode.cuh lays them out; splits = 0 marks
//                an unused item. The balanced decode launch that follows on
//                the same stream reads item blockIdx.y.
//   items        the decode's gridDim.y; wave: the items one wave runs per KV
//                head (partition_work in decode.cuh says how both are used).
//   kv_lens      int32 [num_seqs], read on the device, plus kv_bias (the
//                decode's, see decode.cuh), clamped to
//                0..max_blocks_per_seq·block_size (the decode records the fault).
// Grid: 1 block of 128 threads. Static shared memory only.
#include "decode.cuh"

extern "C" __global__ void __launch_bounds__(pkv::kDecodeThreads)
    decode_partition(int4* work, const int* kv_lens, int num_seqs, int items, int wave, int max_blocks_per_seq,
                     int block_size_log2, int min_pages, int kv_bias) {
  pkv::partition_work(work, kv_lens, kv_bias, num_seqs, items, wave, max_blocks_per_seq << block_size_log2,
                      block_size_log2, min_pages);
}
