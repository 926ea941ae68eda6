// Command pagedkv inspects a GPU for pagedkv, benchmarks its kernels and
// verifies them against the float64 reference.
//
//	pagedkv info             driver, device, configuration, module JIT loads
//	pagedkv bench [op]       copy bandwidth, then every kernel against it
//	pagedkv verify [flags]   random shapes against internal/ref
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/pagedkv/pagedkv"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "info":
		err = runInfo(os.Args[2:])
	case "bench":
		err = runBench(os.Args[2:])
	case "verify":
		err = runVerify(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "pagedkv: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, explain(err))
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: pagedkv <command> [flags]

commands:
  info     driver version, device, configuration in effect and its sources,
           and whether every embedded module JIT-loads on this GPU
  bench    device-to-device copy bandwidth, then the kernels as a fraction of it:
           pagedkv bench [all|copy|append|decode] [flags] (pagedkv bench -h for flags)
  verify   a correctness sweep on random shapes against the float64 reference
`)
}

// explain turns the no-GPU errors into one sentence.
func explain(err error) string {
	switch {
	case errors.Is(err, pagedkv.ErrNoDriver):
		return "pagedkv: no NVIDIA driver: libcuda.so.1 could not be loaded (install an NVIDIA driver for CUDA 11.8 or newer, or set LD_LIBRARY_PATH): " + err.Error()
	case errors.Is(err, pagedkv.ErrNoDevice):
		return "pagedkv: the NVIDIA driver sees no CUDA device on this machine: " + err.Error()
	}
	return err.Error()
}
