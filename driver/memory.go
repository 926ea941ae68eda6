package driver

import "unsafe"

// Memory functions need a current context: call them inside Context.Do.
//
// Host pointers passed to the copy functions are the caller's
// responsibility: the memory must be valid for bytes bytes and must stay
// alive (and, if it is Go memory, reachable and unmodified) until the driver
// is done with it. For the synchronous forms that is until the call returns
// (use runtime.KeepAlive after the call). For MemcpyHtoDAsync and
// MemcpyDtoHAsync it is until the stream reaches the copy: synchronize the
// stream (or an event recorded after the copy) before reusing or releasing
// the host buffer. CUDA documents the async forms as fully asynchronous only
// for page-locked memory (MemAllocHost); with pageable memory, which is what
// Go allocates, they "might be synchronous with respect to host" (the driver
// may stage the copy through pinned memory), and any call may block for
// internal reasons. Neither behavior is a promise to rely on, so the rule
// above holds for both kinds of memory. See
// https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html

// MemAlloc allocates bytes of device memory.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemAlloc(bytes uint64) (DevicePtr, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var p DevicePtr
	if err := check("cuMemAlloc_v2", cuMemAlloc(&p, bytes)); err != nil {
		return 0, err
	}
	return p, nil
}

// MemFree frees memory from MemAlloc.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemFree(p DevicePtr) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemFree_v2", cuMemFree(p))
}

// MemAllocAsync allocates bytes of device memory in stream order from the
// device's default memory pool (needs AttrMemoryPoolsSupported). The memory
// may be used by work enqueued on s after this call.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html
func MemAllocAsync(bytes uint64, s Stream) (DevicePtr, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var p DevicePtr
	if err := check("cuMemAllocAsync", cuMemAllocAsync(&p, bytes, s)); err != nil {
		return 0, err
	}
	return p, nil
}

// MemFreeAsync frees p in stream order: after all work enqueued on s
// before this call.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html
func MemFreeAsync(p DevicePtr, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemFreeAsync", cuMemFreeAsync(p, s))
}

// MemAllocHost allocates bytes of page-locked host memory (cuMemAllocHost_v2)
// in the current context. The driver copies to and from it by DMA, so the
// async copies run without staging and without blocking the host. With
// unified addressing (every 64-bit platform a current driver runs on) every
// context of every device may use it. It is outside the Go heap: free it with MemFreeHost.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemAllocHost(bytes uint64) (unsafe.Pointer, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	if err := check("cuMemAllocHost_v2", cuMemAllocHost(&p, bytes)); err != nil {
		return nil, err
	}
	return p, nil
}

// MemFreeHost frees memory from MemAllocHost. It does not wait for copies
// still enqueued that use it: the caller makes sure none is.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemFreeHost(p unsafe.Pointer) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemFreeHost", cuMemFreeHost(p))
}

// MemsetD8 sets n bytes at p to v.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemsetD8(p DevicePtr, v uint8, n uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemsetD8_v2", cuMemsetD8(p, v, n))
}

// MemsetD8Async sets n bytes at p to v, on stream s.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemsetD8Async(p DevicePtr, v uint8, n uint64, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemsetD8Async", cuMemsetD8Async(p, v, n, s))
}

// MemsetD32Async sets n 32-bit words at p (4-byte aligned) to v, on stream s.
// It is how float32 buffers are poisoned with NaN (v = 0x7fc00000).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemsetD32Async(p DevicePtr, v uint32, n uint64, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemsetD32Async", cuMemsetD32Async(p, v, n, s))
}

// MemcpyHtoD copies bytes from host memory src to device memory dst.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, bytes uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyHtoD_v2", cuMemcpyHtoD(dst, src, bytes))
}

// MemcpyDtoH copies bytes from device memory src to host memory dst.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, bytes uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyDtoH_v2", cuMemcpyDtoH(dst, src, bytes))
}

// MemcpyDtoD copies bytes between two device buffers.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemcpyDtoD(dst, src DevicePtr, bytes uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyDtoD_v2", cuMemcpyDtoD(dst, src, bytes))
}

// MemcpyHtoDAsync enqueues a host-to-device copy on s. src must stay valid
// and unmodified until s reaches the copy (see the rules above).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, bytes uint64, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync(dst, src, bytes, s))
}

// MemcpyDtoHAsync enqueues a device-to-host copy on s. dst must stay valid
// until s reaches the copy, and holds the data only after that point.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, bytes uint64, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync(dst, src, bytes, s))
}

// MemcpyDtoDAsync enqueues a device-to-device copy on s.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
func MemcpyDtoDAsync(dst, src DevicePtr, bytes uint64, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyDtoDAsync_v2", cuMemcpyDtoDAsync(dst, src, bytes, s))
}
