package driver

import (
	"runtime"

	"github.com/ebitengine/purego"
)

// libNames are the names tried, in order, when opening the driver library:
// the driver's own soname, then the unversioned development link.
var libNames = []string{"libcuda.so.1", "libcuda.so"}

// openLibrary dlopens the first of names that loads and returns its handle
// and name; if none does, the error wraps ErrNoDriver and names them all.
// The goroutine stays on one OS thread throughout: dlerror's message is per
// thread, and purego reads it in a second call after dlopen's, so a
// goroutine moved between the two read another thread's (empty) message
// (seen under go test -race -shuffle=on).
func openLibrary(names []string) (uintptr, string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	errs := make([]error, 0, len(names))
	for _, name := range names {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, name, nil
		}
		errs = append(errs, err)
	}
	return 0, "", openError(names, errs,
		"install an NVIDIA driver for CUDA 11.8 or newer, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH")
}

// librarySymbol returns the address of symbol name in the library h (on one
// OS thread, for dlerror's message: see openLibrary).
func librarySymbol(h uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(h, name)
}
