package driver

import (
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// driverPresent reports whether this machine has a loadable driver library.
func driverPresent(t *testing.T) bool {
	t.Helper()
	err := Init()
	return err == nil || !errors.Is(err, ErrNoDriver)
}

func TestInitWithoutDriver(t *testing.T) {
	if driverPresent(t) {
		t.Skip("a CUDA driver library is present on this machine")
	}
	err := Init()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDriver)
	assertNoDriverText(t, err)
	assert.Equal(t, err, Init(), "Init caches its result")

	// Every wrapper reports the same error instead of calling a nil function.
	_, err = DeviceCount()
	assert.ErrorIs(t, err, ErrNoDriver)
	_, err = MemAlloc(16)
	assert.ErrorIs(t, err, ErrNoDriver)
	assert.ErrorIs(t, Context(0).Do(func() error { return nil }), ErrNoDriver)
	type params struct{ N int32 }
	assert.ErrorIs(t, Launch(0, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, &params{}), ErrNoDriver)
	assert.ErrorIs(t, LaunchCluster(0, Dim3{2, 1, 1}, Dim3{1, 1, 1}, Dim3{2, 1, 1}, 0, 0, &params{}), ErrNoDriver)
	assert.ErrorIs(t, StreamLegacy.WaitEvent(1), ErrNoDriver)
	_, err = StreamLegacy.Context()
	assert.ErrorIs(t, err, ErrNoDriver)
	_, err = MemAllocHost(16)
	assert.ErrorIs(t, err, ErrNoDriver)
	assert.ErrorIs(t, MemFreeHost(nil), ErrNoDriver)
	_, err = EncodeTensorMapTiled(validTiled())
	assert.ErrorIs(t, err, ErrNoDriver)
}

func TestOpenError(t *testing.T) {
	const advice = "install a driver"
	tests := []struct {
		name  string
		names []string
		errs  []error
		want  string
	}{
		{
			name:  "one shared reason is said once, without the name dlerror puts first",
			names: []string{"libcuda.so.1", "libcuda.so"},
			errs: []error{
				errors.New("libcuda.so.1: cannot open shared object file: No such file or directory"),
				errors.New("libcuda.so: cannot open shared object file: No such file or directory"),
			},
			want: "could not open libcuda.so.1 or libcuda.so (cannot open shared object file: No such file or directory); install a driver",
		},
		{
			name:  "different reasons are given per name",
			names: []string{"libcuda.so.1", "libcuda.so"},
			errs: []error{
				errors.New("/usr/lib/libcuda.so.1: wrong ELF class: ELFCLASS32"),
				errors.New("libcuda.so: cannot open shared object file: No such file or directory"),
			},
			want: "could not open libcuda.so.1 (/usr/lib/libcuda.so.1: wrong ELF class: ELFCLASS32) or " +
				"libcuda.so (cannot open shared object file: No such file or directory); install a driver",
		},
		{
			name:  "one name",
			names: []string{"nvcuda.dll"},
			errs:  []error{errors.New("The specified module could not be found.")},
			want:  "could not open nvcuda.dll (The specified module could not be found.); install a driver",
		},
		{
			name:  "an empty reason is named as such",
			names: []string{"libcuda.so.1", "libcuda.so"},
			errs:  []error{errors.New(""), errors.New("libcuda.so: cannot open shared object file: No such file or directory")},
			want: "could not open libcuda.so.1 (no reason given) or " +
				"libcuda.so (cannot open shared object file: No such file or directory); install a driver",
		},
		{
			name:  "three names",
			names: []string{"a", "b", "c"},
			errs:  []error{errors.New("gone"), errors.New("gone"), errors.New("gone")},
			want:  "could not open a, b or c (gone); install a driver",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := openError(tt.names, tt.errs, advice)
			assert.ErrorIs(t, err, ErrNoDriver)
			assert.Equal(t, ErrNoDriver.Error()+": "+tt.want, err.Error())
		})
	}
}

func TestBindTableMissingSymbols(t *testing.T) {
	missing := map[string]bool{"cuMemAllocAsync": true, "cuGraphInstantiateWithFlags": true}
	before := reflect.ValueOf(cuInit).Pointer()
	err := bindTable("libcuda.so.1", func(name string) (uintptr, error) {
		if missing[name] {
			return 0, errors.New("undefined symbol")
		}
		return 1, nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), "cuMemAllocAsync")
	assert.Contains(t, err.Error(), "cuGraphInstantiateWithFlags")
	assert.Contains(t, err.Error(), "libcuda.so.1 lacks", "names the library opened")
	assert.Equal(t, before, reflect.ValueOf(cuInit).Pointer(), "nothing is registered when a symbol is missing")

	// A missing optional symbol is not named among the missing required ones.
	missing["cuTensorMapEncodeTiled"] = true
	err = bindTable("libcuda.so.1", func(name string) (uintptr, error) {
		if missing[name] {
			return 0, errors.New("undefined symbol")
		}
		return 1, nil
	})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "cuTensorMapEncodeTiled")
}

// TestBindTableMissingOptional binds a table from a driver older than CUDA
// 12.0: it loads, and the optional symbols stay nil.
func TestBindTableMissingOptional(t *testing.T) {
	if driverPresent(t) {
		t.Skip("a CUDA driver library is present on this machine; not rebinding its table")
	}
	t.Cleanup(unbindTable)
	var optional []string
	for _, s := range symbols() {
		if s.optional {
			optional = append(optional, s.name)
		}
	}
	assert.Equal(t, []string{"cuTensorMapEncodeTiled"}, optional)

	// A stale binding from an earlier load is cleared too.
	cuTensorMapEncodeTiled = fakeEncode(new(encodeCall))
	require.NoError(t, bindTable("libcuda.so.1", func(name string) (uintptr, error) {
		if name == "cuTensorMapEncodeTiled" {
			return 0, errors.New("undefined symbol")
		}
		return 1, nil
	}))
	assert.Nil(t, cuTensorMapEncodeTiled)
	assert.NotNil(t, cuInit)
	assert.NotNil(t, cuLaunchKernelEx)
	m := validTiled()
	_, err := encodeTensorMapTiledWith(cuTensorMapEncodeTiled, &m)
	assert.ErrorIs(t, err, ErrNotSupported)
}

// TestBindTableSignatures registers every symbol at a dummy address: it
// proves purego accepts every Go signature in the table and that each
// variable gets bound. Nothing is called.
func TestBindTableSignatures(t *testing.T) {
	if driverPresent(t) {
		t.Skip("a CUDA driver library is present on this machine; not rebinding its table")
	}
	t.Cleanup(unbindTable)
	var names []string
	require.NotPanics(t, func() {
		require.NoError(t, bindTable("libcuda.so.1", func(name string) (uintptr, error) {
			names = append(names, name)
			return 1, nil
		}))
	})
	seen := map[string]bool{}
	for _, s := range symbols() {
		assert.False(t, seen[s.name], "duplicate symbol %s", s.name)
		seen[s.name] = true
		assert.False(t, reflect.ValueOf(s.fptr).Elem().IsNil(), "%s not bound", s.name)
	}
	for _, want := range []string{
		"cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRelease_v2", "cuMemAlloc_v2", "cuMemFree_v2",
		"cuMemsetD8_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
		"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2",
		"cuStreamDestroy_v2", "cuStreamBeginCapture_v2", "cuEventDestroy_v2",
		"cuGraphInstantiateWithFlags", "cuEventElapsedTime", "cuLaunchKernel", "cuLaunchKernelEx",
		"cuStreamWaitEvent", "cuStreamGetCtx", "cuMemAllocHost_v2", "cuMemFreeHost",
		"cuTensorMapEncodeTiled",
	} {
		assert.Contains(t, names, want)
	}
}

func TestGoString(t *testing.T) {
	b := []byte("CUDA_ERROR_INVALID_VALUE\x00junk")
	assert.Equal(t, "CUDA_ERROR_INVALID_VALUE", goString(&b[0]))
	z := []byte{0}
	assert.Equal(t, "", goString(&z[0]))
}

func TestJITLog(t *testing.T) {
	buf := make([]byte, 32)
	copy(buf, "ptxas error : bad\n\x00")
	tests := []struct {
		n    uintptr
		want string
	}{
		{0, ""},
		{19, "ptxas error : bad"},
		{1000, "ptxas error : bad"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, jitLog(buf, tt.n))
	}
}

// TestDriverWithoutDevice runs where libcuda loads but sees no GPU (a
// driver package installed on a CPU-only machine): the table is bound, so it
// exercises real calls that need no device.
func TestDriverWithoutDevice(t *testing.T) {
	err := Init()
	if err == nil || errors.Is(err, ErrNoDriver) {
		t.Skip("needs a loadable libcuda without a usable device")
	}
	require.True(t, bound.Load())
	assert.ErrorIs(t, err, ErrNoDevice)

	var v int32
	require.Equal(t, ResultSuccess, cuDriverGetVersion(&v))
	assert.GreaterOrEqual(t, v, int32(11080))

	e := newError("cuMemAlloc_v2", ResultOutOfMemory)
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", e.Name, "name from cuGetErrorName")
	assert.NotEmpty(t, e.Message)
	e = newError("cuX", Result(12345))
	assert.Equal(t, "CUresult(12345)", e.Name, "unknown codes fall back to the table")

	// The hand-bound hot-path symbols make real calls and allocate nothing;
	// without cuInit they fail cleanly.
	cell := new(Context)
	assert.NotEqual(t, ResultSuccess, cuCtxGetCurrent(cell))
	fr := new(frame)
	assert.NotEqual(t, ResultSuccess, cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, &fr.ptrs[0], nil))
	fr.attr = launchAttribute{id: launchAttributeClusterDimension}
	fr.attr.value.clusterDim = Dim3{1, 1, 1}
	fr.config = launchConfig{gridDimX: 1, gridDimY: 1, gridDimZ: 1, blockDimX: 1, blockDimY: 1, blockDimZ: 1,
		attrs: &fr.attr, numAttrs: 1}
	assert.NotEqual(t, ResultSuccess, cuLaunchKernelEx(&fr.config, 0, &fr.ptrs[0], nil))
	assert.NotEqual(t, ResultSuccess, cuGraphLaunch(0, 0))
	assert.NotEqual(t, ResultSuccess, cuEventRecord(0, 0))
	assert.NotEqual(t, ResultSuccess, cuStreamWaitEvent(0, 0, 0))
	if raceEnabled {
		return // allocation counts are not meaningful under -race
	}
	allocs := testing.AllocsPerRun(100, func() {
		cuCtxGetCurrent(cell)
		cuCtxSetCurrent(0)
		cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, &fr.ptrs[0], nil)
		cuLaunchKernelEx(&fr.config, 0, &fr.ptrs[0], nil)
		cuGraphLaunch(0, 0)
		cuEventRecord(0, 0)
		cuStreamWaitEvent(0, 0, 0)
	})
	assert.Zero(t, allocs)
}
