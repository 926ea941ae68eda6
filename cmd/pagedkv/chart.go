package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The chart is SVG written by hand with fmt: a bar chart needs only
// rectangles, lines and text, and a plotting library such as gonum/plot
// would pull a large module tree into a command that otherwise needs none.

// chartOptions are pagedkv chart's flags, checked.
type chartOptions struct {
	Bench  []string     // pagedkv bench -json files
	Peer   []string     // scripts/compare --json files
	Out    string       // the SVG file to write
	DTypes []chartDType // the sections: per op, the dtypes charted
	Peers  []string     // the peers drawn after pagedkv, in this order
	Date   string       // "" for the bench files' own date
}

// chartDType is one section of the chart: the rows of op in dtype.
type chartDType struct{ Op, DType string }

// fileList is a flag that may be given more than once, each time a path.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, ",") }

func (l *fileList) Set(path string) error {
	if path == "" {
		return errors.New("an empty path")
	}
	*l = append(*l, path)
	return nil
}

// chartOp is an op the chart draws and the one throughput it plots: decode
// is memory-bound (bytes of K and V read per second, the same count in the
// bench and in torch_decode.py), varlen attention compute-bound (TFLOP/s,
// the same exact causal count in the bench and in torch_varlen.py).
type chartOp struct {
	op, heading string
	axis, unit  string // the axis label; the value's unit
	field       string // the row's JSON field plotted
	decimals    int    // of the value printed on a bar
	value       func(*chartRow) float64
}

// chartOps are the ops pagedkv chart draws, in the order of its sections.
var chartOps = []chartOp{
	{op: "decode", heading: "decode attention", axis: "GB/s of K and V read (higher is better)", unit: "GB/s", field: "gbps",
		decimals: 0, value: func(r *chartRow) float64 { return r.GBps }},
	{op: "varlen", heading: "varlen attention, causal", axis: "TFLOP/s (higher is better)", unit: "TFLOP/s", field: "tflops",
		decimals: 1, value: func(r *chartRow) float64 { return r.TFLOPS }},
}

func findChartOp(op string) (chartOp, bool) {
	for _, o := range chartOps {
		if o.op == op {
			return o, true
		}
	}
	return chartOp{}, false
}

// chartImpl is how the chart draws one implementation: its legend name,
// the shorter name of the title and its colour.
type chartImpl struct{ legend, short, color string }

// chartImpls are the implementations the compare scripts write, in colours
// told apart with any colour vision (Okabe and Ito's palette).
var chartImpls = map[string]chartImpl{
	"pagedkv":    {"pagedkv (paged)", "pagedkv", "#0072B2"},
	"cudnn":      {"cuDNN SDPA (PyTorch, dense)", "cuDNN SDPA", "#E69F00"},
	"fa2":        {"FlashAttention-2 (PyTorch, dense)", "FlashAttention-2", "#009E73"},
	"read-floor": {"read floor (torch.sum of the same bytes)", "read floor", "#999999"},
}

// otherColors colour the peers chartImpls does not name, in -peers order.
var otherColors = []string{"#CC79A7", "#D55E00", "#56B4E9", "#000000"}

const chartSynopsis = `pagedkv chart -bench FILE -peer FILE [flags]

Draws one SVG bar chart of pagedkv beside its peers on the same problems:
the rows of pagedkv bench -json files (-bench) joined on (op, dtype, shape)
with those of scripts/compare/torch_decode.py and torch_varlen.py --json
files (-peer). A section per op and dtype (-dtype), in it a group of bars
per shape that one of -peers measured, a bar per implementation with its
value printed: decode in GB/s of K and V read, varlen in TFLOP/s. The same
files give the same SVG, byte for byte. -bench and -peer may be repeated.`

// parseChart parses and checks pagedkv chart's arguments (after "chart").
// Errors are a *usageError or a *helpRequest.
func parseChart(args []string) (chartOptions, error) {
	fs := newFlagSet("chart", chartSynopsis)
	var bench, peer fileList
	fs.Var(&bench, "bench", "a `FILE` written by pagedkv bench -json (decode and varlen rows); repeat for more")
	fs.Var(&peer, "peer", "a `FILE` written by scripts/compare/torch_decode.py or torch_varlen.py --json; repeat for more")
	out := fs.String("o", "bench.svg", "the SVG `FILE` to write")
	dtypes := fs.String("dtype", "decode=f16,varlen=bf16", "the rows charted, a `LIST` of op=dtype (op decode or varlen) or dtype (both ops), comma-separated; a section each")
	peers := fs.String("peers", "cudnn,fa2", "the peers drawn after pagedkv, in this order: comma-separated `NAMES` as the -peer files spell them (torch_decode.py also writes read-floor)")
	date := fs.String("date", "", "the date in the title, as `YYYY-MM-DD` (default: the -bench files' date)")
	if err := parseFlags(fs, args); err != nil {
		return chartOptions{}, err
	}
	o := chartOptions{Bench: bench, Peer: peer, Out: *out, Date: *date}
	if len(o.Bench) == 0 {
		return chartOptions{}, usagef("chart", "-bench is missing; allowed: a file written by pagedkv bench -json, once or more")
	}
	if len(o.Peer) == 0 {
		return chartOptions{}, usagef("chart", "-peer is missing; allowed: a file written by scripts/compare/torch_*.py --json, once or more")
	}
	var err error
	if o.DTypes, err = parseChartDTypes(*dtypes); err != nil {
		return chartOptions{}, err
	}
	for _, p := range strings.Split(*peers, ",") {
		p = strings.TrimSpace(p)
		if p == "" || p == "pagedkv" || slices.Contains(o.Peers, p) {
			return chartOptions{}, usagef("chart", "-peers=%q is not allowed; allowed: a comma-separated list of peer names (cudnn, fa2, read-floor, ...), each once, pagedkv not among them", *peers)
		}
		o.Peers = append(o.Peers, p)
	}
	if o.Date != "" {
		if _, err := time.Parse("2006-01-02", o.Date); err != nil {
			return chartOptions{}, usagef("chart", "-date=%q is not allowed; allowed: a date as YYYY-MM-DD", o.Date)
		}
	}
	if err := checkOutPath("chart", "-o", o.Out); err != nil {
		return chartOptions{}, err
	}
	return o, nil
}

// parseChartDTypes parses -dtype into sections, ordered as chartOps and
// then as given.
func parseChartDTypes(text string) ([]chartDType, error) {
	bad := usagef("chart", "-dtype=%q is not allowed; allowed: a comma-separated list of op=dtype (op decode or varlen) or dtype (both ops), each pair once", text)
	var given []chartDType
	for _, item := range strings.Split(text, ",") {
		item = strings.TrimSpace(item)
		op, dtype, one := strings.Cut(item, "=")
		pairs := []chartDType{{op, dtype}}
		if !one {
			dtype, pairs = item, nil
			for _, o := range chartOps {
				pairs = append(pairs, chartDType{o.op, dtype})
			}
		}
		if _, ok := findChartOp(op); (one && !ok) || dtype == "" || strings.ContainsAny(dtype, " =") {
			return nil, bad
		}
		for _, p := range pairs {
			if slices.Contains(given, p) {
				return nil, bad
			}
			given = append(given, p)
		}
	}
	var sections []chartDType
	for _, o := range chartOps {
		for _, p := range given {
			if p.Op == o.op {
				sections = append(sections, p)
			}
		}
	}
	return sections, nil
}

func runChart(args []string) error {
	o, err := parseChart(args)
	if err != nil {
		return err
	}
	c, err := loadChart(o)
	if err != nil {
		return err
	}
	return os.WriteFile(o.Out, c.svg(), 0o644)
}

// chartRow is a row of a bench or peer file: the fields the chart reads.
type chartRow struct {
	Peer   string  `json:"peer"` // "" in pagedkv bench files
	Op     string  `json:"op"`
	DType  string  `json:"dtype"`
	Shape  string  `json:"shape"`
	Micros float64 `json:"us"`
	TFLOPS float64 `json:"tflops"`
	GBps   float64 `json:"gbps"`
}

// chartFile is a bench or peer file: the rows and what it says of its run.
// Peer files may also be a bare list of rows.
type chartFile struct {
	Device  string     `json:"device"`
	Date    string     `json:"date"`
	Build   string     `json:"build"` // pagedkv bench's stamp of the code measured
	Torch   string     `json:"torch"` // the compare scripts' PyTorch version
	Results []chartRow `json:"results"`
}

// readChartFile reads and checks a -bench (peer false) or -peer file.
func readChartFile(path string, peer bool) (chartFile, error) {
	flagName, writer := "-bench", "pagedkv bench -json"
	if peer {
		flagName, writer = "-peer", "scripts/compare/torch_*.py --json"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return chartFile{}, fmt.Errorf("pagedkv chart: %s file: %w", flagName, err)
	}
	var f chartFile
	if text := bytes.TrimSpace(data); peer && len(text) > 0 && text[0] == '[' {
		err = json.Unmarshal(text, &f.Results)
	} else {
		err = json.Unmarshal(text, &f)
	}
	if err != nil {
		return chartFile{}, fmt.Errorf("pagedkv chart: %s file %s is not JSON as %s writes it: %v", flagName, path, writer, err)
	}
	if len(f.Results) == 0 {
		return chartFile{}, fmt.Errorf("pagedkv chart: %s file %s has no rows (its \"results\" is empty or missing)", flagName, path)
	}
	for i, r := range f.Results {
		switch {
		case !peer && r.Peer != "":
			return chartFile{}, fmt.Errorf("pagedkv chart: -bench file %s has a row of peer %q (row %d): it is a peer file; give it with -peer", path, r.Peer, i+1)
		case peer && r.Peer == "":
			return chartFile{}, fmt.Errorf("pagedkv chart: -peer file %s has a row with no \"peer\" (row %d): a pagedkv bench file goes with -bench", path, i+1)
		case r.Op == "" || r.Shape == "":
			return chartFile{}, fmt.Errorf("pagedkv chart: %s file %s has a row with no \"op\" or no \"shape\" (row %d)", flagName, path, i+1)
		}
	}
	return f, nil
}

// chartKey is what a pagedkv row and a peer's row of one problem share.
type chartKey struct{ op, dtype, shape string }

func (k chartKey) String() string { return k.op + " " + k.dtype + " " + k.shape }

// chartBar is one implementation's bar in a group; ok is false where that
// implementation has no row for the shape (the slot stays empty).
type chartBar struct {
	impl  string
	value float64
	us    float64
	ok    bool
}

// chartGroup is a shape's bars, one slot per implementation of its section.
type chartGroup struct {
	shape string
	bars  []chartBar
}

// chartSection is one op and dtype: its groups and the implementations that
// have a bar in any of them.
type chartSection struct {
	op     chartOp
	dtype  string
	impls  []string
	groups []chartGroup
}

// barChart is the chart before layout.
type barChart struct {
	title, subtitle string
	impls           []string // the legend: every implementation with a bar
	colors          map[string]string
	sections        []chartSection
}

// loadChart reads o's files and joins their rows into a chart.
func loadChart(o chartOptions) (*barChart, error) {
	var order []chartKey // the bench files' order
	type located struct {
		row  chartRow
		path string
	}
	ours := map[chartKey]located{}
	var devices, dates, builds, torches []string
	addMeta := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	for _, path := range o.Bench {
		f, err := readChartFile(path, false)
		if err != nil {
			return nil, err
		}
		addMeta(&devices, f.Device)
		addMeta(&dates, f.Date)
		addMeta(&builds, f.Build)
		for _, r := range f.Results {
			if _, ok := findChartOp(r.Op); !ok {
				continue // copy and cache-op rows have no peers
			}
			k := chartKey{r.Op, r.DType, r.Shape}
			if prev, ok := ours[k]; ok {
				return nil, fmt.Errorf("pagedkv chart: the pagedkv row %s is in both %s and %s", k, prev.path, path)
			}
			ours[k] = located{r, path}
			order = append(order, k)
		}
	}
	if len(devices) > 1 {
		return nil, fmt.Errorf("pagedkv chart: the -bench files were measured on different devices (%s); a chart compares one", strings.Join(devices, ", "))
	}
	theirs := map[string]map[chartKey]located{}
	var found []string // peer names in the files
	for _, path := range o.Peer {
		f, err := readChartFile(path, true)
		if err != nil {
			return nil, err
		}
		if f.Device != "" && len(devices) == 1 && f.Device != devices[0] {
			return nil, fmt.Errorf("pagedkv chart: -peer file %s was measured on %s, the -bench files on %s", path, f.Device, devices[0])
		}
		// The bench files' device and date, where they lack them, are the
		// first peer file's that has them.
		if len(devices) == 0 {
			addMeta(&devices, f.Device)
		}
		if len(dates) == 0 {
			addMeta(&dates, f.Date)
		}
		addMeta(&torches, f.Torch)
		for _, r := range f.Results {
			addMeta(&found, r.Peer)
			if _, ok := findChartOp(r.Op); !ok {
				continue
			}
			k := chartKey{r.Op, r.DType, r.Shape}
			if theirs[r.Peer] == nil {
				theirs[r.Peer] = map[chartKey]located{}
			}
			if prev, ok := theirs[r.Peer][k]; ok {
				return nil, fmt.Errorf("pagedkv chart: the %s row %s is in both %s and %s", r.Peer, k, prev.path, path)
			}
			theirs[r.Peer][k] = located{r, path}
		}
	}
	for _, p := range o.Peers {
		if !slices.Contains(found, p) {
			return nil, fmt.Errorf("pagedkv chart: -peers names %s, which no -peer file has; they have %s (-peers picks the peers drawn)", p, strings.Join(found, ", "))
		}
	}

	c := &barChart{colors: map[string]string{}}
	impls := append([]string{"pagedkv"}, o.Peers...)
	for _, sec := range o.DTypes {
		op, _ := findChartOp(sec.Op)
		s := chartSection{op: op, dtype: sec.DType}
		has := map[string]bool{}
		for _, k := range order {
			if _, ok := ours[k]; !ok || k.op != sec.Op || k.dtype != sec.DType {
				continue // a shape pagedkv did not measure compares nothing
			}
			g := chartGroup{shape: k.shape}
			peered := false
			for _, impl := range impls {
				at, ok := ours[k]
				if impl != "pagedkv" {
					at, ok = theirs[impl][k]
					peered = peered || ok
				}
				if !ok {
					g.bars = append(g.bars, chartBar{impl: impl})
					continue
				}
				v := op.value(&at.row)
				if !(v > 0) {
					return nil, fmt.Errorf("pagedkv chart: the %s row %s in %s has no %q, which the %s section plots", impl, k, at.path, op.field, op.op)
				}
				g.bars = append(g.bars, chartBar{impl: impl, value: v, us: at.row.Micros, ok: true})
				has[impl] = true
			}
			if peered { // nor does a shape no peer measured
				s.groups = append(s.groups, g)
			}
		}
		if len(s.groups) == 0 {
			continue
		}
		for _, impl := range impls {
			if has[impl] {
				s.impls = append(s.impls, impl)
				if !slices.Contains(c.impls, impl) {
					c.impls = append(c.impls, impl)
				}
			}
		}
		// Each group keeps a slot for every implementation of its section,
		// so a colour sits at the same place in every group.
		for i := range s.groups {
			s.groups[i].bars = slices.DeleteFunc(s.groups[i].bars, func(b chartBar) bool { return !has[b.impl] })
		}
		c.sections = append(c.sections, s)
	}
	if len(c.sections) == 0 {
		var want []string
		for _, s := range o.DTypes {
			want = append(want, s.Op+" "+s.DType)
		}
		return nil, fmt.Errorf("pagedkv chart: no row of %s is in both a -bench file and a -peer file of %s (rows join on op, dtype and shape)",
			strings.Join(want, ", "), strings.Join(o.Peers, ", "))
	}

	other := 0
	var peerNames []string
	for _, impl := range c.impls {
		if known, ok := chartImpls[impl]; ok {
			c.colors[impl] = known.color
		} else {
			c.colors[impl] = otherColors[other%len(otherColors)]
			other++
		}
		if impl != "pagedkv" {
			peerNames = append(peerNames, implShort(impl))
		}
	}
	date := o.Date
	if date == "" {
		slices.Sort(dates) // ISO dates sort by time
		date = strings.Join(dates, "")
		if len(dates) > 1 {
			date = dates[0] + " to " + dates[len(dates)-1]
		}
	}
	c.title = "pagedkv vs " + joinAnd(peerNames)
	if where := strings.Join(slices.DeleteFunc([]string{strings.Join(devices, ""), date}, func(s string) bool { return s == "" }), ", "); where != "" {
		c.title += ": " + where
	}
	c.subtitle = "Throughput, higher is better."
	if len(builds) > 0 {
		c.subtitle += " pagedkv build " + strings.Join(builds, " and ") + "."
	}
	if len(torches) > 0 {
		c.subtitle += " PyTorch " + strings.Join(torches, " and ") + "."
	}
	return c, nil
}

func implLegend(impl string) string {
	if known, ok := chartImpls[impl]; ok {
		return known.legend
	}
	return impl
}

func implShort(impl string) string {
	if known, ok := chartImpls[impl]; ok {
		return known.short
	}
	return impl
}

// joinAnd joins names as prose: "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Layout, in pixels. Text widths are estimated from the character count
// (no font metrics without a renderer), generously for a sans-serif face.
const (
	chartWidth    = 920
	chartMargin   = 20
	chartBarH     = 14
	chartBarGap   = 3
	chartGroupGap = 12
	chartValueW   = 64 // room right of the longest bar for its value
	chartFont     = "-apple-system, BlinkMacSystemFont, Segoe UI, Helvetica, Arial, sans-serif"
)

// textWidth estimates the width of s at size px.
func textWidth(s string, size float64) float64 {
	return 0.6 * size * float64(len([]rune(s)))
}

// px formats a coordinate: two decimals at most, the same for the same value.
func px(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// niceStep is the axis tick step near x: 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	base := math.Pow(10, math.Floor(math.Log10(x)))
	switch f := x / base; {
	case f <= 1:
		return base
	case f <= 2:
		return 2 * base
	case f <= 5:
		return 5 * base
	}
	return 10 * base
}

// svg lays the chart out and writes it: a white page, the title, the
// legend, then per section a heading, the groups of horizontal bars with
// their values, the value axis with its ticks and label. Bar lengths are
// value / axis maximum × plot width, each section on its own axis.
func (c *barChart) svg() []byte {
	labelW := 80.0
	for _, s := range c.sections {
		for _, g := range s.groups {
			labelW = max(labelW, textWidth(g.shape, 12))
		}
	}
	labelW = min(labelW, 320)
	plotX := chartMargin + labelW + 10
	plotW := chartWidth - chartMargin - chartValueW - plotX

	var body bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&body, format, args...) }
	y := float64(chartMargin) + 16
	w("<text x=\"%d\" y=\"%s\" font-size=\"16\" font-weight=\"bold\">%s</text>\n", chartMargin, px(y), esc(c.title))
	y += 20
	w("<text x=\"%d\" y=\"%s\" font-size=\"12\" fill=\"#555\">%s</text>\n", chartMargin, px(y), esc(c.subtitle))
	y += 12
	x := float64(chartMargin)
	for _, impl := range c.impls {
		item := 16 + textWidth(implLegend(impl), 12) + 18
		if x > chartMargin && x+item > chartWidth-chartMargin {
			x, y = chartMargin, y+20
		}
		w("<rect x=\"%s\" y=\"%s\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", px(x), px(y+8), c.colors[impl])
		w("<text x=\"%s\" y=\"%s\" font-size=\"12\">%s</text>\n", px(x+16), px(y+18), esc(implLegend(impl)))
		x += item
	}
	y += 30
	for _, s := range c.sections {
		y += 16
		w("<text x=\"%d\" y=\"%s\" font-size=\"14\" font-weight=\"bold\">%s, %s</text>\n", chartMargin, px(y), esc(s.op.heading), esc(s.dtype))
		y += 10
		top := y
		most := 0.0
		for _, g := range s.groups {
			for _, b := range g.bars {
				most = max(most, b.value)
			}
		}
		step := niceStep(most / 5)
		axisMax := step * math.Ceil(most/step-1e-9)
		decimals := max(0, -int(math.Floor(math.Log10(step))))
		groupH := float64(len(s.impls)*chartBarH + (len(s.impls)-1)*chartBarGap)
		bottom := top + float64(len(s.groups))*(groupH+chartGroupGap) - chartGroupGap + 6
		// Grid lines and ticks first, so the bars lie over them.
		var ticks bytes.Buffer
		for i := 0; float64(i)*step <= axisMax*(1+1e-9); i++ {
			tx := plotX + float64(i)*step/axisMax*plotW
			w("<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#e6e6e6\"/>\n", px(tx), px(top-4), px(tx), px(bottom))
			fmt.Fprintf(&ticks, "<text x=\"%s\" y=\"%s\" font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">%s</text>\n",
				px(tx), px(bottom+14), strconv.FormatFloat(float64(i)*step, 'f', decimals, 64))
		}
		for _, g := range s.groups {
			w("<text x=\"%s\" y=\"%s\" font-size=\"12\" text-anchor=\"end\">%s</text>\n", px(plotX-8), px(y+groupH/2+4), esc(g.shape))
			best := 0.0
			for _, b := range g.bars {
				best = max(best, b.value)
			}
			for i, b := range g.bars {
				by := y + float64(i*(chartBarH+chartBarGap))
				if !b.ok {
					w("<text x=\"%s\" y=\"%s\" font-size=\"11\" fill=\"#888\">%s: no result</text>\n", px(plotX+4), px(by+11), esc(implShort(b.impl)))
					continue
				}
				value := strconv.FormatFloat(b.value, 'f', s.op.decimals, 64)
				weight := ""
				if b.value == best {
					weight = ` font-weight="bold"`
				}
				bw := b.value / axisMax * plotW
				w("<rect class=\"bar\" data-impl=\"%s\" data-op=\"%s\" data-dtype=\"%s\" data-shape=\"%s\" data-value=\"%s\" x=\"%s\" y=\"%s\" width=\"%s\" height=\"%d\" fill=\"%s\">",
					esc(b.impl), esc(s.op.op), esc(s.dtype), esc(g.shape), strconv.FormatFloat(b.value, 'g', -1, 64),
					px(plotX), px(by), px(bw), chartBarH, c.colors[b.impl])
				w("<title>%s, %s %s %s: %s, %s µs</title></rect>\n", esc(implLegend(b.impl)), esc(s.op.op), esc(s.dtype), esc(g.shape),
					esc(value+" "+s.op.unit), strconv.FormatFloat(b.us, 'f', 2, 64))
				w("<text x=\"%s\" y=\"%s\" font-size=\"11\"%s>%s</text>\n", px(plotX+bw+4), px(by+11), weight, esc(value))
			}
			y += groupH + chartGroupGap
		}
		w("<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#333\"/>\n", px(plotX), px(bottom), px(plotX+plotW), px(bottom))
		body.Write(ticks.Bytes())
		w("<text x=\"%s\" y=\"%s\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n", px(plotX+plotW/2), px(bottom+32), esc(s.op.axis))
		y = bottom + 40
	}
	height := math.Ceil(y + chartMargin)

	var out bytes.Buffer
	fmt.Fprintf(&out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%s\" viewBox=\"0 0 %d %s\" font-family=\"%s\">\n",
		chartWidth, px(height), chartWidth, px(height), esc(chartFont))
	fmt.Fprintf(&out, "<rect width=\"%d\" height=\"%s\" fill=\"#ffffff\"/>\n", chartWidth, px(height))
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	return out.Bytes()
}
