package driver

import (
	"syscall"
	"unsafe"
)

// libNames are the names tried, in order, when opening the driver library:
// the NVIDIA display driver installs nvcuda.dll in the Windows system folder.
var libNames = []string{"nvcuda.dll"}

// loadLibraryEx is kernel32's LoadLibraryExW, which package syscall does not
// export. kernel32.dll is a known DLL, so loading it cannot be redirected.
var loadLibraryEx = syscall.NewLazyDLL("kernel32.dll").NewProc("LoadLibraryExW")

// loadLibrarySearchSystem32 (LOAD_LIBRARY_SEARCH_SYSTEM32) makes
// LoadLibraryExW look in the system folder only, so a DLL of the same name
// in the working or executable's folder is never loaded instead of the
// driver's.
const loadLibrarySearchSystem32 = 0x00000800

// openLibrary loads the first of names that the system folder holds and
// returns its handle and name; if none loads, the error wraps ErrNoDriver
// and names them all.
// See https://learn.microsoft.com/windows/win32/api/libloaderapi/nf-libloaderapi-loadlibraryexw
func openLibrary(names []string) (uintptr, string, error) {
	errs := make([]error, 0, len(names))
	for _, name := range names {
		h, err := loadSystemLibrary(name)
		if err == nil {
			return h, name, nil
		}
		errs = append(errs, err)
	}
	return 0, "", openError(names, errs, "install an NVIDIA driver for CUDA 11.8 or newer")
}

func loadSystemLibrary(name string) (uintptr, error) {
	// Find first: LazyProc.Call panics on a missing procedure.
	if err := loadLibraryEx.Find(); err != nil {
		return 0, err
	}
	p, err := syscall.UTF16PtrFromString(name)
	if err != nil {
		return 0, err
	}
	h, _, err := loadLibraryEx.Call(uintptr(unsafe.Pointer(p)), 0, loadLibrarySearchSystem32)
	if h == 0 {
		return 0, err
	}
	return h, nil
}

// librarySymbol returns the address of symbol name in the library h.
func librarySymbol(h uintptr, name string) (uintptr, error) {
	return syscall.GetProcAddress(syscall.Handle(h), name)
}
