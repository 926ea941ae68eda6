package driver

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// linkState is a CUlinkState: a pending JIT link, owned by LinkPTX.
type linkState uintptr

// The linker's part of the function table. Every driver from CUDA 11.8 on
// has these symbols, but only LinkPTX uses them, so they are looked up
// when it is first called rather than by Init: a driver library without
// them fails LinkPTX alone, with an error naming them, never Init.
var (
	// CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options,
	//                          void **optionValues, CUlinkState *stateOut);
	cuLinkCreate func(numOptions uint32, options *int32, values *uintptr, state *linkState) Result
	// CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
	//                           const char *name, unsigned int numOptions, CUjit_option *options,
	//                           void **optionValues);
	cuLinkAddData func(state linkState, inputType int32, data unsafe.Pointer, size uint64,
		name *byte, numOptions uint32, options *int32, values *uintptr) Result
	// CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut);
	cuLinkComplete func(state linkState, cubin *unsafe.Pointer, size *uint64) Result
	// CUresult cuLinkDestroy(CUlinkState state);
	cuLinkDestroy func(state linkState) Result
)

// linkSymbols are the symbols bindLink binds.
func linkSymbols() []symbol {
	return []symbol{
		{name: "cuLinkCreate_v2", fptr: &cuLinkCreate},
		{name: "cuLinkAddData_v2", fptr: &cuLinkAddData},
		{name: "cuLinkComplete", fptr: &cuLinkComplete},
		{name: "cuLinkDestroy", fptr: &cuLinkDestroy},
	}
}

// bindLink binds linkSymbols once per process, after Init; a missing
// symbol is an error naming every missing one.
var bindLink = sync.OnceValue(func() error {
	h, err := loadDriver()
	if err != nil {
		return err
	}
	return bindLinkSymbols(func(name string) (uintptr, error) { return librarySymbol(h, name) })
})

// bindLinkSymbols looks every linker symbol up with lookup first and
// registers them only when all are there.
func bindLinkSymbols(lookup func(name string) (uintptr, error)) error {
	syms := linkSymbols()
	addrs, missing := lookupSymbols(syms, lookup)
	if len(missing) > 0 {
		return fmt.Errorf("cuda: the driver library lacks %s, which LinkPTX needs; install a newer NVIDIA driver",
			strings.Join(missing, ", "))
	}
	registerSymbols(syms, addrs)
	return nil
}

// jitInputPTX is CU_JIT_INPUT_PTX, the CUjitInputType of PTX text (ABI).
const jitInputPTX int32 = 1

// CUjit_option values of the JITOptions (ABI; from cuda.h).
const (
	jitOptimizationLevel int32 = 7
	jitTarget            int32 = 9
)

// JITOption is one option of the driver's JIT compiler (a CUjit_option and
// its value) for LinkPTX.
type JITOption struct {
	option int32
	value  uintptr
}

// JITOptimizationLevel sets the JIT's optimization level, 0 to 4
// (CU_JIT_OPTIMIZATION_LEVEL). Without it the driver uses 4, the highest,
// which is also what LoadModule's JIT uses.
func JITOptimizationLevel(level int) JITOption {
	return JITOption{option: jitOptimizationLevel, value: uintptr(level)}
}

// JITTarget makes the JIT compile for compute capability cc (major*10+minor,
// e.g. 90 for sm_90) instead of the current context's device (CU_JIT_TARGET).
func JITTarget(cc int) JITOption {
	return JITOption{option: jitTarget, value: uintptr(cc)}
}

// jitOptions returns the option and value arrays of a link: the log
// buffers first (the values of the two sizes at indexes 1 and 3, which the
// driver overwrites with the bytes it wrote), then opts, each checked.
func jitOptions(infoLog, errorLog []byte, opts []JITOption) ([]int32, []uintptr, error) {
	options := []int32{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	values := []uintptr{
		uintptr(unsafe.Pointer(&infoLog[0])), uintptr(len(infoLog)),
		uintptr(unsafe.Pointer(&errorLog[0])), uintptr(len(errorLog)),
	}
	for _, o := range opts {
		switch o.option {
		case jitOptimizationLevel:
			if o.value > 4 {
				return nil, nil, argError("LinkPTX: JITOptimizationLevel(%d); allowed: 0 to 4", int(o.value))
			}
		case jitTarget:
			// uintptr(cc) of a negative cc is huge; 10.0 is 100, so 3 digits.
			if o.value < 30 || o.value > 999 {
				return nil, nil, argError("LinkPTX: JITTarget(%d); want a compute capability as major*10+minor, e.g. 90", int(o.value))
			}
		default:
			return nil, nil, argError("LinkPTX: JITOption{%d} was not made by a JIT* function", o.option)
		}
		options = append(options, o.option)
		values = append(values, o.value)
	}
	return options, values, nil
}

// LinkPTX compiles ptx, one PTX module, with the driver's JIT for the
// current context's device (call it inside Context.Do) through the driver's
// linker, and returns the machine code as a cubin, a copy the caller owns
// (the driver's buffer dies with the link), with the JIT's info log. name
// names the PTX in the logs. The PTX must be NUL-terminated; if it does not
// end in a 0 byte, a copy with one appended is passed.
//
// The code is what the driver's JIT makes of the PTX, the same compiler
// LoadModule runs on PTX, so loading the cubin (LoadModule) gives the JIT's
// code without paying for the JIT. The cubin runs on the device it was
// made for and needs a driver at least as new as this one. On failure the
// error wraps the driver's *Error and includes the JIT error log, which is
// also returned as the log.
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html
func LinkPTX(ptx []byte, name string, opts ...JITOption) (cubin []byte, log string, err error) {
	if err := Init(); err != nil {
		return nil, "", err
	}
	if err := bindLink(); err != nil {
		return nil, "", err
	}
	if len(ptx) == 0 {
		return nil, "", argError("LinkPTX: empty PTX")
	}
	if ptx[len(ptx)-1] != 0 {
		ptx = append(ptx[:len(ptx):len(ptx)], 0)
	}
	infoLog := make([]byte, jitLogBytes)
	errorLog := make([]byte, jitLogBytes)
	options, values, err := jitOptions(infoLog, errorLog, opts)
	if err != nil {
		return nil, "", err
	}
	cname := append([]byte(name), 0)

	// The driver keeps the option arrays and log buffers of cuLinkCreate
	// and writes the logs, and their sizes into values, until the link
	// completes, so all of them stay pinned until the link is destroyed.
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&ptx[0])
	pin.Pin(&infoLog[0])
	pin.Pin(&errorLog[0])
	pin.Pin(&options[0])
	pin.Pin(&values[0])
	pin.Pin(&cname[0])

	var state linkState
	if err := check("cuLinkCreate_v2", cuLinkCreate(uint32(len(options)), &options[0], &values[0], &state)); err != nil {
		return nil, "", err
	}
	defer func() {
		if derr := check("cuLinkDestroy", cuLinkDestroy(state)); derr != nil && err == nil {
			cubin, err = nil, derr
		}
		runtime.KeepAlive(ptx)
		runtime.KeepAlive(infoLog)
		runtime.KeepAlive(errorLog)
		runtime.KeepAlive(options)
		runtime.KeepAlive(values)
		runtime.KeepAlive(cname)
	}()
	// failed adds the JIT's log to err, the error of a link step.
	failed := func(err error) ([]byte, string, error) {
		log := jitLog(errorLog, values[3])
		if log == "" {
			log = jitLog(infoLog, values[1])
		}
		if log == "" {
			return nil, "", err
		}
		return nil, log, fmt.Errorf("%w\nJIT log:\n%s", err, log)
	}

	r := cuLinkAddData(state, jitInputPTX, unsafe.Pointer(&ptx[0]), uint64(len(ptx)), &cname[0], 0, nil, nil)
	if err := check("cuLinkAddData_v2", r); err != nil {
		return failed(fmt.Errorf("cuda: LinkPTX %s: %w", name, err))
	}
	var out unsafe.Pointer
	var size uint64
	if err := check("cuLinkComplete", cuLinkComplete(state, &out, &size)); err != nil {
		return failed(fmt.Errorf("cuda: LinkPTX %s: %w", name, err))
	}
	if out == nil || size == 0 {
		return nil, "", fmt.Errorf("cuda: LinkPTX %s: cuLinkComplete returned no cubin", name)
	}
	cubin = bytes.Clone(unsafe.Slice((*byte)(out), size))
	return cubin, jitLog(infoLog, values[1]), nil
}
