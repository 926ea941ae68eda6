// Command pagedkv inspects a GPU for pagedkv, benchmarks its kernels,
// verifies them against the float64 reference and charts the bench's
// results beside its peers'.
//
//	pagedkv info             driver, device, configuration, module loads
//	pagedkv bench [op]       copy bandwidth, then every kernel against it
//	pagedkv verify [flags]   random shapes against internal/ref
//	pagedkv chart [flags]    bench rows beside PyTorch's as an SVG bar chart
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
	case "chart":
		err = runChart(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "pagedkv: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	var help *helpRequest
	var bad *usageError
	switch {
	case errors.As(err, &help):
		fmt.Fprint(os.Stderr, help.Usage)
	case errors.As(err, &bad):
		fmt.Fprintln(os.Stderr, bad)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, explain(err))
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: pagedkv <command> [flags]

commands:
  info     driver version, device, configuration in effect and its sources,
           and how every embedded module loads on this GPU: which image, why,
           and how long (without a GPU: the configuration, the embedded
           modules and why there is none)
  bench    device-to-device copy bandwidth, then the kernels as a fraction of it
           (varlen attention also in TFLOP/s); a row the library refuses is
           skipped and named at the end, and the command then exits 1:
           pagedkv bench [all|copy|append|decode|varlen] [flags]
  verify   a correctness sweep on random shapes against the float64 reference,
           counted per op family (pagedkv verify -h lists them)
  chart    an SVG bar chart of bench -json rows beside the PyTorch peers' rows
           of the same shapes (scripts/compare/*.py --json); needs no GPU:
           pagedkv chart -bench FILE -peer FILE [-o bench.svg] [flags]

pagedkv <command> -h lists the command's flags. Flags are checked before the
GPU is opened; a bad one exits with status 2.
`)
}

// explain turns the no-GPU errors into one sentence.
func explain(err error) string {
	if reason, ok := noGPUReason(err); ok {
		return "pagedkv: " + reason
	}
	return err.Error()
}

// noGPUReason says in one sentence why err, from pagedkv.Open, leaves no GPU
// to run on, and false when err is another failure (or nil).
func noGPUReason(err error) (string, bool) {
	switch {
	case errors.Is(err, pagedkv.ErrNoDriver):
		// The driver's text already names the libraries tried and the fix
		// (a driver for CUDA 11.8 or newer, LD_LIBRARY_PATH); adding ours
		// would say it twice.
		return err.Error(), true
	case errors.Is(err, pagedkv.ErrNoDevice):
		return "the NVIDIA driver sees no CUDA device on this machine (" + err.Error() + ")", true
	}
	return "", false
}
