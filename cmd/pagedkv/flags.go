package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// usageError is a command line that cannot run: an unknown flag, a value
// that does not parse or is out of range, a stray argument. main prints it
// and exits 2, as the flag package does, before any device is opened.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError for subcommand cmd; the text follows the
// project's form: the flag, the value and what is allowed.
func usagef(cmd, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf("pagedkv "+cmd+": "+format, args...)}
}

// helpRequest is what the parse functions return for -h or -help: Usage is
// the subcommand's synopsis and flags, which main prints before exiting 0.
type helpRequest struct{ Usage string }

func (h *helpRequest) Error() string { return "help requested" }

// newFlagSet returns an empty flag set for subcommand cmd whose usage text
// starts with synopsis. It never prints or exits: parseFlags turns what it
// would have printed into errors.
func newFlagSet(cmd, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs (made by newFlagSet) and refuses positional
// arguments. Errors are a *helpRequest or a *usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var out strings.Builder
	fs.SetOutput(&out)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return &helpRequest{Usage: out.String()}
	case err != nil:
		return usagef(fs.Name(), "%v (pagedkv %s -h lists the flags)", err, fs.Name())
	case fs.NArg() > 0:
		return usagef(fs.Name(), "unexpected argument %q (pagedkv %s -h lists the flags)", fs.Arg(0), fs.Name())
	}
	return nil
}

// checkDevice checks a -device ordinal as far as it can be without a
// driver: pagedkv.Open reports one past the last device.
func checkDevice(cmd string, device int) error {
	if device < 0 {
		return usagef(cmd, "-device=%d is not allowed; allowed: 0 or more (a CUDA device ordinal)", device)
	}
	return nil
}
