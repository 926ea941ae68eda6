package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime/debug"
)

// buildStamp says which code this binary is: the VCS revision it was built
// from (12 hex digits, "+dirty" when the tree had uncommitted changes, as
// the Go toolchain stamped it) and the first 12 hex digits of the
// executable's own SHA-256, which tells two builds of one dirty tree apart.
// Binaries are built on one machine and run on another (scripts/gpu.sh):
// info and bench print it so that a result names the build it measured.
func buildStamp() string {
	rev := "no VCS stamp"
	if info, ok := debug.ReadBuildInfo(); ok {
		var r, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				r = s.Value
			case "vcs.modified":
				dirty = s.Value
			}
		}
		if r != "" {
			rev = r[:min(12, len(r))]
			if dirty == "true" {
				rev += "+dirty"
			}
		}
	}
	return rev + ", binary " + executableHash()
}

// executableHash returns the first 12 hex digits of the running
// executable's SHA-256, or "unknown" when it cannot be read.
func executableHash() string {
	path, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unknown"
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
