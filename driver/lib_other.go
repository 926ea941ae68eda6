//go:build !linux && !windows

package driver

import (
	"fmt"
	"runtime"
)

// libNames is empty: NVIDIA ships no CUDA driver for this platform (the last
// macOS one was CUDA 10.2, older than the 11.8 this package needs), so
// nothing is opened.
var libNames []string

// openLibrary tries nothing and returns an error wrapping ErrNoDriver.
func openLibrary([]string) (uintptr, string, error) {
	return 0, "", errNoCUDA()
}

// librarySymbol finds nothing: no library is ever opened here.
func librarySymbol(uintptr, string) (uintptr, error) {
	return 0, errNoCUDA()
}

func errNoCUDA() error {
	return fmt.Errorf("%w: CUDA is not available on %s", ErrNoDriver, runtime.GOOS)
}
