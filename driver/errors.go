package driver

import (
	"errors"
	"strconv"
	"unsafe"
)

// Sentinel errors for errors.Is.
var (
	// ErrNoDriver reports that the driver library (libcuda.so.1, nvcuda.dll)
	// could not be loaded, that it lacks a symbol this package needs (a
	// driver older than CUDA 11.8), or that the platform has no CUDA driver.
	ErrNoDriver = errors.New("cuda: no usable NVIDIA driver library")
	// ErrNoDevice reports that the driver sees no CUDA device
	// (CUDA_ERROR_NO_DEVICE, or a device count of 0).
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrCapture matches every stream-capture error code (900–908): an
	// operation that is illegal while a stream is being captured, or a
	// capture sequence that was invalidated.
	ErrCapture = errors.New("cuda: stream capture error")
	// ErrInvalidArgument matches every error that rejects an argument before
	// the driver is called; its text names the argument, its value and what
	// is allowed.
	ErrInvalidArgument = errors.New("cuda: invalid argument")
	// ErrNotSupported reports that the driver lacks an optional function
	// this package binds when present (one newer than CUDA 11.8, such as
	// cuTensorMapEncodeTiled), or that the driver answered
	// CUDA_ERROR_NOT_SUPPORTED.
	ErrNotSupported = errors.New("cuda: not supported by this driver")
)

// Result is a CUresult, the status code every driver call returns.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html
type Result int32

// CUresult codes with a name in the built-in table. The values are ABI.
const (
	ResultSuccess                     Result = 0
	ResultInvalidValue                Result = 1
	ResultOutOfMemory                 Result = 2
	ResultNotInitialized              Result = 3
	ResultDeinitialized               Result = 4
	ResultStubLibrary                 Result = 34
	ResultDeviceUnavailable           Result = 46
	ResultNoDevice                    Result = 100
	ResultInvalidDevice               Result = 101
	ResultDeviceNotLicensed           Result = 102
	ResultInvalidImage                Result = 200
	ResultInvalidContext              Result = 201
	ResultContextAlreadyCurrent       Result = 202
	ResultMapFailed                   Result = 205
	ResultNoBinaryForGPU              Result = 209
	ResultECCUncorrectable            Result = 214
	ResultUnsupportedLimit            Result = 215
	ResultContextAlreadyInUse         Result = 216
	ResultInvalidPTX                  Result = 218
	ResultJITCompilerNotFound         Result = 221
	ResultUnsupportedPTXVersion       Result = 222
	ResultJITCompilationDisabled      Result = 223
	ResultInvalidSource               Result = 300
	ResultFileNotFound                Result = 301
	ResultSharedObjectSymbolNotFound  Result = 302
	ResultSharedObjectInitFailed      Result = 303
	ResultOperatingSystem             Result = 304
	ResultInvalidHandle               Result = 400
	ResultIllegalState                Result = 401
	ResultNotFound                    Result = 500
	ResultNotReady                    Result = 600
	ResultIllegalAddress              Result = 700
	ResultLaunchOutOfResources        Result = 701
	ResultLaunchTimeout               Result = 702
	ResultLaunchIncompatibleTexturing Result = 703
	ResultPrimaryContextActive        Result = 708
	ResultContextIsDestroyed          Result = 709
	ResultAssert                      Result = 710
	ResultHardwareStackError          Result = 714
	ResultIllegalInstruction          Result = 715
	ResultMisalignedAddress           Result = 716
	ResultInvalidAddressSpace         Result = 717
	ResultInvalidPC                   Result = 718
	ResultLaunchFailed                Result = 719
	ResultCooperativeLaunchTooLarge   Result = 720
	ResultNotPermitted                Result = 800
	ResultNotSupported                Result = 801
	ResultSystemNotReady              Result = 802
	ResultSystemDriverMismatch        Result = 803
	ResultCompatNotSupportedOnDevice  Result = 804
	ResultStreamCaptureUnsupported    Result = 900
	ResultStreamCaptureInvalidated    Result = 901
	ResultStreamCaptureMerge          Result = 902
	ResultStreamCaptureUnmatched      Result = 903
	ResultStreamCaptureUnjoined       Result = 904
	ResultStreamCaptureIsolation      Result = 905
	ResultStreamCaptureImplicit       Result = 906
	ResultCapturedEvent               Result = 907
	ResultStreamCaptureWrongThread    Result = 908
	ResultTimeout                     Result = 909
	ResultGraphExecUpdateFailure      Result = 910
	ResultUnknown                     Result = 999
	firstCaptureResult                       = ResultStreamCaptureUnsupported
	lastCaptureResult                        = ResultStreamCaptureWrongThread
)

// resultText is the built-in name table, used when the driver library is
// not loaded (or cuGetErrorName does not know a code).
var resultText = map[Result][2]string{
	ResultSuccess:                     {"CUDA_SUCCESS", "no error"},
	ResultInvalidValue:                {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	ResultOutOfMemory:                 {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	ResultNotInitialized:              {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	ResultDeinitialized:               {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	ResultStubLibrary:                 {"CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	ResultDeviceUnavailable:           {"CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	ResultNoDevice:                    {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	ResultInvalidDevice:               {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	ResultDeviceNotLicensed:           {"CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
	ResultInvalidImage:                {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	ResultInvalidContext:              {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	ResultContextAlreadyCurrent:       {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	ResultMapFailed:                   {"CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	ResultNoBinaryForGPU:              {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	ResultECCUncorrectable:            {"CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	ResultUnsupportedLimit:            {"CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
	ResultContextAlreadyInUse:         {"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
	ResultInvalidPTX:                  {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	ResultJITCompilerNotFound:         {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	ResultUnsupportedPTXVersion:       {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
	ResultJITCompilationDisabled:      {"CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
	ResultInvalidSource:               {"CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	ResultFileNotFound:                {"CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	ResultSharedObjectSymbolNotFound:  {"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
	ResultSharedObjectInitFailed:      {"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
	ResultOperatingSystem:             {"CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	ResultInvalidHandle:               {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	ResultIllegalState:                {"CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	ResultNotFound:                    {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	ResultNotReady:                    {"CUDA_ERROR_NOT_READY", "device not ready"},
	ResultIllegalAddress:              {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	ResultLaunchOutOfResources:        {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	ResultLaunchTimeout:               {"CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	ResultLaunchIncompatibleTexturing: {"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
	ResultPrimaryContextActive:        {"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context active"},
	ResultContextIsDestroyed:          {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	ResultAssert:                      {"CUDA_ERROR_ASSERT", "device-side assert triggered"},
	ResultHardwareStackError:          {"CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	ResultIllegalInstruction:          {"CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	ResultMisalignedAddress:           {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	ResultInvalidAddressSpace:         {"CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	ResultInvalidPC:                   {"CUDA_ERROR_INVALID_PC", "invalid program counter"},
	ResultLaunchFailed:                {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	ResultCooperativeLaunchTooLarge:   {"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
	ResultNotPermitted:                {"CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	ResultNotSupported:                {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	ResultSystemNotReady:              {"CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	ResultSystemDriverMismatch:        {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	ResultCompatNotSupportedOnDevice:  {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
	ResultStreamCaptureUnsupported:    {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	ResultStreamCaptureInvalidated:    {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	ResultStreamCaptureMerge:          {"CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
	ResultStreamCaptureUnmatched:      {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
	ResultStreamCaptureUnjoined:       {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
	ResultStreamCaptureIsolation:      {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
	ResultStreamCaptureImplicit:       {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
	ResultCapturedEvent:               {"CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
	ResultStreamCaptureWrongThread:    {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
	ResultTimeout:                     {"CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	ResultGraphExecUpdateFailure:      {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
	ResultUnknown:                     {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

// String returns the CUresult's enum name from the built-in table, or
// "CUresult(N)" for a code the table does not know.
func (r Result) String() string {
	if t, ok := resultText[r]; ok {
		return t[0]
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// message returns the built-in description of r.
func (r Result) message() string {
	if t, ok := resultText[r]; ok {
		return t[1]
	}
	return "unrecognized error code"
}

// Error is a failed driver call: which call, its CUresult, and the driver's
// name and description of that code (from cuGetErrorName and
// cuGetErrorString when the library is loaded, else from the built-in table).
type Error struct {
	Call    string // driver symbol that failed, e.g. "cuMemAlloc_v2"
	Code    Result
	Name    string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Message string // e.g. "out of memory"
}

// Error formats the error as
// "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
func (e *Error) Error() string {
	return "cuda: " + e.Call + ": " + e.Name + " (" + strconv.Itoa(int(e.Code)) + "): " + e.Message
}

// Is reports whether e matches one of the package sentinels:
// ErrNoDevice for CUDA_ERROR_NO_DEVICE, ErrNotSupported for
// CUDA_ERROR_NOT_SUPPORTED, ErrCapture for the stream-capture codes 900–908.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNoDevice:
		return e.Code == ResultNoDevice
	case ErrNotSupported:
		return e.Code == ResultNotSupported
	case ErrCapture:
		return e.Code >= firstCaptureResult && e.Code <= lastCaptureResult
	}
	return false
}

// check turns the CUresult of call into nil or an *Error.
func check(call string, r Result) error {
	if r == ResultSuccess {
		return nil
	}
	return newError(call, r)
}

func newError(call string, r Result) *Error {
	e := &Error{Call: call, Code: r, Name: r.String(), Message: r.message()}
	if bound.Load() {
		var p *byte
		if cuGetErrorName(r, &p) == ResultSuccess && p != nil {
			e.Name = goString(p)
		}
		p = nil
		if cuGetErrorString(r, &p) == ResultSuccess && p != nil {
			e.Message = goString(p)
		}
	}
	return e
}

// goString copies a NUL-terminated C string owned by the driver.
func goString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
