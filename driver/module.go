package driver

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"
)

// jitLogBytes is the size of each JIT log buffer LoadModule provides.
const jitLogBytes = 16 << 10

// LoadModule loads a PTX, cubin or fatbin image into the current context
// (call it inside Context.Do), JIT-compiling PTX for the device. The image
// must be NUL-terminated for PTX; if it does not end in a 0 byte, a copy with
// one appended is passed. On failure the error wraps the driver's *Error and
// includes the JIT error log.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html
func LoadModule(image []byte) (Module, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	if len(image) == 0 {
		return 0, argError("LoadModule: empty image")
	}
	if image[len(image)-1] != 0 {
		image = append(image[:len(image):len(image)], 0)
	}
	infoLog := make([]byte, jitLogBytes)
	errorLog := make([]byte, jitLogBytes)
	options := [4]int32{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	// Each option value is a void* slot holding either a pointer or, for the
	// sizes, the number itself; the driver overwrites the size slots with
	// the number of log bytes it wrote.
	values := [4]uintptr{
		uintptr(unsafe.Pointer(&infoLog[0])), uintptr(len(infoLog)),
		uintptr(unsafe.Pointer(&errorLog[0])), uintptr(len(errorLog)),
	}

	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&image[0])
	pin.Pin(&infoLog[0])
	pin.Pin(&errorLog[0])
	pin.Pin(&options[0])
	pin.Pin(&values[0])

	var m Module
	r := cuModuleLoadDataEx(&m, unsafe.Pointer(&image[0]), uint32(len(options)), &options[0], &values[0])
	runtime.KeepAlive(image)
	runtime.KeepAlive(infoLog)
	runtime.KeepAlive(errorLog)
	if err := check("cuModuleLoadDataEx", r); err != nil {
		log := jitLog(errorLog, values[3])
		if log == "" {
			log = jitLog(infoLog, values[1])
		}
		if log == "" {
			return 0, err
		}
		return 0, fmt.Errorf("%w\nJIT log:\n%s", err, log)
	}
	return m, nil
}

// jitLog returns the text the driver wrote into buf (n bytes reported).
func jitLog(buf []byte, n uintptr) string {
	if n > uintptr(len(buf)) {
		n = uintptr(len(buf))
	}
	b := buf[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(bytes.TrimSpace(b))
}

// Function returns the kernel entry point with the given (extern "C") name.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html
func (m Module) Function(name string) (Function, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	cname := append([]byte(name), 0)
	var f Function
	r := cuModuleGetFunction(&f, m, &cname[0])
	runtime.KeepAlive(cname)
	if err := check("cuModuleGetFunction", r); err != nil {
		return 0, fmt.Errorf("cuda: kernel %q: %w", name, err)
	}
	return f, nil
}

// Unload unloads the module; its Functions become invalid.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html
func (m Module) Unload() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuModuleUnload", cuModuleUnload(m))
}

// Attribute returns one attribute of the kernel (cuFuncGetAttribute).
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html
func (f Function) Attribute(a FunctionAttribute) (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuFuncGetAttribute", cuFuncGetAttribute(&v, a, f)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// SetAttribute sets one attribute of the kernel (cuFuncSetAttribute), e.g.
// FuncAttrMaxDynamicSharedSizeBytes before a launch that needs more than
// 48 KiB of dynamic shared memory.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html
func (f Function) SetAttribute(a FunctionAttribute, v int) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuFuncSetAttribute", cuFuncSetAttribute(f, a, int32(v)))
}

// MaxActiveBlocksPerSM returns how many blocks of blockSize threads using
// dynamicSharedBytes of dynamic shared memory can be resident on one SM.
// Call it inside Context.Do.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html
func (f Function) MaxActiveBlocksPerSM(blockSize int, dynamicSharedBytes int) (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	if blockSize <= 0 || dynamicSharedBytes < 0 {
		return 0, argError("MaxActiveBlocksPerSM: blockSize=%d, dynamicSharedBytes=%d; want blockSize > 0 and dynamicSharedBytes >= 0",
			blockSize, dynamicSharedBytes)
	}
	var n int32
	r := cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, int32(blockSize), uint64(dynamicSharedBytes))
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", r); err != nil {
		return 0, err
	}
	return int(n), nil
}
