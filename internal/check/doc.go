// Package check builds random GPU problems (random shapes, shuffled page
// tables, random lengths and data, NaN-poisoned outputs), runs them through
// a pagedkv.Runtime and compares the results with internal/ref. The GPU
// tests and `pagedkv verify` share it.
package check
