package driver

import (
	"fmt"
	"runtime"
	"sync"
)

// DriverVersion returns the CUDA version the installed driver supports,
// as 1000*major + 10*minor (12040 for CUDA 12.4).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VERSION.html
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDriverGetVersion", cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of CUDA devices. No device at all is an
// error wrapping ErrNoDevice, so a positive count is guaranteed on success.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("cuda: cuDeviceGetCount reported %d devices: %w", n, ErrNoDevice)
	}
	return int(n), nil
}

// DeviceGet returns the device with the given ordinal (0 ≤ ordinal < DeviceCount).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html
func DeviceGet(ordinal int) (Device, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var d Device
	if err := check("cuDeviceGet", cuDeviceGet(&d, int32(ordinal))); err != nil {
		return 0, err
	}
	return d, nil
}

// Name returns the device's product name, e.g. "NVIDIA H100 80GB HBM3".
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html
func (d Device) Name() (string, error) {
	if err := Init(); err != nil {
		return "", err
	}
	var buf [256]byte
	if err := check("cuDeviceGetName", cuDeviceGetName(&buf[0], int32(len(buf)), d)); err != nil {
		return "", err
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), nil
}

// TotalMem returns the device's total memory in bytes.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html
func (d Device) TotalMem() (uint64, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var b uint64
	if err := check("cuDeviceTotalMem_v2", cuDeviceTotalMem(&b, d)); err != nil {
		return 0, err
	}
	return b, nil
}

// Attribute returns one device attribute (cuDeviceGetAttribute).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDeviceGetAttribute", cuDeviceGetAttribute(&v, a, d)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// PrimaryCtxRetain retains the device's primary context (the one the CUDA
// runtime also uses) and returns it. Each successful call must be balanced
// by one PrimaryCtxRelease.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html
func (d Device) PrimaryCtxRetain() (Context, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var c Context
	if err := check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&c, d)); err != nil {
		return 0, err
	}
	return c, nil
}

// PrimaryCtxRelease releases one retain of the device's primary context.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html
func (d Device) PrimaryCtxRelease() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease(d))
}

// ctxCells hold the out-parameter of cuCtxGetCurrent: the driver writes
// through a pointer, and a pooled heap cell avoids allocating one per Do.
var ctxCells = sync.Pool{New: func() any { return new(Context) }}

// Do runs fn with c as the current context of the calling goroutine's OS
// thread, and is how every driver call that needs a context (memory,
// modules, streams, events, graphs, launches, CtxSynchronize) must be made.
//
// CUDA keeps the current context per OS thread while Go moves goroutines
// between threads, so Do locks the goroutine to its thread
// (runtime.LockOSThread), remembers the thread's current context, makes c
// current if it is not already, runs fn, restores the previous context if
// there was one (even if fn panics; a thread that had none keeps c) and
// unlocks the thread. Calls nest. fn must not start
// goroutines that make driver calls expecting c to be current; they must use
// Do themselves.
//
// Do is safe for concurrent use by multiple goroutines. In steady state it
// allocates nothing beyond what the caller's closure costs.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html
func (c Context) Do(fn func() error) error {
	if err := Init(); err != nil {
		return err
	}
	return c.do(fn)
}

// do is Do once the driver is loaded.
func (c Context) do(fn func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	cell := ctxCells.Get().(*Context)
	r := cuCtxGetCurrent(cell)
	prev := *cell
	ctxCells.Put(cell)
	if err := check("cuCtxGetCurrent", r); err != nil {
		return err
	}
	if prev != c {
		if err := check("cuCtxSetCurrent", cuCtxSetCurrent(c)); err != nil {
			return err
		}
		// A thread that had no current context keeps c: the next Do on it
		// then makes no driver call beyond cuCtxGetCurrent (two calls fewer
		// per launch). A context someone else made current is restored.
		if prev == 0 {
			return fn()
		}
		defer func() {
			if rerr := check("cuCtxSetCurrent", cuCtxSetCurrent(prev)); rerr != nil && err == nil {
				err = fmt.Errorf("cuda: restoring the previous context after Context.Do: %w", rerr)
			}
		}()
	}
	return fn()
}

// CtxSynchronize blocks until the current context has finished all work.
// Call it inside Context.Do.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html
func CtxSynchronize() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuCtxSynchronize", cuCtxSynchronize())
}
