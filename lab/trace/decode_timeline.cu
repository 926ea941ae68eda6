// decode_timeline.cu: a per-block timeline of the f16 paged decode kernel
// (kernels_src/decode.cuh, head dim 128, 32 q heads, 8 KV heads, block 16) on
// a few decode shapes, to see where a launch loses time: the ramp before the
// first tile lands, the tail after most blocks are done, uneven SMs.
//
// Build from the repository root (see README.md):
//   nvcc -O3 -std=c++17 -arch=sm_90 -DPKV_DECODE_TRACE -I kernels_src lab/trace/decode_timeline.cu -o /tmp/dt
// Run: /tmp/dt [stages [blocks]]   (stages 2..4; default as dispatch.DecodeSharedBytes
// picks; blocks: at most this many blocks per SM, by padding the shared memory)
//
// Each shape: 3 warm-up launches, 50 timed launches with tracing off, 50 with
// tracing on (to show what the trace costs), then one traced launch whose
// per-block timestamps are summarized. The output of seq 0 and the last seq is
// checked against a host reference so that a wrong launch cannot pass for a
// fast one.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#ifndef PKV_DECODE_TRACE
#error "build with -DPKV_DECODE_TRACE (see the top of this file)"
#endif

#include "check.cuh"

// Trace points, as decode.cuh numbers them.
enum {
  kEntry = 0,
  kFirstTile = 1,  // warp 0's first tile has landed (not reached by a block without tiles)
  kLoopDone = 2,   // warp 0 is past the main loop
  kCounter = 3,    // split-K only: before the atomic on the (seq, KV head) counter
  kExit = 4,       // exit of a single-pass block or of a split-K block that did not merge
  kMergeExit = 5,  // exit of the split-K block that merged the splits
  kMergeLast = 6,  // global merge: the block knows it is the last (after the atomic)
  kMergeWeights = 7,  // global merge: the weights are in shared memory
  kPoints = 8,
};

// The traced launch writes globaltimer nanoseconds to trace_ns[block][point]
// (left 0 where a point is not reached) and the block's SM to trace_sm[block].
// Both are null for untraced launches, which then only pay a load and a branch.
__device__ unsigned long long* trace_ns = nullptr;
__device__ unsigned int* trace_sm = nullptr;

__device__ __forceinline__ void trace_record(int point) {
  if (threadIdx.x != 0) return;  // thread 0 is warp 0 lane 0, which point 1 needs
  unsigned long long* t = trace_ns;
  if (t == nullptr) return;
  const unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  t[(size_t)b * kPoints + point] = now;
  if (point == kEntry) {
    unsigned int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    trace_sm[b] = sm;
  }
}

#define PKV_TRACE(point) trace_record(point)
#include "decode.cuh"

// -DPKV_TRACE_NARROW=1 times the narrow kernel (groups up to 8) instead.
#ifndef PKV_TRACE_NARROW
#define PKV_TRACE_NARROW 0
#endif
PKV_DECODE(trace_decode_f16_hd128, __half, __half, 128, false, PKV_TRACE_NARROW, pkv::kLayoutsFlash)

namespace {

constexpr int kQHeads = 32, kKVHeads = 8, kHeadDim = 128, kBlockLog2 = 4, kBlock = 1 << kBlockLog2;
constexpr int kWarmup = 3, kTimed = 50;
constexpr uint64_t kSeedQ = 1, kSeedK = 2, kSeedV = 3;

// mix64 is the splitmix64 finalizer: a hash good enough for test data.
__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// value_at is element i of the tensor with this seed: a multiple of 1/1024 in
// [-1, 1], exact in f16, so the host reference recomputes it instead of
// copying the caches back.
__host__ __device__ inline float value_at(uint64_t seed, uint64_t i) {
  return (float)((int)(mix64(seed * 0xD1B54A32D192ED03ull + i) % 2049u) - 1024) / 1024.0f;
}

__global__ void fill(__half* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2half_rn(value_at(seed, i));
}

// timer_step measures how %globaltimer advances, as seen by one thread: the
// smallest step and the mean step over up to 1000 changes.
__global__ void timer_step(unsigned long long* out) {
  unsigned long long first, prev, now, best = ~0ull;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(first));
  prev = first;
  int changes = 0;
  for (long long spin = 0; changes < 1000 && spin < (1ll << 26); ++spin) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now != prev) {
      best = min(best, now - prev);
      prev = now;
      ++changes;
    }
  }
  out[0] = best;
  out[1] = changes > 0 ? (prev - first) / changes : 0;
}

struct Shape {
  int seqs, kv, splits;
};

template <typename T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, count * sizeof(T)));
  return p;
}

void fill_device(__half* p, size_t n, uint64_t seed) {
  fill<<<1024, 256>>>(p, n, seed);
  CHECK(cudaGetLastError());
}

// sorted_at returns the element at fraction f of sorted v (f = 1: the last),
// taking the smallest index that covers f of the elements.
double sorted_at(const std::vector<double>& v, double f) {
  if (v.empty()) return NAN;
  size_t i = (size_t)std::ceil(f * v.size());
  return v[i == 0 ? 0 : i - 1];
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return sorted_at(v, 0.5);
}
double maximum(const std::vector<double>& v) { return v.empty() ? NAN : *std::max_element(v.begin(), v.end()); }

// d2d_gbs returns the best of 5 device-to-device copies of 1 GiB, in GB/s,
// counting the bytes read and written (2 GiB per copy).
double d2d_gbs() {
  const size_t bytes = size_t(1) << 30;
  char* a = device_alloc<char>(bytes);
  char* b = device_alloc<char>(bytes);
  CHECK(cudaMemset(a, 1, bytes));
  CHECK(cudaMemset(b, 0, bytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));  // warm-up
  float best = 1e30f;
  for (int i = 0; i < 5; ++i) {
    CHECK(cudaEventRecord(e0, 0));
    CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
    CHECK(cudaEventRecord(e1, 0));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * bytes / (best * 1e-3) / 1e9;
}

// reference_error returns the largest |out − reference| over every q head of
// sequence s, and sets *bad when one exceeds 1e-3 + 1e-2·|reference|.
double reference_error(const Shape& sh, int s, const std::vector<int>& table, const std::vector<__half>& out,
                       bool* bad) {
  const int max_blocks = sh.kv / kBlock;
  const double scale = 1.0 / std::sqrt((double)kHeadDim);
  constexpr int G = kQHeads / kKVHeads;
  std::vector<float> k((size_t)sh.kv * kHeadDim), v((size_t)sh.kv * kHeadDim), qh(kHeadDim);
  std::vector<double> score(sh.kv);
  double worst = 0;
  for (int kvh = 0; kvh < kKVHeads; ++kvh) {
    for (int t = 0; t < sh.kv; ++t) {
      const int64_t row = (int64_t)table[(size_t)s * max_blocks + t / kBlock] * kBlock + t % kBlock;
      const uint64_t base = ((uint64_t)row * kKVHeads + kvh) * kHeadDim;
      for (int d = 0; d < kHeadDim; ++d) {
        k[(size_t)t * kHeadDim + d] = value_at(kSeedK, base + d);
        v[(size_t)t * kHeadDim + d] = value_at(kSeedV, base + d);
      }
    }
    for (int g = 0; g < G; ++g) {
      const int h = kvh * G + g;
      const uint64_t qbase = ((uint64_t)s * kQHeads + h) * kHeadDim;
      for (int d = 0; d < kHeadDim; ++d) qh[d] = value_at(kSeedQ, qbase + d);
      double mx = -INFINITY;
      for (int t = 0; t < sh.kv; ++t) {
        double dot = 0;
        for (int d = 0; d < kHeadDim; ++d) dot += (double)qh[d] * k[(size_t)t * kHeadDim + d];
        score[t] = dot * scale;
        mx = std::max(mx, score[t]);
      }
      double sum = 0;
      for (int t = 0; t < sh.kv; ++t) sum += (score[t] = std::exp(score[t] - mx));
      for (int d = 0; d < kHeadDim; ++d) {
        double o = 0;
        for (int t = 0; t < sh.kv; ++t) o += score[t] * v[(size_t)t * kHeadDim + d];
        o /= sum;
        const double got = __half2float(out[qbase + d]);
        const double err = std::fabs(got - o);
        if (!(err <= 1e-3 + 1e-2 * std::fabs(o))) *bad = true;  // NaN is bad too
        worst = std::max(worst, err);
      }
    }
  }
  return worst;
}

void run_shape(const Shape& sh, int smem_bytes, int num_sms, double d2d) {
  const int max_blocks = sh.kv / kBlock;
  const int64_t num_blocks = (int64_t)sh.seqs * max_blocks;
  const size_t tokens = (size_t)num_blocks * kBlock;
  const size_t cache_elems = tokens * kKVHeads * kHeadDim;
  const size_t q_elems = (size_t)sh.seqs * kQHeads * kHeadDim;
  const int grid_blocks = kKVHeads * sh.seqs * sh.splits;

  __half* k = device_alloc<__half>(cache_elems);
  __half* v = device_alloc<__half>(cache_elems);
  __half* q = device_alloc<__half>(q_elems);
  __half* out = device_alloc<__half>(q_elems);
  fill_device(k, cache_elems, kSeedK);
  fill_device(v, cache_elems, kSeedV);
  fill_device(q, q_elems, kSeedQ);
  CHECK(cudaMemset(out, 0, q_elems * sizeof(__half)));

  // The table is a random permutation of the pool, so consecutive pages of a
  // sequence land anywhere in it.
  std::vector<int> table(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) table[i] = (int)i;
  std::mt19937_64 rng(42 + sh.seqs * 131 + sh.kv);
  std::shuffle(table.begin(), table.end(), rng);
  int* table_d = device_alloc<int>(table.size());
  CHECK(cudaMemcpy(table_d, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<int> lens(sh.seqs, sh.kv);
  int* lens_d = device_alloc<int>(lens.size());
  CHECK(cudaMemcpy(lens_d, lens.data(), lens.size() * sizeof(int), cudaMemcpyHostToDevice));

  // record_fault writes four words: code, a, b, c.
  unsigned long long* fault = device_alloc<unsigned long long>(4);
  CHECK(cudaMemset(fault, 0, 4 * sizeof(unsigned long long)));

  float *partial_out = nullptr, *partial_max = nullptr, *partial_sum = nullptr;
  unsigned int* counters = nullptr;
  if (sh.splits > 1) {
    const size_t rows = (size_t)sh.seqs * kQHeads * sh.splits;
    partial_out = device_alloc<float>(rows * kHeadDim);
    partial_max = device_alloc<float>(rows);
    partial_sum = device_alloc<float>(rows);
    counters = device_alloc<unsigned int>((size_t)sh.seqs * kKVHeads);
    // Zero once: every launch's merging block sets its counter back to zero.
    CHECK(cudaMemset(counters, 0, (size_t)sh.seqs * kKVHeads * sizeof(unsigned int)));
  }

  unsigned long long* trace_d = device_alloc<unsigned long long>((size_t)grid_blocks * kPoints);
  unsigned int* sm_d = device_alloc<unsigned int>(grid_blocks);
  auto set_trace = [&](bool on) {
    unsigned long long* t = on ? trace_d : nullptr;
    unsigned int* s = on ? sm_d : nullptr;
    CHECK(cudaMemcpyToSymbol(trace_ns, &t, sizeof(t)));
    CHECK(cudaMemcpyToSymbol(trace_sm, &s, sizeof(s)));
  };

  const dim3 grid(kKVHeads, sh.seqs, sh.splits);
  const float scale = 1.0f / std::sqrt((float)kHeadDim);
  auto launch = [&] {
    trace_decode_f16_hd128<<<grid, pkv::kDecodeThreads, smem_bytes>>>(
        out, nullptr, partial_out, partial_max, partial_sum, counters, q, k, v, table_d, lens_d, fault,
        (int64_t)kQHeads * kHeadDim, kQHeads, max_blocks, kBlockLog2, num_blocks, scale, 1.0f, 1.0f,
        /*work=*/nullptr, pkv::kLayoutFlash, /*kv_bias=*/0);
    CHECK(cudaGetLastError());
  };
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto time_us = [&] {
    CHECK(cudaEventRecord(e0, 0));
    for (int i = 0; i < kTimed; ++i) launch();
    CHECK(cudaEventRecord(e1, 0));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1e3 / kTimed;
  };

  set_trace(false);
  for (int i = 0; i < kWarmup; ++i) launch();
  CHECK(cudaDeviceSynchronize());
  const double us = time_us();
  set_trace(true);
  const double us_traced = time_us();
  CHECK(cudaMemset(trace_d, 0, (size_t)grid_blocks * kPoints * sizeof(unsigned long long)));
  CHECK(cudaMemset(sm_d, 0, grid_blocks * sizeof(unsigned int)));
  launch();
  CHECK(cudaDeviceSynchronize());
  set_trace(false);

  std::vector<unsigned long long> trace((size_t)grid_blocks * kPoints);
  std::vector<unsigned int> sm(grid_blocks);
  std::vector<__half> out_h(q_elems);
  unsigned long long fault_h[4];
  CHECK(cudaMemcpy(trace.data(), trace_d, trace.size() * sizeof(trace[0]), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sm.data(), sm_d, sm.size() * sizeof(sm[0]), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(out_h.data(), out, q_elems * sizeof(__half), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(fault_h, fault, sizeof(fault_h), cudaMemcpyDeviceToHost));

  bool bad = false;
  double err = reference_error(sh, 0, table, out_h, &bad);
  if (sh.seqs > 1) err = std::max(err, reference_error(sh, sh.seqs - 1, table, out_h, &bad));

  // Times in µs from the earliest block start.
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < grid_blocks; ++b)
    if (trace[(size_t)b * kPoints + kEntry] != 0) t0 = std::min(t0, trace[(size_t)b * kPoints + kEntry]);
  auto at = [&](int b, int p) -> double {
    const unsigned long long t = trace[(size_t)b * kPoints + p];
    return t == 0 ? NAN : (double)(t - t0) * 1e-3;
  };
  std::vector<double> starts, ends, durations, ramps, loops, epilogues, merges, atomics, weights, rows;
  int missing = 0, no_tiles = 0;
  for (int b = 0; b < grid_blocks; ++b) {
    const double start = at(b, kEntry), first = at(b, kFirstTile), loop_done = at(b, kLoopDone);
    const double end = std::isnan(at(b, kExit)) ? at(b, kMergeExit) : at(b, kExit);
    if (std::isnan(start) || std::isnan(end) || std::isnan(loop_done)) {
      ++missing;
      continue;
    }
    starts.push_back(start);
    ends.push_back(end);
    durations.push_back(end - start);
    epilogues.push_back(end - loop_done);
    if (std::isnan(first)) {
      ++no_tiles;
    } else {
      ramps.push_back(first - start);
      loops.push_back(loop_done - first);
    }
    if (!std::isnan(at(b, kMergeExit))) merges.push_back(at(b, kMergeExit) - at(b, kCounter));
    if (!std::isnan(at(b, kMergeWeights))) {
      atomics.push_back(at(b, kMergeLast) - at(b, kCounter));
      weights.push_back(at(b, kMergeWeights) - at(b, kMergeLast));
      rows.push_back(at(b, kMergeExit) - at(b, kMergeWeights));
    }
  }
  // Per (sequence, KV head): the last split's arrival at the counter to the
  // group's last exit, the merge as the launch sees it.
  std::vector<double> tails;
  if (sh.splits > 1) {
    const int groups = kKVHeads * sh.seqs;
    std::vector<double> arrive(groups, -1), done(groups, -1);
    for (int b = 0; b < grid_blocks; ++b) {
      const int gr = b % groups;  // x + gridDim.x·y: KV head and sequence
      const double end = std::isnan(at(b, kExit)) ? at(b, kMergeExit) : at(b, kExit);
      if (!std::isnan(at(b, kCounter))) arrive[gr] = std::max(arrive[gr], at(b, kCounter));
      if (!std::isnan(end)) done[gr] = std::max(done[gr], end);
    }
    for (int gr = 0; gr < groups; ++gr)
      if (arrive[gr] >= 0 && done[gr] >= 0) tails.push_back(done[gr] - arrive[gr]);
  }
  std::vector<unsigned int> counters_h(counters ? (size_t)sh.seqs * kKVHeads : 0);
  if (counters)
    CHECK(cudaMemcpy(counters_h.data(), counters, counters_h.size() * sizeof(unsigned int), cudaMemcpyDeviceToHost));
  int counters_left = 0;
  for (unsigned int c : counters_h) counters_left += c != 0;
  std::sort(ends.begin(), ends.end());
  std::sort(durations.begin(), durations.end());
  const double span = maximum(ends);

  std::vector<int> per_sm(1024, 0);
  for (int b = 0; b < grid_blocks; ++b)
    if (trace[(size_t)b * kPoints + kEntry] != 0 && sm[b] < per_sm.size()) ++per_sm[sm[b]];
  int used = 0, sm_min = 1 << 30, sm_max = 0;
  for (int c : per_sm)
    if (c > 0) {
      ++used;
      sm_min = std::min(sm_min, c);
      sm_max = std::max(sm_max, c);
    }

  int hist[10] = {0};
  for (double e : ends) ++hist[span > 0 ? std::min(9, std::max(0, (int)(e / span * 10))) : 0];

  const double kv_bytes = 2.0 * tokens * kKVHeads * kHeadDim * sizeof(__half);
  const double gbs = kv_bytes / (us * 1e-6) / 1e9;
  printf("seqs=%-3d kv=%-4d splits=%d blocks=%-4d | %6.2f us (traced %6.2f) | K+V %5.0f GB/s = %3.0f%% of D2D | check %s %.1e%s%s\n",
         sh.seqs, sh.kv, sh.splits, grid_blocks, us, us_traced, gbs, 100 * gbs / d2d, bad ? "FAIL" : "ok", err,
         fault_h[0] != 0 ? " FAULT" : "", counters_left ? " | COUNTERS NOT ZERO" : "");
  printf("  span %.1f | block min/med/max %.1f/%.1f/%.1f | ramp med/max %.1f/%.1f | loop med %.1f | epi med %.1f"
         " | ends 50/90/100%% %.1f/%.1f/%.1f | last start %.1f\n",
         span, durations.empty() ? NAN : durations.front(), sorted_at(durations, 0.5), maximum(durations),
         median(ramps), maximum(ramps), median(loops), median(epilogues), sorted_at(ends, 0.5), sorted_at(ends, 0.9),
         span, maximum(starts));
  printf("  blocks/SM %d..%d, idle SMs %d", used ? sm_min : 0, sm_max, std::max(0, num_sms - used));
  if (sh.splits > 1)
    printf(" | tail med/max %.1f/%.1f | merge med/max %.1f/%.1f (%zu)", median(tails), maximum(tails), median(merges),
           maximum(merges), merges.size());
  if (!rows.empty())
    printf(" = atomic %.1f + weights %.1f + rows %.1f (med)", median(atomics), median(weights), median(rows));
  printf(" | end hist");
  for (int c : hist) printf(" %d", c);
  if (missing || no_tiles) printf(" | %d blocks untraced, %d without tiles", missing, no_tiles);
  printf("\n");
  if (fault_h[0] != 0)
    printf("  fault code %llu a=%llu b=%llu c=%llu\n", fault_h[0], fault_h[1], fault_h[2], fault_h[3]);

  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  for (void* p : {(void*)k, (void*)v, (void*)q, (void*)out, (void*)table_d, (void*)lens_d, (void*)fault,
                  (void*)partial_out, (void*)partial_max, (void*)partial_sum, (void*)counters, (void*)trace_d,
                  (void*)sm_d})
    CHECK(cudaFree(p));  // cudaFree(nullptr) is a no-op
}

}  // namespace

int main(int argc, char** argv) {
  int dev = 0;
  CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  int optin = 0;
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));

  // Stages as dispatch.DecodeSharedBytes picks them: as many as fit in half
  // of optin less 2 KiB (two blocks per SM), 2 to 4; argv[1] overrides.
  using Smem = pkv::DecodeSmem<__half, kHeadDim>;
  int stages = std::min(std::max((optin / 2 - 2048 - Smem::kQBytes) / Smem::kStageBytes, 2), Smem::kMaxStages);
  if (argc > 1) {
    stages = atoi(argv[1]);
    if (stages < 2 || stages > Smem::kMaxStages) {
      fprintf(stderr, "usage: %s [stages 2..%d]\n", argv[0], Smem::kMaxStages);
      return 2;
    }
  }
  int smem_bytes = Smem::kQBytes + stages * Smem::kStageBytes;
  if (argc > 2) {
    // Pad so that one block more than asked for does not fit (each block
    // also holds 1 KiB reserved and its static shared memory, < 1 KiB); the
    // pad stays under a stage, so the kernel's depth does not change.
    const int blocks = atoi(argv[2]);
    const int pad = blocks > 0 ? (int)prop.sharedMemPerMultiprocessor / (blocks + 1) - 1024 + 1 - smem_bytes : 0;
    if (blocks < 1 || pad >= Smem::kStageBytes) {
      fprintf(stderr, "usage: %s stages blocks: %d blocks per SM cannot be reached by padding %d stages\n", argv[0],
              blocks, stages);
      return 2;
    }
    smem_bytes += std::max(pad, 0);
  }
  if (smem_bytes > optin) {
    fprintf(stderr, "%d stages need %d bytes of shared memory; the device allows %d\n", stages, smem_bytes, optin);
    return 1;
  }
  CHECK(cudaFuncSetAttribute(trace_decode_f16_hd128, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, trace_decode_f16_hd128));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, trace_decode_f16_hd128, pkv::kDecodeThreads,
                                                      smem_bytes));

  unsigned long long* step_d = device_alloc<unsigned long long>(2);
  timer_step<<<1, 1>>>(step_d);
  CHECK(cudaGetLastError());
  unsigned long long step[2];
  CHECK(cudaMemcpy(step, step_d, sizeof(step), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(step_d));

  const double d2d = d2d_gbs();
  printf("%s, %d SMs | kernel: %d regs, %zu B local, %d stages = %d B smem, %d blocks/SM (%d slots)\n", prop.name,
         prop.multiProcessorCount, attr.numRegs, attr.localSizeBytes, stages, smem_bytes, per_sm,
         per_sm * prop.multiProcessorCount);
  printf("globaltimer step min %llu ns, mean %llu ns | D2D copy %.0f GB/s (read+write, best of 5 x 1 GiB)\n", step[0],
         step[1], d2d);
  printf("trace times in us from the earliest block start; ramp = first tile landed - start (warp 0),\n"
         "loop = first tile to loop end (warp 0), epi = loop end to exit, merge = counter to exit of merging block\n"
         "(atomic: counter to knowing it is last; weights: maxima and sums read, weights computed; rows: the rest)\n");

  // The last three are the one-long-sequence rows of issue 11 at the
  // split counts the planner and the sweep pick (x16; x32 and x24).
  const Shape shapes[] = {{1, 512, 4},   {8, 8192, 4},  {32, 2048, 1},  {128, 512, 1},
                          {32, 8192, 1}, {128, 2048, 1}, {1, 8192, 16}, {1, 32768, 32}, {1, 32768, 24}};
  for (const Shape& sh : shapes) run_shape(sh, smem_bytes, prop.multiProcessorCount, d2d);
  return 0;
}
