package main

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pagedkv/pagedkv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fixtures' values are round numbers picked for the test, not
// measurements.
const chartBenchJSON = `{
  "device": "Test GPU", "driver": 1, "date": "2000-01-02", "build": "abc, binary def", "copy_gbps": 1000,
  "results": [
    {"op": "copy", "shape": "1 GiB device-to-device", "us": 1, "gbps": 1000, "pct_copy": 100},
    {"op": "append", "dtype": "f16", "shape": "T=1 flash", "us": 1, "gbps": 10, "pct_copy": 1},
    {"op": "decode", "dtype": "f16", "shape": "seqs=1 kv=8192", "us": 10, "gbps": 400, "pct_copy": 40},
    {"op": "decode", "dtype": "f16", "shape": "seqs=8 kv=8192", "us": 20, "gbps": 900, "pct_copy": 90},
    {"op": "decode", "dtype": "bf16", "shape": "seqs=8 kv=8192", "us": 20, "gbps": 800, "pct_copy": 80},
    {"op": "decode", "dtype": "f16", "shape": "seqs=128 kv=512", "us": 20, "gbps": 300, "pct_copy": 30}
  ]
}`

const chartBenchVarlenJSON = `{
  "device": "Test GPU", "date": "2000-01-02", "build": "abc, binary def",
  "results": [
    {"op": "varlen", "dtype": "bf16", "shape": "prefill 1x4096", "us": 100, "tflops": 300, "gbps": 0, "pct_copy": 0},
    {"op": "varlen", "dtype": "bf16", "shape": "mixed 64x1 kv=2048 + 2x512 kv=4096", "us": 100, "tflops": 200, "gbps": 3, "pct_copy": 1},
    {"op": "varlen", "dtype": "f16", "shape": "prefill 1x4096", "us": 100, "tflops": 310, "gbps": 0, "pct_copy": 0}
  ]
}`

// cuDNN has no row for seqs=8 kv=8192 nor for the mixed batch: those slots
// stay empty.
const chartPeerJSON = `{
  "device": "Test GPU", "torch": "0.0-test", "date": "2000-01-03",
  "results": [
    {"peer": "cudnn", "op": "decode", "dtype": "f16", "shape": "seqs=1 kv=8192", "us": 12, "gbps": 350},
    {"peer": "fa2", "op": "decode", "dtype": "f16", "shape": "seqs=1 kv=8192", "us": 20, "gbps": 200},
    {"peer": "fa2", "op": "decode", "dtype": "f16", "shape": "seqs=8 kv=8192", "us": 21, "gbps": 850},
    {"peer": "read-floor", "op": "decode", "dtype": "f16", "shape": "seqs=8 kv=8192", "us": 19, "gbps": 950},
    {"peer": "cudnn", "op": "varlen", "dtype": "bf16", "shape": "prefill 1x4096", "us": 50, "tflops": 600},
    {"peer": "fa2", "op": "varlen", "dtype": "bf16", "shape": "prefill 1x4096", "us": 110, "tflops": 290},
    {"peer": "fa2", "op": "varlen", "dtype": "bf16", "shape": "mixed 64x1 kv=2048 + 2x512 kv=4096", "us": 400, "tflops": 50}
  ]
}`

// writeFixture writes text to name in dir and returns its path.
func writeFixture(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// chartFixtures writes the bench and peer fixtures and returns the flags
// that name them.
func chartFixtures(t *testing.T, dir string) []string {
	t.Helper()
	return []string{
		"-bench", writeFixture(t, dir, "decode.json", chartBenchJSON),
		"-bench", writeFixture(t, dir, "varlen.json", chartBenchVarlenJSON),
		"-peer", writeFixture(t, dir, "peers.json", chartPeerJSON),
	}
}

// svgBar is a bar as the SVG draws it.
type svgBar struct {
	impl, op, dtype, shape string
	value, width           float64
}

// parsedSVG is what the tests read back from the chart.
type parsedSVG struct {
	root  map[string]string // the <svg> element's attributes
	bars  []svgBar
	texts []string
}

// parseSVG decodes data as XML, failing the test where it is not well
// formed, and collects the bars and the text.
func parseSVG(t *testing.T, data []byte) parsedSVG {
	t.Helper()
	var p parsedSVG
	d := xml.NewDecoder(bytes.NewReader(data))
	var text strings.Builder
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the SVG is not well-formed XML")
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			attrs := map[string]string{}
			for _, a := range el.Attr {
				attrs[a.Name.Local] = a.Value
			}
			if depth == 1 {
				require.Equal(t, "svg", el.Name.Local)
				require.Equal(t, "http://www.w3.org/2000/svg", el.Name.Space)
				p.root = attrs
			}
			if el.Name.Local == "rect" && attrs["class"] == "bar" {
				value, err := strconv.ParseFloat(attrs["data-value"], 64)
				require.NoError(t, err)
				width, err := strconv.ParseFloat(attrs["width"], 64)
				require.NoError(t, err)
				p.bars = append(p.bars, svgBar{attrs["data-impl"], attrs["data-op"], attrs["data-dtype"], attrs["data-shape"], value, width})
			}
			text.Reset()
		case xml.CharData:
			text.Write(el)
		case xml.EndElement:
			depth--
			if el.Name.Local == "text" {
				p.texts = append(p.texts, text.String())
			}
		}
	}
	require.Equal(t, 0, depth)
	return p
}

func TestChartSVG(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "chart.svg")
	require.NoError(t, runChart(append(chartFixtures(t, dir), "-o", out)))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	p := parseSVG(t, data)

	// Explicit size, and a white page under everything.
	assert.Equal(t, "920", p.root["width"])
	assert.Equal(t, "0 0 920 "+p.root["height"], p.root["viewBox"])
	assert.Contains(t, p.root["font-family"], "sans-serif")
	assert.Regexp(t, `^<svg [^>]*>\n<rect width="920" height="[0-9.]+" fill="#ffffff"/>\n`, string(data))

	// One bar per (op, shape, implementation) with a row: decode f16 and
	// varlen bf16 (the default -dtype); no bf16 decode, no f16 varlen, no
	// shape only pagedkv measured, no read floor (not in -peers), no bar
	// where cuDNN has no row.
	var got []string
	for _, b := range p.bars {
		got = append(got, fmt.Sprintf("%s %s %s %s %g", b.op, b.dtype, b.shape, b.impl, b.value))
	}
	assert.Equal(t, []string{
		"decode f16 seqs=1 kv=8192 pagedkv 400",
		"decode f16 seqs=1 kv=8192 cudnn 350",
		"decode f16 seqs=1 kv=8192 fa2 200",
		"decode f16 seqs=8 kv=8192 pagedkv 900",
		"decode f16 seqs=8 kv=8192 fa2 850",
		"varlen bf16 prefill 1x4096 pagedkv 300",
		"varlen bf16 prefill 1x4096 cudnn 600",
		"varlen bf16 prefill 1x4096 fa2 290",
		"varlen bf16 mixed 64x1 kv=2048 + 2x512 kv=4096 pagedkv 200",
		"varlen bf16 mixed 64x1 kv=2048 + 2x512 kv=4096 fa2 50",
	}, got)

	// Lengths are proportional to the values within a section (each on its
	// own axis), to the two decimals the coordinates keep.
	for _, op := range []string{"decode", "varlen"} {
		var scale float64
		for _, b := range p.bars {
			if b.op != op {
				continue
			}
			if scale == 0 {
				scale = b.width / b.value
			}
			assert.InDelta(t, scale*b.value, b.width, 0.006, "%s %s %s", b.op, b.shape, b.impl)
		}
		assert.Positive(t, scale, op)
	}

	// Every bar's value is printed; the title names the device and the
	// bench files' date; the legend names the implementations; empty slots
	// say so.
	for _, v := range []string{"400", "350", "200", "900", "850", "300.0", "600.0", "290.0", "200.0", "50.0"} {
		assert.Contains(t, p.texts, v)
	}
	assert.Contains(t, p.texts, "pagedkv vs cuDNN SDPA and FlashAttention-2: Test GPU, 2000-01-02")
	assert.Contains(t, p.texts, "Throughput, higher is better. pagedkv build abc, binary def. PyTorch 0.0-test.")
	for _, legend := range []string{"pagedkv (paged)", "cuDNN SDPA (PyTorch, dense)", "FlashAttention-2 (PyTorch, dense)"} {
		assert.Contains(t, p.texts, legend)
	}
	assert.NotContains(t, p.texts, "read floor (torch.sum of the same bytes)")
	assert.True(t, slices.IsSorted([]int{slices.Index(p.texts, "pagedkv (paged)"), slices.Index(p.texts, "cuDNN SDPA (PyTorch, dense)"),
		slices.Index(p.texts, "FlashAttention-2 (PyTorch, dense)")}), "the legend's order: pagedkv, then -peers")
	assert.Contains(t, p.texts, "cuDNN SDPA: no result")
	assert.Contains(t, p.texts, "GB/s of K and V read (higher is better)")
	assert.Contains(t, p.texts, "TFLOP/s (higher is better)")

	// The same files give the same bytes.
	again := filepath.Join(dir, "again.svg")
	require.NoError(t, runChart(append(chartFixtures(t, dir), "-o", again)))
	data2, err := os.ReadFile(again)
	require.NoError(t, err)
	assert.Equal(t, data, data2)
}

func TestChartOptions(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "chart.svg")
	// The peers as a bare list, with the read floor first; f16 in both ops;
	// the date from the flag.
	list := writeFixture(t, dir, "list.json", `[
	  {"peer": "read-floor", "op": "decode", "dtype": "f16", "shape": "seqs=8 kv=8192", "us": 19, "gbps": 950},
	  {"peer": "fa2", "op": "varlen", "dtype": "f16", "shape": "prefill 1x4096", "us": 110, "tflops": 290}
	]`)
	args := []string{"-bench", writeFixture(t, dir, "decode.json", chartBenchJSON), "-bench", writeFixture(t, dir, "varlen.json", chartBenchVarlenJSON),
		"-peer", list, "-peers", "read-floor,fa2", "-dtype", "f16", "-date", "2001-02-03", "-o", out}
	require.NoError(t, runChart(args))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	p := parseSVG(t, data)
	var got []string
	for _, b := range p.bars {
		got = append(got, fmt.Sprintf("%s %s %s %s", b.op, b.dtype, b.shape, b.impl))
	}
	assert.Equal(t, []string{
		"decode f16 seqs=8 kv=8192 pagedkv",
		"decode f16 seqs=8 kv=8192 read-floor",
		"varlen f16 prefill 1x4096 pagedkv",
		"varlen f16 prefill 1x4096 fa2",
	}, got)
	assert.Contains(t, p.texts, "pagedkv vs read floor and FlashAttention-2: Test GPU, 2001-02-03")
	assert.Contains(t, p.texts, "Throughput, higher is better. pagedkv build abc, binary def.")
	assert.NotContains(t, p.texts, "FlashAttention-2: no result", "a section has slots only for implementations with a bar in it")
	assert.NotContains(t, p.texts, "read floor: no result")
}

func TestChartErrors(t *testing.T) {
	dir := t.TempDir()
	bench := writeFixture(t, dir, "bench.json", chartBenchJSON)
	peer := writeFixture(t, dir, "peer.json", chartPeerJSON)
	missing := filepath.Join(dir, "missing.json")
	badJSON := writeFixture(t, dir, "bad.json", `{"device": "Test GPU", "results": [`)
	empty := writeFixture(t, dir, "empty.json", `{"device": "Test GPU", "results": []}`)
	other := writeFixture(t, dir, "other.json", `{"device": "Other GPU", "results": [{"peer": "fa2", "op": "decode", "dtype": "f16", "shape": "seqs=1 kv=8192", "us": 1, "gbps": 1}]}`)
	noGBps := writeFixture(t, dir, "nogbps.json", `[{"peer": "fa2", "op": "decode", "dtype": "f16", "shape": "seqs=1 kv=8192", "us": 1}]`)
	elsewhere := writeFixture(t, dir, "elsewhere.json", `[{"peer": "fa2", "op": "decode", "dtype": "f16", "shape": "seqs=2 kv=2", "us": 1, "gbps": 1}]`)
	otherBench := writeFixture(t, dir, "otherbench.json", `{"device": "Other GPU", "results": [{"op": "decode", "dtype": "f16", "shape": "seqs=2 kv=2", "us": 1, "gbps": 1}]}`)
	noShape := writeFixture(t, dir, "noshape.json", `[{"peer": "fa2", "op": "decode", "us": 1, "gbps": 1}]`)
	out := filepath.Join(dir, "chart.svg")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreadable bench", []string{"-bench", missing, "-peer", peer}, "pagedkv chart: -bench file: open " + missing + ": no such file or directory"},
		{"unreadable peer", []string{"-bench", bench, "-peer", missing}, "pagedkv chart: -peer file: open " + missing + ": no such file or directory"},
		{"bad JSON", []string{"-bench", badJSON, "-peer", peer}, "pagedkv chart: -bench file " + badJSON + " is not JSON as pagedkv bench -json writes it: unexpected end of JSON input"},
		{"bad peer JSON", []string{"-bench", bench, "-peer", badJSON}, "pagedkv chart: -peer file " + badJSON + " is not JSON as scripts/compare/torch_*.py --json writes it: unexpected end of JSON input"},
		{"no rows", []string{"-bench", empty, "-peer", peer}, "pagedkv chart: -bench file " + empty + ` has no rows (its "results" is empty or missing)`},
		{"no peer rows", []string{"-bench", bench, "-peer", empty}, "pagedkv chart: -peer file " + empty + ` has no rows (its "results" is empty or missing)`},
		{"peer file as bench", []string{"-bench", peer, "-peer", peer}, "pagedkv chart: -bench file " + peer + ` has a row of peer "cudnn" (row 1): it is a peer file; give it with -peer`},
		{"bench file as peer", []string{"-bench", bench, "-peer", bench}, "pagedkv chart: -peer file " + bench + ` has a row with no "peer" (row 1): a pagedkv bench file goes with -bench`},
		{"row without shape", []string{"-bench", bench, "-peer", noShape}, "pagedkv chart: -peer file " + noShape + ` has a row with no "op" or no "shape" (row 1)`},
		{"same bench twice", []string{"-bench", bench, "-bench", bench, "-peer", peer}, "pagedkv chart: the pagedkv row decode f16 seqs=1 kv=8192 is in both " + bench + " and " + bench},
		{"two devices", []string{"-bench", bench, "-bench", otherBench, "-peer", peer}, "pagedkv chart: the -bench files were measured on different devices (Test GPU, Other GPU); a chart compares one"},
		{"other device", []string{"-bench", bench, "-peer", other}, "pagedkv chart: -peer file " + other + " was measured on Other GPU, the -bench files on Test GPU"},
		{"no value", []string{"-bench", bench, "-peer", noGBps, "-peers", "fa2"}, "pagedkv chart: the fa2 row decode f16 seqs=1 kv=8192 in " + noGBps + ` has no "gbps", which the decode section plots`},
		{"nothing joins", []string{"-bench", bench, "-peer", elsewhere, "-peers", "fa2"}, "pagedkv chart: no row of decode f16, varlen bf16 is in both a -bench file and a -peer file of fa2 (rows join on op, dtype and shape)"},
		{"peer absent", []string{"-bench", bench, "-peer", peer, "-peers", "cudnn,flash2"}, "pagedkv chart: -peers names flash2, which no -peer file has; they have cudnn, fa2, read-floor (-peers picks the peers drawn)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runChart(append(tc.args, "-o", out))
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			assert.NoFileExists(t, out, "a failed chart writes nothing")
		})
	}
}

func TestParseChart(t *testing.T) {
	o, err := parseChart([]string{"-bench", "a.json", "-peer", "p.json", "-bench", "b.json"})
	require.NoError(t, err)
	assert.Equal(t, chartOptions{
		Bench: []string{"a.json", "b.json"}, Peer: []string{"p.json"}, Out: "bench.svg",
		DTypes: []chartDType{{"decode", "f16"}, {"varlen", "bf16"}}, Peers: []string{"cudnn", "fa2"},
	}, o)

	for _, tc := range []struct {
		text string
		want []chartDType
	}{
		{"f16", []chartDType{{"decode", "f16"}, {"varlen", "f16"}}},
		{"varlen=f16, decode=bf16", []chartDType{{"decode", "bf16"}, {"varlen", "f16"}}},
		{"bf16,varlen=f16", []chartDType{{"decode", "bf16"}, {"varlen", "bf16"}, {"varlen", "f16"}}},
		{"varlen=bf16/e4m3", []chartDType{{"varlen", "bf16/e4m3"}}},
	} {
		got, err := parseChartDTypes(tc.text)
		require.NoError(t, err, tc.text)
		assert.Equal(t, tc.want, got, tc.text)
	}
}

func TestParseChartErrors(t *testing.T) {
	dir := t.TempDir()
	files := []string{"-bench", "a.json", "-peer", "p.json"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-peer", "p.json"}, "pagedkv chart: -bench is missing; allowed: a file written by pagedkv bench -json, once or more"},
		{[]string{"-bench", "a.json"}, "pagedkv chart: -peer is missing; allowed: a file written by scripts/compare/torch_*.py --json, once or more"},
		{[]string{"-bench", ""}, `pagedkv chart: invalid value "" for flag -bench: an empty path (pagedkv chart -h lists the flags)`},
		{append([]string{"-dtype", "prefill=f16"}, files...), `pagedkv chart: -dtype="prefill=f16" is not allowed; allowed: a comma-separated list of op=dtype (op decode or varlen) or dtype (both ops), each pair once`},
		{append([]string{"-dtype", "f16,decode=f16"}, files...), `pagedkv chart: -dtype="f16,decode=f16" is not allowed; allowed: a comma-separated list of op=dtype (op decode or varlen) or dtype (both ops), each pair once`},
		{append([]string{"-dtype", "decode="}, files...), `pagedkv chart: -dtype="decode=" is not allowed; allowed: a comma-separated list of op=dtype (op decode or varlen) or dtype (both ops), each pair once`},
		{append([]string{"-peers", "cudnn,,fa2"}, files...), `pagedkv chart: -peers="cudnn,,fa2" is not allowed; allowed: a comma-separated list of peer names (cudnn, fa2, read-floor, ...), each once, pagedkv not among them`},
		{append([]string{"-peers", "pagedkv"}, files...), `pagedkv chart: -peers="pagedkv" is not allowed; allowed: a comma-separated list of peer names (cudnn, fa2, read-floor, ...), each once, pagedkv not among them`},
		{append([]string{"-date", "02/03/2001"}, files...), `pagedkv chart: -date="02/03/2001" is not allowed; allowed: a date as YYYY-MM-DD`},
		{append([]string{"-o", dir}, files...), fmt.Sprintf("pagedkv chart: -o=%q is not allowed; allowed: a file path, and this is a folder", dir)},
		{append([]string{"-o", filepath.Join(dir, "no", "c.svg")}, files...), fmt.Sprintf("pagedkv chart: -o=%q is not allowed; allowed: a file in an existing folder, and %s is not one", filepath.Join(dir, "no", "c.svg"), filepath.Join(dir, "no"))},
		{append(files, "extra.json"), `pagedkv chart: unexpected argument "extra.json" (pagedkv chart -h lists the flags)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseChart(tc.args)
			requireUsageError(t, err, tc.want)
		})
	}
}

func TestChartHelp(t *testing.T) {
	var help *helpRequest
	_, err := parseChart([]string{"-h"})
	require.ErrorAs(t, err, &help)
	assert.True(t, strings.HasPrefix(help.Usage, "usage: pagedkv chart"), help.Usage)
	flags := []string{"-bench", "-peer", "-o", "-dtype", "-peers", "-date"}
	for _, f := range flags {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(f)+`( |$)`, help.Usage)
	}
	assert.Len(t, regexp.MustCompile(`(?m)^  -`).FindAllString(help.Usage, -1), len(flags), help.Usage)
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ x, want float64 }{
		{0.3, 0.5}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {180, 200}, {900, 1000},
	} {
		assert.InDelta(t, tc.want, niceStep(tc.x), 1e-12, "%g", tc.x)
	}
}

// TestCompareShapes checks, from the scripts' text, that the compare
// scripts name their shapes as pagedkv bench names the same problems, so
// that their rows join: torch_varlen.py's SHAPES are varlenCases' shapes
// and runs (those without score modifiers, which the peers' kernels there
// do not take); torch_decode.py's default shapes, named by its shape_name,
// are rows of the bench's decode grid.
func TestCompareShapes(t *testing.T) {
	varlenPy, err := os.ReadFile("../../scripts/compare/torch_varlen.py")
	require.NoError(t, err)
	var pyShapes []string
	for _, m := range regexp.MustCompile(`(?m)^\s+\("([^"]+)", (\[[^\]]*\]), (True|False)(?:, (\d+))?\),$`).FindAllStringSubmatch(string(varlenPy), -1) {
		pyShapes = append(pyShapes, m[1]+" "+m[2]+" "+strings.ToLower(m[3])+" "+cmp.Or(m[4], "128"))
	}
	var goShapes []string
	for _, c := range varlenCases() {
		if c.mods != (benchMods{}) || c.graphCap > 0 {
			continue // the peers have neither; a graph row compares with its eager row
		}
		var runs []string
		for _, r := range c.runs {
			runs = append(runs, fmt.Sprintf("(%d, %d, %d)", r.seqs, r.qLen, r.kvLen))
		}
		goShapes = append(goShapes, fmt.Sprintf("%s [%s] %t %d", c.shape, strings.Join(runs, ", "), c.memoryBound, c.hd()))
	}
	assert.Equal(t, goShapes, pyShapes, "torch_varlen.py SHAPES against varlenCases")

	decodePy, err := os.ReadFile("../../scripts/compare/torch_decode.py")
	require.NoError(t, err)
	assert.Contains(t, string(decodePy), `return f"seqs={seqs} kv={kv}"`, "torch_decode.py shape_name")
	assert.Contains(t, string(decodePy), `"op": "decode", "dtype": dtype, "shape": shape_name(seqs, kv)`)
	assert.Contains(t, string(decodePy), `def row(peer, seqs, kv, us, gbps, dtype="f16"):`, "rows are f16 unless named")
	assert.Contains(t, string(decodePy), `for dtype, elem in (("f16", 2), ("e4m3", 1)):`, "the read floors: f16, and e4m3 as the bench's -cache e4m3 names it")
	assert.Equal(t, "e4m3", pagedkv.E4M3.String(), "the dtype the bench's e4m3 rows carry")
	m := regexp.MustCompile(`(?m)^DEFAULT_SHAPES = \[(.*)\]$`).FindStringSubmatch(string(decodePy))
	require.NotNil(t, m, "torch_decode.py DEFAULT_SHAPES")
	pairs := regexp.MustCompile(`\((\d+), (\d+)\)`).FindAllStringSubmatch(m[1], -1)
	require.NotEmpty(t, pairs)

	benchGo, err := os.ReadFile("bench.go")
	require.NoError(t, err)
	assert.Contains(t, string(benchGo), `shape: fmt.Sprintf("seqs=%d kv=%d", seqs, kv)`, "the bench's uniform decode rows")
	grid := func(name string) []string {
		m := regexp.MustCompile(`\b` + name + ` := \[\]int\{([0-9, ]+)\}`).FindStringSubmatch(string(benchGo))
		require.NotNil(t, m, name)
		return strings.Split(m[1], ", ")
	}
	seqsGrid, kvGrid := grid("seqsGrid"), grid("kvGrid")
	for _, p := range pairs {
		assert.Contains(t, seqsGrid, p[1], "seqs=%s kv=%s", p[1], p[2])
		assert.Contains(t, kvGrid, p[2], "seqs=%s kv=%s", p[1], p[2])
	}
}
