package dispatch

import (
	"errors"
	"fmt"
)

// ErrInvalidShape matches (with errors.Is) every error the planner returns for
// a shape, device description or knob it cannot plan for.
var ErrInvalidShape = errors.New("dispatch: invalid shape")

// shapeError carries a message naming the field, its value and what is
// allowed, and matches ErrInvalidShape without repeating its text.
type shapeError struct{ msg string }

func newShapeError(msg string) error { return &shapeError{msg: msg} }

func (e *shapeError) Error() string { return e.msg }

func (e *shapeError) Is(target error) bool { return target == ErrInvalidShape }

func errf(format string, args ...any) error { return newShapeError(fmt.Sprintf(format, args...)) }

func errDType(dtype DType) error {
	return errf("dispatch: DecodeShape.DType=%v is not supported; supported: f16, bf16", dtype)
}

func errCacheDType(cacheDType, dtype DType) error {
	return errf("dispatch: DecodeShape.CacheDType=%v is not supported with DType=%v; supported: %v, e4m3", cacheDType, dtype, dtype)
}

func errHeadDim(d int) error {
	return errf("dispatch: DecodeShape.HeadDim=%d is not supported; supported: %s", d, HeadDimsText)
}
