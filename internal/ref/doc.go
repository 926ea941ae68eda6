// Package ref is the float64 CPU reference of every pagedkv op: the oracle
// that every GPU test compares against. It decodes the same paged,
// little-endian inputs the kernels read (fp16, bf16 and fp8 e4m3 bit patterns,
// block tables, slot mappings), converts between dtypes bit for bit as the
// kernels do, computes attention in float64 with a numerically stable softmax,
// and provides the error measures (RelL2, MaxAbsDiff) the tests judge results
// by. It favours clarity over speed, panics on inputs a caller should have
// validated, and imports nothing outside the standard library.
package ref
