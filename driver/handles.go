package driver

// Device is a CUdevice: a device ordinal as the driver numbers it.
type Device int32

// Context is a CUcontext. The contexts this package hands out are primary
// contexts (Device.PrimaryCtxRetain); use them through Context.Do.
type Context uintptr

// Module is a CUmodule: a loaded PTX or cubin image. Unload it when done.
type Module uintptr

// Function is a CUfunction: a kernel entry point of a Module. It stays
// valid until its Module is unloaded.
type Function uintptr

// DevicePtr is a CUdeviceptr: an address in device memory. It is plain data
// to Go (never dereference it on the host) and the interchange currency with
// other CUDA libraries.
type DevicePtr uintptr

// Stream is a CUstream. The zero Stream is the legacy default stream
// (CU_STREAM_LEGACY semantics), which synchronizes with other blocking
// streams.
type Stream uintptr

// Special stream handles (cuda.h), accepted wherever a Stream is.
const (
	// StreamLegacy (CU_STREAM_LEGACY) names the legacy default stream
	// explicitly: the stream the zero handle means to the driver API as
	// bound here.
	StreamLegacy Stream = 0x1
	// StreamPerThread (CU_STREAM_PER_THREAD) is the calling OS thread's own
	// default stream. Go moves goroutines between threads, so it names a
	// different stream from one Context.Do to the next.
	StreamPerThread Stream = 0x2
)

// Event is a CUevent.
type Event uintptr

// Graph is a CUgraph, as produced by Stream.EndCapture.
type Graph uintptr

// GraphExec is a CUgraphExec: an instantiated, launchable Graph.
type GraphExec uintptr

// Dim3 is a grid or block size in the three CUDA dimensions. A zero
// component is invalid for a launch; use 1 for unused dimensions.
type Dim3 struct{ X, Y, Z uint32 }

// Stream creation flags (CUstream_flags).
const (
	StreamDefault     uint32 = 0x0
	StreamNonBlocking uint32 = 0x1 // does not synchronize with the legacy default stream
)

// Event creation flags (CUevent_flags).
const (
	EventDefault       uint32 = 0x0
	EventBlockingSync  uint32 = 0x1
	EventDisableTiming uint32 = 0x2
)

// CaptureMode is a CUstreamCaptureMode: how a capturing stream interacts
// with potentially unsafe API calls made by other threads.
type CaptureMode int32

// CUstreamCaptureMode values.
const (
	CaptureModeGlobal      CaptureMode = 0
	CaptureModeThreadLocal CaptureMode = 1
	CaptureModeRelaxed     CaptureMode = 2
)

// CUstreamCaptureStatus values.
const (
	captureStatusNone        = 0
	captureStatusActive      = 1
	captureStatusInvalidated = 2
)

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// CUdevice_attribute values (ABI; from cuda.h).
const (
	AttrMaxThreadsPerBlock               DeviceAttribute = 1
	AttrMaxBlockDimX                     DeviceAttribute = 2
	AttrMaxGridDimX                      DeviceAttribute = 5
	AttrMaxSharedMemoryPerBlock          DeviceAttribute = 8
	AttrWarpSize                         DeviceAttribute = 10
	AttrMaxRegistersPerBlock             DeviceAttribute = 12
	AttrClockRate                        DeviceAttribute = 13 // kHz
	AttrMultiprocessorCount              DeviceAttribute = 16
	AttrMemoryClockRate                  DeviceAttribute = 36 // kHz
	AttrGlobalMemoryBusWidth             DeviceAttribute = 37 // bits
	AttrL2CacheSize                      DeviceAttribute = 38 // bytes
	AttrMaxThreadsPerMultiprocessor      DeviceAttribute = 39
	AttrComputeCapabilityMajor           DeviceAttribute = 75
	AttrComputeCapabilityMinor           DeviceAttribute = 76
	AttrMaxSharedMemoryPerMultiprocessor DeviceAttribute = 81 // bytes
	AttrMaxRegistersPerMultiprocessor    DeviceAttribute = 82
	AttrMaxSharedMemoryPerBlockOptin     DeviceAttribute = 97 // bytes, with FuncAttrMaxDynamicSharedSizeBytes
	AttrMaxBlocksPerMultiprocessor       DeviceAttribute = 106
	AttrMemoryPoolsSupported             DeviceAttribute = 115 // cuMemAllocAsync works
	AttrClusterLaunch                    DeviceAttribute = 120 // LaunchCluster works (9.0 and later)
)

// FunctionAttribute is a CUfunction_attribute.
type FunctionAttribute int32

// CUfunction_attribute values (ABI; from cuda.h).
const (
	FuncAttrMaxThreadsPerBlock        FunctionAttribute = 0
	FuncAttrSharedSizeBytes           FunctionAttribute = 1 // static shared memory
	FuncAttrConstSizeBytes            FunctionAttribute = 2
	FuncAttrLocalSizeBytes            FunctionAttribute = 3
	FuncAttrNumRegs                   FunctionAttribute = 4
	FuncAttrPTXVersion                FunctionAttribute = 5 // major*10+minor
	FuncAttrBinaryVersion             FunctionAttribute = 6 // major*10+minor
	FuncAttrCacheModeCA               FunctionAttribute = 7
	FuncAttrMaxDynamicSharedSizeBytes FunctionAttribute = 8
	// A kernel compiled with __cluster_dims__ reports its cluster shape;
	// 0 when the shape is chosen at launch (LaunchCluster).
	FuncAttrRequiredClusterWidth  FunctionAttribute = 11
	FuncAttrRequiredClusterHeight FunctionAttribute = 12
	FuncAttrRequiredClusterDepth  FunctionAttribute = 13
	// Set to 1 to launch clusters of more than 8 blocks where the device
	// allows it.
	FuncAttrNonPortableClusterSizeAllowed FunctionAttribute = 14
)

// CUjit_option values used by LoadModule (ABI; from cuda.h).
const (
	jitInfoLogBuffer           int32 = 3
	jitInfoLogBufferSizeBytes  int32 = 4
	jitErrorLogBuffer          int32 = 5
	jitErrorLogBufferSizeBytes int32 = 6
)
