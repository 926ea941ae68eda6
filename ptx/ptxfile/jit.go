package ptxfile

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// JITFile is the file name inside ptx/ of the JIT record: the machine code
// the driver's JIT made of some modules' PTX on a GPU, harvested from its
// JIT cache by scripts/jit_harvest.py. cmd/ptxgen neither writes nor checks
// it.
const JITFile = "jit.json"

// JITRecord lists the recorded JIT images. It is written by
// scripts/jit_harvest.py, not by cmd/ptxgen, because only a GPU's driver can
// make the code; the ptx tests check every image against the PTX it was made
// from.
type JITRecord struct {
	Images []JITImage `json:"images"`
}

// JITImage describes one cubin the driver's JIT made of a module's PTX for
// one architecture, embedded gzip-compressed as JITCubinFile(Module, Arch).
type JITImage struct {
	Module string `json:"module"` // e.g. "varlen_bf16"
	Arch   string `json:"arch"`   // the device's architecture, e.g. "sm_90"
	// Device is the name of the GPU it was recorded on, e.g. "NVIDIA H200".
	Device string `json:"device,omitempty"`
	// DriverVersion is what the recording driver's cuDriverGetVersion
	// returned (1000*major + 10*minor, e.g. 13000): the cubin loads on that
	// driver or a newer one.
	DriverVersion int    `json:"driver_version"`
	PTXSHA256     string `json:"ptx_sha256"` // hex SHA-256 of the <Module>.ptx it was compiled from
	SHA256        string `json:"sha256"`     // hex SHA-256 of the uncompressed cubin
	Size          int64  `json:"size"`       // bytes of the uncompressed cubin
}

// JITCubinFile returns the file name inside ptx/ of module's recorded JIT
// cubin for arch ("sm_90"): "<module>.sm_90.jit.cubin.gz".
func JITCubinFile(module, arch string) string { return module + "." + arch + ".jit.cubin.gz" }

// IsJITCubinFile reports whether file is named like a JITCubinFile: the
// harvested files, which cmd/ptxgen leaves alone.
func IsJITCubinFile(file string) bool { return strings.HasSuffix(file, ".jit.cubin.gz") }

// Image returns the image of module for arch ("sm_90").
func (r JITRecord) Image(module, arch string) (JITImage, bool) {
	for _, img := range r.Images {
		if img.Module == module && img.Arch == arch {
			return img, true
		}
	}
	return JITImage{}, false
}

// Marshal encodes r deterministically: images sorted by module, then by
// architecture (sm_86 before sm_100), an empty list as [], two-space
// indentation and a trailing newline. r itself is not modified.
func (r JITRecord) Marshal() ([]byte, error) {
	out := JITRecord{Images: slices.Clone(r.Images)}
	if out.Images == nil {
		out.Images = []JITImage{}
	}
	slices.SortFunc(out.Images, func(a, b JITImage) int {
		ca, _ := SASSArch(a.Arch) // 0, sorting first, for a malformed arch
		cb, _ := SASSArch(b.Arch)
		return cmp.Or(strings.Compare(a.Module, b.Module), cmp.Compare(ca, cb), strings.Compare(a.Arch, b.Arch))
	})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("ptxfile: encoding %s: %w", JITFile, err)
	}
	return buf.Bytes(), nil
}

// ParseJITRecord decodes a JIT record written by Marshal. Unknown fields are
// an error, as is a second image for one module and architecture.
func ParseJITRecord(data []byte) (JITRecord, error) {
	var r JITRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return JITRecord{}, fmt.Errorf("ptxfile: decoding %s: %w", JITFile, err)
	}
	if dec.More() {
		return JITRecord{}, fmt.Errorf("ptxfile: decoding %s: data after the record object", JITFile)
	}
	seen := map[[2]string]bool{}
	for _, img := range r.Images {
		key := [2]string{img.Module, img.Arch}
		if seen[key] {
			return JITRecord{}, fmt.Errorf("ptxfile: %s lists module %s, %s twice", JITFile, img.Module, img.Arch)
		}
		seen[key] = true
	}
	return r, nil
}

// CompressCubin gzips a cubin reproducibly, as every *.cubin.gz in ptx/ is
// stored: best compression and a header without name, comment or
// modification time, so one Go release always turns the same cubin into the
// same bytes. Another release's compress/flate may not, which is why
// checks compare cubins decompressed.
func CompressCubin(cubin []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(cubin); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
