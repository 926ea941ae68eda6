package pagedkv

import "github.com/pagedkv/pagedkv/dispatch"

// DType is an element type of a tensor argument.
type DType = dispatch.DType

// The element types pagedkv kernels read and write.
const (
	F16  = dispatch.F16  // IEEE binary16
	BF16 = dispatch.BF16 // bfloat16
	E4M3 = dispatch.E4M3 // fp8 e4m3 (OCP E4M3FN), with a per-tensor scale: caches and MLARopeQuant outputs, never queries
)
