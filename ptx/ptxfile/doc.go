// Package ptxfile reads and writes the metadata of the generated ptx/ folder:
// the manifest (source hashes, nvcc version and flags per module) and the
// parameter lists of PTX .entry directives. It embeds nothing, so
// cmd/ptxgen can use it even when ptx/ holds no PTX yet; package ptx
// re-exports it next to the embedded files.
package ptxfile
