package driver

import (
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLinkPTXWithoutDriver(t *testing.T) {
	if driverPresent(t) {
		t.Skip("a CUDA driver library is present on this machine")
	}
	_, _, err := LinkPTX([]byte(".version 7.8\n"), "m")
	assert.ErrorIs(t, err, ErrNoDriver)
}

// TestBindLinkSymbols registers the linker's symbols at a dummy address:
// purego accepts every Go signature and each variable gets bound. Nothing
// is called.
func TestBindLinkSymbols(t *testing.T) {
	if driverPresent(t) {
		t.Skip("a CUDA driver library is present on this machine; not rebinding its table")
	}
	t.Cleanup(unbindTable)
	var names []string
	require.NotPanics(t, func() {
		require.NoError(t, bindLinkSymbols(func(name string) (uintptr, error) {
			names = append(names, name)
			return 1, nil
		}))
	})
	assert.Equal(t, []string{"cuLinkCreate_v2", "cuLinkAddData_v2", "cuLinkComplete", "cuLinkDestroy"}, names)
	for _, s := range linkSymbols() {
		assert.False(t, reflect.ValueOf(s.fptr).Elem().IsNil(), "%s not bound", s.name)
	}
}

func TestBindLinkSymbolsMissing(t *testing.T) {
	err := bindLinkSymbols(func(name string) (uintptr, error) {
		if name == "cuLinkComplete" || name == "cuLinkDestroy" {
			return 0, errors.New("undefined symbol")
		}
		return 1, nil
	})
	require.Error(t, err)
	assert.Equal(t, "cuda: the driver library lacks cuLinkComplete, cuLinkDestroy, which LinkPTX needs; install a newer NVIDIA driver", err.Error())
	assert.NotErrorIs(t, err, ErrNoDriver, "the rest of the driver works")
	assert.Nil(t, cuLinkCreate, "nothing is registered when a symbol is missing")
}

func TestJITOptions(t *testing.T) {
	info, errs := make([]byte, 8), make([]byte, 16)
	logs := []uintptr{uintptr(unsafe.Pointer(&info[0])), 8, uintptr(unsafe.Pointer(&errs[0])), 16}
	tests := []struct {
		name    string
		opts    []JITOption
		options []int32
		values  []uintptr
		err     string
	}{
		{name: "logs only", options: []int32{3, 4, 5, 6}, values: logs},
		{
			name:    "level and target",
			opts:    []JITOption{JITOptimizationLevel(3), JITTarget(90)},
			options: []int32{3, 4, 5, 6, 7, 9},
			values:  append(logs[:4:4], 3, 90),
		},
		{name: "level 0", opts: []JITOption{JITOptimizationLevel(0)}, options: []int32{3, 4, 5, 6, 7}, values: append(logs[:4:4], 0)},
		{name: "level too high", opts: []JITOption{JITOptimizationLevel(5)}, err: "cuda: LinkPTX: JITOptimizationLevel(5); allowed: 0 to 4"},
		{name: "negative level", opts: []JITOption{JITOptimizationLevel(-1)}, err: "cuda: LinkPTX: JITOptimizationLevel(-1); allowed: 0 to 4"},
		{name: "bad target", opts: []JITOption{JITTarget(9)}, err: "cuda: LinkPTX: JITTarget(9); want a compute capability as major*10+minor, e.g. 90"},
		{name: "zero option", opts: []JITOption{{}}, err: "cuda: LinkPTX: JITOption{0} was not made by a JIT* function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			options, values, err := jitOptions(info, errs, tt.opts)
			if tt.err != "" {
				assert.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.options, options)
			assert.Equal(t, tt.values, values)
		})
	}
}

// TestLinkSymbolsWithoutDevice runs where libcuda loads but sees no GPU: it
// binds the linker's symbols in the real library and calls them, which
// fails cleanly without cuInit, and LinkPTX reports the missing device.
func TestLinkSymbolsWithoutDevice(t *testing.T) {
	err := Init()
	if err == nil || errors.Is(err, ErrNoDriver) {
		t.Skip("needs a loadable libcuda without a usable device")
	}
	_, _, err = LinkPTX([]byte(".version 7.8\n"), "m")
	assert.ErrorIs(t, err, ErrNoDevice)

	h, _, err := openLibrary(libNames)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, s := range linkSymbols() {
			v := reflect.ValueOf(s.fptr).Elem()
			v.Set(reflect.Zero(v.Type()))
		}
	})
	require.NoError(t, bindLinkSymbols(func(name string) (uintptr, error) { return librarySymbol(h, name) }))
	var state linkState
	assert.NotEqual(t, ResultSuccess, cuLinkCreate(0, nil, nil, &state))
	assert.NotEqual(t, ResultSuccess, cuLinkAddData(0, jitInputPTX, nil, 0, nil, 0, nil, nil))
	var out unsafe.Pointer
	var size uint64
	assert.NotEqual(t, ResultSuccess, cuLinkComplete(0, &out, &size))
	assert.NotEqual(t, ResultSuccess, cuLinkDestroy(0))
}
