package driver

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// bound is set once every symbol of the function table is registered, so
// error formatting may ask the driver for names (cuGetErrorName works
// even when cuInit failed).
var bound atomic.Bool

// loadDriver opens the driver library (openLibrary, per platform), binds the
// function table and calls cuInit(0), once per process; every later call
// returns the first result.
var loadDriver = sync.OnceValues(func() (uintptr, error) {
	h, lib, err := openLibrary(libNames)
	if err != nil {
		return 0, err
	}
	if err := bindTable(lib, func(name string) (uintptr, error) { return librarySymbol(h, name) }); err != nil {
		return 0, err
	}
	bound.Store(true)
	if err := check("cuInit", cuInit(0)); err != nil {
		return 0, err
	}
	return h, nil
})

// openError is the ErrNoDriver error of an openLibrary that opened none of
// names (errs[i] is why names[i] failed), in one sentence: the names tried,
// why, and advice. A reason that repeats its name first, as dlerror's
// "libcuda.so.1: cannot open shared object file" does, loses that prefix, and
// a reason every name shares is said once.
func openError(names []string, errs []error, advice string) error {
	reasons := make([]string, len(names))
	same := true
	for i, name := range names {
		reasons[i] = strings.TrimPrefix(errs[i].Error(), name+": ")
		if reasons[i] == "" {
			reasons[i] = "no reason given"
		}
		same = same && reasons[i] == reasons[0]
	}
	tried := make([]string, len(names))
	for i, name := range names {
		tried[i] = name
		if !same {
			tried[i] += " (" + reasons[i] + ")"
		}
	}
	var why string
	if same && len(reasons) > 0 {
		why = " (" + reasons[0] + ")"
	}
	return fmt.Errorf("%w: could not open %s%s; %s", ErrNoDriver, joinOr(tried), why, advice)
}

// joinOr joins items as "a", "a or b", "a, b or c".
func joinOr(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// Init loads the driver library and initializes the driver (cuInit(0)).
// It runs once per process; later calls return the same result. Every other
// function in this package calls it first, so calling it explicitly is only
// needed to probe for a driver. The error wraps ErrNoDriver when the driver
// library (libcuda.so.1 on Linux, nvcuda.dll on Windows) is missing or too
// old, or the platform has no CUDA driver at all (macOS), and ErrNoDevice
// when the driver sees no device.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html
func Init() error {
	_, err := loadDriver()
	return err
}

// The function table: one variable per driver symbol, bound by bindTable.
// Types map C to Go as: CUresult → Result, int → int32, unsigned int →
// uint32, size_t and unsigned long long → uint64, handles → the uintptr-based
// handle types, pointers → *T or unsafe.Pointer. The symbols are the
// versioned ABI names (what cuda.h's macros resolve to), present in every
// driver from CUDA 11.8 to 13.x except those marked optional, which newer
// drivers add (see symbol).
var (
	// CUresult cuInit(unsigned int Flags);
	cuInit func(flags uint32) Result
	// CUresult cuDriverGetVersion(int *driverVersion);
	cuDriverGetVersion func(version *int32) Result
	// CUresult cuGetErrorName(CUresult error, const char **pStr);
	cuGetErrorName func(r Result, str **byte) Result
	// CUresult cuGetErrorString(CUresult error, const char **pStr);
	cuGetErrorString func(r Result, str **byte) Result

	// CUresult cuDeviceGetCount(int *count);
	cuDeviceGetCount func(count *int32) Result
	// CUresult cuDeviceGet(CUdevice *device, int ordinal);
	cuDeviceGet func(dev *Device, ordinal int32) Result
	// CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
	cuDeviceGetName func(name *byte, n int32, dev Device) Result
	// CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
	cuDeviceTotalMem func(bytes *uint64, dev Device) Result
	// CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
	cuDeviceGetAttribute func(pi *int32, attr DeviceAttribute, dev Device) Result

	// CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
	cuDevicePrimaryCtxRetain func(ctx *Context, dev Device) Result
	// CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
	cuDevicePrimaryCtxRelease func(dev Device) Result
	// CUresult cuCtxGetCurrent(CUcontext *pctx);   (hot path: bound with SyscallN)
	cuCtxGetCurrent func(ctx *Context) Result
	// CUresult cuCtxSetCurrent(CUcontext ctx);      (hot path: bound with SyscallN)
	cuCtxSetCurrent func(ctx Context) Result
	// CUresult cuCtxSynchronize(void);
	cuCtxSynchronize func() Result

	// CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
	//                             CUjit_option *options, void **optionValues);
	cuModuleLoadDataEx func(mod *Module, image unsafe.Pointer, numOptions uint32, options *int32, values *uintptr) Result
	// CUresult cuModuleUnload(CUmodule hmod);
	cuModuleUnload func(mod Module) Result
	// CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
	cuModuleGetFunction func(fn *Function, mod Module, name *byte) Result
	// CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc);
	cuFuncGetAttribute func(pi *int32, attr FunctionAttribute, fn Function) Result
	// CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
	cuFuncSetAttribute func(fn Function, attr FunctionAttribute, value int32) Result
	// CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
	//                                                      int blockSize, size_t dynamicSMemSize);
	cuOccupancyMaxActiveBlocksPerMultiprocessor func(numBlocks *int32, fn Function, blockSize int32, dynamicSMem uint64) Result
	// CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
	//                                       const CUlaunchConfig *config);
	cuOccupancyMaxActiveClusters func(numClusters *int32, fn Function, config *launchConfig) Result

	// CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
	cuMemAlloc func(p *DevicePtr, bytes uint64) Result
	// CUresult cuMemFree_v2(CUdeviceptr dptr);
	cuMemFree func(p DevicePtr) Result
	// CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
	cuMemAllocAsync func(p *DevicePtr, bytes uint64, s Stream) Result
	// CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
	cuMemFreeAsync func(p DevicePtr, s Stream) Result
	// CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N);
	cuMemsetD8 func(p DevicePtr, v uint8, n uint64) Result
	// CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);   (hot path: bound with SyscallN)
	cuMemsetD8Async func(p DevicePtr, v uint8, n uint64, s Stream) Result
	// CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);   (hot path: bound with SyscallN)
	cuMemsetD32Async func(p DevicePtr, v uint32, n uint64, s Stream) Result
	// CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
	cuMemAllocHost func(pp *unsafe.Pointer, bytes uint64) Result
	// CUresult cuMemFreeHost(void *p);
	cuMemFreeHost func(p unsafe.Pointer) Result
	// CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
	cuMemcpyHtoD func(dst DevicePtr, src unsafe.Pointer, bytes uint64) Result
	// CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
	cuMemcpyDtoH func(dst unsafe.Pointer, src DevicePtr, bytes uint64) Result
	// CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
	cuMemcpyDtoD func(dst, src DevicePtr, bytes uint64) Result
	// CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
	cuMemcpyHtoDAsync func(dst DevicePtr, src unsafe.Pointer, bytes uint64, s Stream) Result
	// CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
	cuMemcpyDtoHAsync func(dst unsafe.Pointer, src DevicePtr, bytes uint64, s Stream) Result
	// CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
	cuMemcpyDtoDAsync func(dst, src DevicePtr, bytes uint64, s Stream) Result

	// CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
	cuStreamCreate func(s *Stream, flags uint32) Result
	// CUresult cuStreamDestroy_v2(CUstream hStream);
	cuStreamDestroy func(s Stream) Result
	// CUresult cuStreamSynchronize(CUstream hStream);   (hot path: bound with SyscallN)
	cuStreamSynchronize func(s Stream) Result
	// CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
	cuStreamBeginCapture func(s Stream, mode CaptureMode) Result
	// CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
	cuStreamEndCapture func(s Stream, g *Graph) Result
	// CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
	cuStreamIsCapturing func(s Stream, status *int32) Result
	// CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);   (hot path: bound with SyscallN)
	cuStreamWaitEvent func(s Stream, e Event, flags uint32) Result
	// CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
	cuStreamGetCtx func(s Stream, ctx *Context) Result

	// CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
	cuGraphInstantiateWithFlags func(exec *GraphExec, g Graph, flags uint64) Result
	// CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);   (hot path: bound with SyscallN)
	cuGraphLaunch func(exec GraphExec, s Stream) Result
	// CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
	cuGraphExecDestroy func(exec GraphExec) Result
	// CUresult cuGraphDestroy(CUgraph hGraph);
	cuGraphDestroy func(g Graph) Result

	// CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
	cuEventCreate func(e *Event, flags uint32) Result
	// CUresult cuEventRecord(CUevent hEvent, CUstream hStream);   (hot path: bound with SyscallN)
	cuEventRecord func(e Event, s Stream) Result
	// CUresult cuEventSynchronize(CUevent hEvent);
	cuEventSynchronize func(e Event) Result
	// CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
	cuEventElapsedTime func(ms *float32, start, end Event) Result
	// CUresult cuEventDestroy_v2(CUevent hEvent);
	cuEventDestroy func(e Event) Result

	// CUresult cuLaunchKernel(CUfunction f,
	//                         unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
	//                         unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
	//                         unsigned int sharedMemBytes, CUstream hStream,
	//                         void **kernelParams, void **extra);   (hot path: bound with SyscallN)
	cuLaunchKernel launchFunc
	// CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
	//                           void **kernelParams, void **extra);   (hot path: bound with SyscallN)
	cuLaunchKernelEx launchExFunc

	// CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
	//                                 cuuint32_t tensorRank, void *globalAddress,
	//                                 const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
	//                                 const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
	//                                 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
	//                                 CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill);
	//   (optional: CUDA 12.0 and later; nil when the driver lacks it)
	cuTensorMapEncodeTiled tensorMapEncodeTiledFunc
)

// launchFunc is the Go type of cuLaunchKernel.
type launchFunc func(f Function, gx, gy, gz, bx, by, bz, sharedBytes uint32, s Stream,
	params *unsafe.Pointer, extra *unsafe.Pointer) Result

// launchExFunc is the Go type of cuLaunchKernelEx.
type launchExFunc func(config *launchConfig, f Function, params *unsafe.Pointer, extra *unsafe.Pointer) Result

// tensorMapEncodeTiledFunc is the Go type of cuTensorMapEncodeTiled.
type tensorMapEncodeTiledFunc func(tensorMap *TensorMap, dataType TensorMapDataType, rank uint32,
	globalAddress DevicePtr, globalDim, globalStrides *uint64, boxDim, elementStrides *uint32,
	interleave TensorMapInterleave, swizzle TensorMapSwizzle, l2Promotion TensorMapL2Promotion,
	oobFill TensorMapOOBFill) Result

// symbol pairs a driver symbol with the variable that holds it. A variable
// given raw is bound by a hand-written adapter around rawCall (purego.SyscallN)
// instead of purego.RegisterFunc: those symbols sit on per-launch paths
// (Context.Do, Launch, LaunchCluster, GraphExec.Launch, Event.Record,
// Stream.WaitEvent, Stream.IsCapturing), and rawCall does not allocate per
// call the way RegisterFunc's reflection-based calls do. An optional symbol
// is one that drivers older than some CUDA release lack: when it is missing
// the library still loads, the variable stays nil, and its wrapper returns
// an error wrapping ErrNotSupported.
type symbol struct {
	name     string
	fptr     any
	raw      func(addr uintptr)
	optional bool
}

func symbols() []symbol {
	return []symbol{
		{name: "cuInit", fptr: &cuInit},
		{name: "cuDriverGetVersion", fptr: &cuDriverGetVersion},
		{name: "cuGetErrorName", fptr: &cuGetErrorName},
		{name: "cuGetErrorString", fptr: &cuGetErrorString},
		{name: "cuDeviceGetCount", fptr: &cuDeviceGetCount},
		{name: "cuDeviceGet", fptr: &cuDeviceGet},
		{name: "cuDeviceGetName", fptr: &cuDeviceGetName},
		{name: "cuDeviceTotalMem_v2", fptr: &cuDeviceTotalMem},
		{name: "cuDeviceGetAttribute", fptr: &cuDeviceGetAttribute},
		{name: "cuDevicePrimaryCtxRetain", fptr: &cuDevicePrimaryCtxRetain},
		{name: "cuDevicePrimaryCtxRelease_v2", fptr: &cuDevicePrimaryCtxRelease},
		{name: "cuCtxGetCurrent", fptr: &cuCtxGetCurrent, raw: func(addr uintptr) {
			cuCtxGetCurrent = func(ctx *Context) Result {
				r := rawCall(addr, uintptr(unsafe.Pointer(ctx)))
				runtime.KeepAlive(ctx)
				return r
			}
		}},
		{name: "cuCtxSetCurrent", fptr: &cuCtxSetCurrent, raw: func(addr uintptr) {
			cuCtxSetCurrent = func(ctx Context) Result { return rawCall(addr, uintptr(ctx)) }
		}},
		{name: "cuCtxSynchronize", fptr: &cuCtxSynchronize},
		{name: "cuModuleLoadDataEx", fptr: &cuModuleLoadDataEx},
		{name: "cuModuleUnload", fptr: &cuModuleUnload},
		{name: "cuModuleGetFunction", fptr: &cuModuleGetFunction},
		{name: "cuFuncGetAttribute", fptr: &cuFuncGetAttribute},
		{name: "cuFuncSetAttribute", fptr: &cuFuncSetAttribute},
		{name: "cuOccupancyMaxActiveBlocksPerMultiprocessor", fptr: &cuOccupancyMaxActiveBlocksPerMultiprocessor},
		{name: "cuOccupancyMaxActiveClusters", fptr: &cuOccupancyMaxActiveClusters},
		{name: "cuMemAlloc_v2", fptr: &cuMemAlloc},
		{name: "cuMemFree_v2", fptr: &cuMemFree},
		{name: "cuMemAllocAsync", fptr: &cuMemAllocAsync},
		{name: "cuMemFreeAsync", fptr: &cuMemFreeAsync},
		{name: "cuMemsetD8_v2", fptr: &cuMemsetD8},
		{name: "cuMemsetD8Async", fptr: &cuMemsetD8Async, raw: func(addr uintptr) {
			cuMemsetD8Async = func(p DevicePtr, v uint8, n uint64, s Stream) Result {
				return rawCall(addr, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
			}
		}},
		{name: "cuMemsetD32Async", fptr: &cuMemsetD32Async, raw: func(addr uintptr) {
			cuMemsetD32Async = func(p DevicePtr, v uint32, n uint64, s Stream) Result {
				return rawCall(addr, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
			}
		}},
		{name: "cuMemAllocHost_v2", fptr: &cuMemAllocHost},
		{name: "cuMemFreeHost", fptr: &cuMemFreeHost},
		{name: "cuMemcpyHtoD_v2", fptr: &cuMemcpyHtoD},
		{name: "cuMemcpyDtoH_v2", fptr: &cuMemcpyDtoH},
		{name: "cuMemcpyDtoD_v2", fptr: &cuMemcpyDtoD},
		{name: "cuMemcpyHtoDAsync_v2", fptr: &cuMemcpyHtoDAsync},
		{name: "cuMemcpyDtoHAsync_v2", fptr: &cuMemcpyDtoHAsync},
		{name: "cuMemcpyDtoDAsync_v2", fptr: &cuMemcpyDtoDAsync},
		{name: "cuStreamCreate", fptr: &cuStreamCreate},
		{name: "cuStreamDestroy_v2", fptr: &cuStreamDestroy},
		{name: "cuStreamSynchronize", fptr: &cuStreamSynchronize, raw: func(addr uintptr) {
			cuStreamSynchronize = func(s Stream) Result { return rawCall(addr, uintptr(s)) }
		}},
		{name: "cuStreamBeginCapture_v2", fptr: &cuStreamBeginCapture},
		{name: "cuStreamEndCapture", fptr: &cuStreamEndCapture},
		{name: "cuStreamIsCapturing", fptr: &cuStreamIsCapturing, raw: func(addr uintptr) {
			cuStreamIsCapturing = func(s Stream, status *int32) Result {
				r := rawCall(addr, uintptr(s), uintptr(unsafe.Pointer(status)))
				runtime.KeepAlive(status)
				return r
			}
		}},
		{name: "cuStreamWaitEvent", fptr: &cuStreamWaitEvent, raw: func(addr uintptr) {
			cuStreamWaitEvent = func(s Stream, e Event, flags uint32) Result {
				return rawCall(addr, uintptr(s), uintptr(e), uintptr(flags))
			}
		}},
		{name: "cuStreamGetCtx", fptr: &cuStreamGetCtx},
		{name: "cuGraphInstantiateWithFlags", fptr: &cuGraphInstantiateWithFlags},
		{name: "cuGraphLaunch", fptr: &cuGraphLaunch, raw: func(addr uintptr) {
			cuGraphLaunch = func(exec GraphExec, s Stream) Result { return rawCall(addr, uintptr(exec), uintptr(s)) }
		}},
		{name: "cuGraphExecDestroy", fptr: &cuGraphExecDestroy},
		{name: "cuGraphDestroy", fptr: &cuGraphDestroy},
		{name: "cuEventCreate", fptr: &cuEventCreate},
		{name: "cuEventRecord", fptr: &cuEventRecord, raw: func(addr uintptr) {
			cuEventRecord = func(e Event, s Stream) Result { return rawCall(addr, uintptr(e), uintptr(s)) }
		}},
		{name: "cuEventSynchronize", fptr: &cuEventSynchronize},
		{name: "cuEventElapsedTime", fptr: &cuEventElapsedTime},
		{name: "cuEventDestroy_v2", fptr: &cuEventDestroy},
		{name: "cuLaunchKernel", fptr: &cuLaunchKernel, raw: func(addr uintptr) {
			cuLaunchKernel = func(f Function, gx, gy, gz, bx, by, bz, sharedBytes uint32, s Stream,
				params *unsafe.Pointer, extra *unsafe.Pointer) Result {
				r := rawCall(addr, uintptr(f),
					uintptr(gx), uintptr(gy), uintptr(gz),
					uintptr(bx), uintptr(by), uintptr(bz),
					uintptr(sharedBytes), uintptr(s),
					uintptr(unsafe.Pointer(params)), uintptr(unsafe.Pointer(extra)))
				runtime.KeepAlive(params)
				runtime.KeepAlive(extra)
				return r
			}
		}},
		{name: "cuLaunchKernelEx", fptr: &cuLaunchKernelEx, raw: func(addr uintptr) {
			cuLaunchKernelEx = func(config *launchConfig, f Function, params *unsafe.Pointer, extra *unsafe.Pointer) Result {
				r := rawCall(addr, uintptr(unsafe.Pointer(config)), uintptr(f),
					uintptr(unsafe.Pointer(params)), uintptr(unsafe.Pointer(extra)))
				runtime.KeepAlive(config)
				runtime.KeepAlive(params)
				runtime.KeepAlive(extra)
				return r
			}
		}},
		{name: "cuTensorMapEncodeTiled", fptr: &cuTensorMapEncodeTiled, optional: true},
	}
}

// rawArgs stages the arguments of a rawCall in heap memory: purego.SyscallN
// is go:uintptrescapes, so a variadic argument list written at its call
// site would be heap-allocated on every call.
type rawArgs struct{ a [maxRawArgs]uintptr }

const maxRawArgs = 11

var rawArgsPool = sync.Pool{New: func() any { return new(rawArgs) }}

// rawCall calls the C function at addr with integer arguments and returns
// its CUresult, without allocating in steady state. Pointer arguments must
// point to heap memory the caller keeps alive (runtime.KeepAlive) until
// rawCall returns.
func rawCall(addr uintptr, args ...uintptr) Result {
	ra := rawArgsPool.Get().(*rawArgs)
	n := copy(ra.a[:], args)
	r, _, _ := purego.SyscallN(addr, ra.a[:n]...)
	rawArgsPool.Put(ra)
	return Result(int32(r))
}

// bindTable looks every symbol up with lookup first, so a missing one is an
// error naming it (all missing ones, in fact) and lib, the library opened,
// never a panic; only then does it register the table. A missing optional
// symbol is no error: its variable is left nil.
func bindTable(lib string, lookup func(name string) (uintptr, error)) error {
	syms := symbols()
	addrs, missing := lookupSymbols(syms, lookup)
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s lacks %s; the driver is older than CUDA 11.8, install a newer NVIDIA driver",
			ErrNoDriver, lib, strings.Join(missing, ", "))
	}
	registerSymbols(syms, addrs)
	return nil
}

// lookupSymbols returns the address of every symbol of syms (0 where
// missing) and the names of the missing ones that are not optional.
func lookupSymbols(syms []symbol, lookup func(name string) (uintptr, error)) (addrs []uintptr, missing []string) {
	addrs = make([]uintptr, len(syms))
	for i, s := range syms {
		addr, err := lookup(s.name)
		if err != nil || addr == 0 {
			if !s.optional {
				missing = append(missing, s.name)
			}
			continue
		}
		addrs[i] = addr
	}
	return addrs, missing
}

// registerSymbols binds each variable of syms to its address in addrs, and
// sets the variable of an optional symbol with no address to nil.
func registerSymbols(syms []symbol, addrs []uintptr) {
	for i, s := range syms {
		switch {
		case addrs[i] == 0:
			v := reflect.ValueOf(s.fptr).Elem()
			v.Set(reflect.Zero(v.Type()))
		case s.raw != nil:
			s.raw(addrs[i])
		default:
			purego.RegisterFunc(s.fptr, addrs[i])
		}
	}
}

// unbindTable sets every function variable back to nil (tests only).
func unbindTable() {
	for _, s := range symbols() {
		v := reflect.ValueOf(s.fptr).Elem()
		v.Set(reflect.Zero(v.Type()))
	}
}

// argError reports a bad argument caught before it reaches the driver; the
// error matches ErrInvalidArgument.
func argError(format string, args ...any) error {
	return &argumentError{fmt.Errorf("cuda: "+format, args...)}
}

// argumentError is an argError: its text is err's alone, and it matches
// ErrInvalidArgument without repeating that sentinel's text.
type argumentError struct{ err error }

func (e *argumentError) Error() string   { return e.err.Error() }
func (e *argumentError) Unwrap() []error { return []error{ErrInvalidArgument, e.err} }
