package driver

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		call string
		code Result
		want string
	}{
		{"cuMemAlloc_v2", ResultOutOfMemory, "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"cuInit", ResultNoDevice, "cuda: cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"},
		{"cuModuleLoadDataEx", ResultInvalidPTX, "cuda: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218): a PTX JIT compilation failed"},
		{"cuLaunchKernel", Result(12345), "cuda: cuLaunchKernel: CUresult(12345) (12345): unrecognized error code"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if bound.Load() {
				t.Skip("driver loaded: names come from cuGetErrorName")
			}
			err := check(tt.call, tt.code)
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
			var e *Error
			require.True(t, errors.As(err, &e))
			assert.Equal(t, tt.call, e.Call)
			assert.Equal(t, tt.code, e.Code)
		})
	}
}

func TestCheckSuccess(t *testing.T) {
	assert.NoError(t, check("cuInit", ResultSuccess))
}

func TestErrorIs(t *testing.T) {
	tests := []struct {
		code          Result
		noDevice      bool
		capture       bool
		notSupported  bool
		wrappedToo    bool
		notNoDriverOK bool
	}{
		{code: ResultNoDevice, noDevice: true},
		{code: ResultNotSupported, notSupported: true},
		{code: ResultInvalidDevice},
		{code: ResultOutOfMemory},
		{code: Result(899)},
		{code: ResultStreamCaptureUnsupported, capture: true},
		{code: ResultStreamCaptureInvalidated, capture: true},
		{code: ResultStreamCaptureImplicit, capture: true},
		{code: ResultCapturedEvent, capture: true},
		{code: ResultStreamCaptureWrongThread, capture: true},
		{code: ResultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			err := check("cuX", tt.code)
			wrapped := fmt.Errorf("pagedkv: decode: %w", err)
			for _, e := range []error{err, wrapped} {
				assert.Equal(t, tt.noDevice, errors.Is(e, ErrNoDevice))
				assert.Equal(t, tt.capture, errors.Is(e, ErrCapture))
				assert.Equal(t, tt.notSupported, errors.Is(e, ErrNotSupported))
				assert.False(t, errors.Is(e, ErrNoDriver))
				assert.False(t, errors.Is(e, ErrInvalidArgument), "a driver's answer is not a Go-side rejection")
			}
		})
	}
}

func TestResultNames(t *testing.T) {
	tests := []struct {
		code Result
		name string
	}{
		{0, "CUDA_SUCCESS"},
		{1, "CUDA_ERROR_INVALID_VALUE"},
		{2, "CUDA_ERROR_OUT_OF_MEMORY"},
		{3, "CUDA_ERROR_NOT_INITIALIZED"},
		{4, "CUDA_ERROR_DEINITIALIZED"},
		{100, "CUDA_ERROR_NO_DEVICE"},
		{101, "CUDA_ERROR_INVALID_DEVICE"},
		{200, "CUDA_ERROR_INVALID_IMAGE"},
		{201, "CUDA_ERROR_INVALID_CONTEXT"},
		{209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{218, "CUDA_ERROR_INVALID_PTX"},
		{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
		{400, "CUDA_ERROR_INVALID_HANDLE"},
		{500, "CUDA_ERROR_NOT_FOUND"},
		{600, "CUDA_ERROR_NOT_READY"},
		{700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
		{702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
		{719, "CUDA_ERROR_LAUNCH_FAILED"},
		{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
		{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
		{907, "CUDA_ERROR_CAPTURED_EVENT"},
		{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
		{999, "CUDA_ERROR_UNKNOWN"},
		{-1, "CUresult(-1)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.name, tt.code.String(), "code %d", int(tt.code))
	}
}

// TestResultTable checks that the table is consistent: every name is a
// CUDA_* enum name, every entry has a message, and no name appears twice.
func TestResultTable(t *testing.T) {
	seen := map[string]Result{}
	for code, text := range resultText {
		assert.Regexp(t, `^CUDA_(SUCCESS|ERROR_[A-Z0-9_]+)$`, text[0])
		assert.NotEmpty(t, text[1], text[0])
		if prev, dup := seen[text[0]]; dup {
			t.Errorf("%s used by %d and %d", text[0], prev, code)
		}
		seen[text[0]] = code
	}
}

func TestArgError(t *testing.T) {
	err := argError("LoadModule: empty image")
	assert.EqualError(t, err, "cuda: LoadModule: empty image", "the sentinel adds no text")
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorIs(t, fmt.Errorf("pagedkv: %w", err), ErrInvalidArgument)
	assert.NotErrorIs(t, err, ErrNoDriver)
}
