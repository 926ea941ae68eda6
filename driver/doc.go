// Package driver binds the subset of the CUDA driver API that pagedkv needs,
// in pure Go: the driver library (libcuda.so.1 on Linux, nvcuda.dll on
// Windows) is opened at run time with purego, so nothing here needs cgo, a
// CUDA toolkit or a GPU to build. It is the lowest layer of pagedkv: an
// unexported function table (one variable per driver symbol, versioned ABI
// names so one build runs on drivers from CUDA 11.8 to 13.x), and above it small wrappers on opaque handle types (Device, Context, Module,
// Function, DevicePtr, Stream, Event, Graph, GraphExec) that turn every
// CUresult into an *Error. Driver calls that need a current context must run
// inside Context.Do, which pins the goroutine to its OS thread for the call.
// Handles are raw driver handles: this package does not track ownership, and
// every Destroy, Free or Release is the caller's job. It runs on linux/amd64
// and linux/arm64, and binds nvcuda.dll the same way on windows/amd64 (not yet
// run on a Windows GPU); it builds on darwin, where Init returns ErrNoDriver
// since macOS has no CUDA driver.
package driver
