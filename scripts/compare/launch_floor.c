/* launch_floor.c: the host cost of driver calls from C on this machine, to
 * compare with the Go binding's (tests: BenchmarkHostPath). It
 * loads the same empty kernel BenchmarkHostPath launches and times, per call:
 * cuCtxGetCurrent, cuStreamIsCapturing, and cuLaunchKernel of the empty
 * kernel on a non-blocking stream (synchronizing every 32 launches, untimed,
 * as the Go benchmark does). Build and run where the driver is:
 *   gcc -O2 -o launch_floor scripts/compare/launch_floor.c -I$CUDA/include -lcuda
 * (any C compiler; nvcc -o launch_floor -x cu ... -lcuda works too). */
#include <cuda.h>
#include <stdio.h>
#include <time.h>

static const char *ptx =
    ".version 7.8\n.target sm_80\n.address_size 64\n"
    ".visible .entry pagedkv_empty(.param .u64 p)\n{\n\tret;\n}\n";

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

#define CK(x)                                             \
  do {                                                    \
    CUresult r_ = (x);                                    \
    if (r_ != CUDA_SUCCESS) {                             \
      fprintf(stderr, "%s failed: %d\n", #x, (int)r_);    \
      return 1;                                           \
    }                                                     \
  } while (0)

int main(void) {
  const int n = 20000;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream s;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoadData(&mod, ptx));
  CK(cuModuleGetFunction(&fn, mod, "pagedkv_empty"));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  unsigned long long p = 0;
  void *params[] = {&p};
  for (int i = 0; i < 1000; i++) CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
  CK(cuStreamSynchronize(s));

  double t = 0;
  for (int i = 0; i < n; i++) {
    double t0 = now_ns();
    CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
    t += now_ns() - t0;
    if (i % 32 == 31) CK(cuStreamSynchronize(s));
  }
  printf("C cuLaunchKernel (empty kernel)   %8.1f ns/call\n", t / n);

  CUcontext cur;
  double t0 = now_ns();
  for (int i = 0; i < n; i++) CK(cuCtxGetCurrent(&cur));
  printf("C cuCtxGetCurrent                 %8.1f ns/call\n", (now_ns() - t0) / n);

  CUstreamCaptureStatus st;
  t0 = now_ns();
  for (int i = 0; i < n; i++) CK(cuStreamIsCapturing(s, &st));
  printf("C cuStreamIsCapturing             %8.1f ns/call\n", (now_ns() - t0) / n);

  CK(cuStreamSynchronize(s));
  t0 = now_ns();
  for (int i = 0; i < 32 * 100; i++) CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
  double issue = now_ns() - t0;
  CK(cuStreamSynchronize(s));
  printf("C 3200 launches back to back      %8.1f ns/call (issue), %.1f ns/call (to completion)\n", issue / 3200,
         (now_ns() - t0) / 3200);
  return 0;
}
