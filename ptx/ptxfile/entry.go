package ptxfile

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Entry is a kernel entry point declared in PTX with .entry.
type Entry struct {
	Name   string
	Params []Param // in declaration order, which is the launch argument order
}

// Param is one kernel parameter of an .entry directive.
type Param struct {
	Name  string // e.g. "paged_decode_f16_hd128_param_0"
	Type  string // PTX fundamental type without the dot: u64, u32, s32, f32, s64, b8, …
	Len   int    // array element count for `name[N]`; 0 for a scalar
	Size  int    // bytes: the type's size, times Len for an array
	Align int    // bytes: the .align value if given, else the type's size
}

// typeSizes holds the byte size of every PTX fundamental type a kernel
// parameter can have.
var typeSizes = map[string]int{
	"b8": 1, "u8": 1, "s8": 1,
	"b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
	"b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
	"b64": 8, "u64": 8, "s64": 8, "f64": 8,
	"b128": 16,
}

// Entries returns every .entry directive in ptxText, in file order, with its
// parameters. It understands the forms nvcc emits:
//
//	.visible .entry name(
//		.param .u64 name_param_0,
//		.param .align 8 .b8 name_param_1[16],
//		.param .u64 .ptr .global .align 16 name_param_2
//	)
//
// Comments are ignored. A declaration it cannot read is an error naming the
// entry and the offending text.
func Entries(ptxText []byte) ([]Entry, error) {
	src := stripComments(ptxText)
	var entries []Entry
	for rest := src; ; {
		i := indexToken(rest, ".entry")
		if i < 0 {
			return entries, nil
		}
		rest = rest[i+len(".entry"):]
		open := strings.IndexByte(rest, '(')
		// An entry may have no parameter list only if it is followed by its
		// body or by performance directives; nvcc always writes the list.
		if open < 0 {
			return nil, fmt.Errorf("ptxfile: .entry %q: no parameter list", firstField(rest))
		}
		name := strings.TrimSpace(rest[:open])
		if !isIdent(name) {
			return nil, fmt.Errorf("ptxfile: .entry %q: not a PTX identifier", name)
		}
		close := strings.IndexByte(rest[open:], ')')
		if close < 0 {
			return nil, fmt.Errorf("ptxfile: .entry %s: unterminated parameter list", name)
		}
		list := rest[open+1 : open+close]
		rest = rest[open+close+1:]

		e := Entry{Name: name}
		if strings.TrimSpace(list) != "" {
			for _, decl := range strings.Split(list, ",") {
				p, err := parseParam(decl)
				if err != nil {
					return nil, fmt.Errorf("ptxfile: .entry %s: %w", name, err)
				}
				e.Params = append(e.Params, p)
			}
		}
		entries = append(entries, e)
	}
}

// EntryNames returns the names of Entries(ptxText), in file order.
func EntryNames(ptxText []byte) ([]string, error) {
	entries, err := Entries(ptxText)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	return names, nil
}

func parseParam(decl string) (Param, error) {
	fields := strings.Fields(decl)
	if len(fields) < 3 || fields[0] != ".param" {
		return Param{}, fmt.Errorf("parameter %q: want `.param [.align N] .TYPE name`", strings.TrimSpace(decl))
	}
	var p Param
	for i := 1; i < len(fields)-1; i++ {
		f := fields[i]
		switch {
		case f == ".align":
			if i+1 >= len(fields)-1 {
				return Param{}, fmt.Errorf("parameter %q: .align without a value", strings.TrimSpace(decl))
			}
			n, err := strconv.Atoi(fields[i+1])
			if err != nil || n <= 0 {
				return Param{}, fmt.Errorf("parameter %q: bad .align %q", strings.TrimSpace(decl), fields[i+1])
			}
			p.Align = n
			i++
		case f == ".ptr":
			// What follows .ptr (.global, .align N) describes what the
			// parameter points to, not the parameter itself.
			i = len(fields) - 2
		case strings.HasPrefix(f, ".") && typeSizes[f[1:]] > 0:
			if p.Type != "" {
				return Param{}, fmt.Errorf("parameter %q: two types", strings.TrimSpace(decl))
			}
			p.Type = f[1:]
		default:
			return Param{}, fmt.Errorf("parameter %q: unexpected %q", strings.TrimSpace(decl), f)
		}
	}
	if p.Type == "" {
		return Param{}, fmt.Errorf("parameter %q: no type", strings.TrimSpace(decl))
	}
	name := fields[len(fields)-1]
	size := typeSizes[p.Type]
	if lb := strings.IndexByte(name, '['); lb >= 0 {
		if !strings.HasSuffix(name, "]") {
			return Param{}, fmt.Errorf("parameter %q: bad array suffix", name)
		}
		n, err := strconv.Atoi(name[lb+1 : len(name)-1])
		if err != nil || n <= 0 {
			return Param{}, fmt.Errorf("parameter %q: bad array length", name)
		}
		name, p.Len = name[:lb], n
	}
	if !isIdent(name) {
		return Param{}, fmt.Errorf("parameter %q: not a PTX identifier", name)
	}
	p.Name = name
	p.Size = size * max(p.Len, 1)
	if p.Align == 0 {
		p.Align = size
	}
	return p, nil
}

// stripComments removes // and /* */ comments; PTX has no string literals
// in which they could be quoted.
func stripComments(b []byte) string {
	var out strings.Builder
	for len(b) > 0 {
		switch {
		case bytes.HasPrefix(b, []byte("//")):
			if nl := bytes.IndexByte(b, '\n'); nl >= 0 {
				b = b[nl:]
			} else {
				b = nil
			}
		case bytes.HasPrefix(b, []byte("/*")):
			if end := bytes.Index(b[2:], []byte("*/")); end >= 0 {
				b = b[2+end+2:]
				out.WriteByte(' ')
			} else {
				b = nil
			}
		default:
			out.WriteByte(b[0])
			b = b[1:]
		}
	}
	return out.String()
}

// indexToken finds tok in s where it is a whole token: not preceded or
// followed by an identifier character (so ".entry" does not match inside
// ".entry_point" or "x.entry").
func indexToken(s, tok string) int {
	for off := 0; ; {
		i := strings.Index(s[off:], tok)
		if i < 0 {
			return -1
		}
		i += off
		before := i == 0 || !isIdentByte(s[i-1])
		end := i + len(tok)
		after := end == len(s) || !isIdentByte(s[end])
		if before && after {
			return i
		}
		off = end
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c == '%' || c == '.' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isIdent reports whether s is a PTX identifier: a letter, or _ $ % followed
// by at least one more character, then letters, digits, _ and $.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_', c == '$':
		case '0' <= c && c <= '9' && i > 0:
		case c == '%' && i == 0 && len(s) > 1:
		default:
			return false
		}
	}
	return true
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}
