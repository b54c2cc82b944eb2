package setup

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// A minimal editor of raw TOML text, on go-toml's unstable parser: it lists
// the top-level expressions (table headers, key/values, comment lines) with
// their byte ranges and full key paths, so that values can be replaced, lines
// inserted and tables removed while every other byte (comments included)
// stays where it was.

type tomlKind int

const (
	tomlTable tomlKind = iota
	tomlArrayTable
	tomlKeyValue
	tomlComment
)

// tomlExpr is one top-level expression.
type tomlExpr struct {
	kind      tomlKind
	start     int      // start of its first line
	lineEnd   int      // just past the newline ending its last line (or EOF)
	next      int      // start of the next expression (or EOF): lineEnd plus blank lines
	path      []string // table: the header's key; key/value: table path + key
	inArray   bool     // key/value inside an array table: never ours to edit
	valStart  int      // key/value: the value's text
	valEnd    int
	valKind   unstable.Kind
	valString string // key/value with a string value: decoded
	comment   string // comment: its text
}

// tomlDoc is a parsed document.
type tomlDoc struct {
	data  []byte
	exprs []tomlExpr
	tree  map[string]any // decoded, for values
}

// tomlError gives a decode error its line and column.
func tomlError(err error) error {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return fmt.Errorf("line %d, column %d: %s", row, col, de.Error())
	}
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		return errors.New(sm.String())
	}
	return err
}

func parseTOML(data []byte) (*tomlDoc, error) {
	d := &tomlDoc{data: data}
	if err := toml.Unmarshal(data, &d.tree); err != nil {
		return nil, tomlError(err)
	}
	if d.tree == nil {
		d.tree = map[string]any{}
	}
	var p unstable.Parser
	p.KeepComments = true
	p.Reset(data)
	var table []string
	inArray := false
	for p.NextExpression() {
		n := p.Expression()
		e := tomlExpr{}
		var first, last int
		keyParts := func(it unstable.Iterator) []string {
			var parts []string
			f := true
			for it.Next() {
				k := it.Node()
				if f {
					first = int(k.Raw.Offset)
					f = false
				}
				last = int(k.Raw.Offset + k.Raw.Length)
				parts = append(parts, string(k.Data))
			}
			return parts
		}
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			e.kind = tomlTable
			if n.Kind == unstable.ArrayTable {
				e.kind = tomlArrayTable
			}
			e.path = keyParts(n.Key())
			table, inArray = e.path, n.Kind == unstable.ArrayTable
			e.start = lineStart(data, first)
			e.lineEnd = lineEndAfter(data, last)
		case unstable.KeyValue:
			e.kind = tomlKeyValue
			key := keyParts(n.Key())
			e.path = append(append([]string(nil), table...), key...)
			e.inArray = inArray
			e.start = lineStart(data, int(n.Raw.Offset))
			e.valEnd = int(n.Raw.Offset + n.Raw.Length)
			e.lineEnd = lineEndAfter(data, e.valEnd)
			// The value starts after the key, white space, '=' and white space.
			i := last
			for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '=') {
				i++
			}
			e.valStart = i
			v := n.Value()
			e.valKind = v.Kind
			if v.Kind == unstable.String {
				e.valString = string(v.Data)
			}
		case unstable.Comment:
			e.kind = tomlComment
			e.start = lineStart(data, int(n.Raw.Offset))
			e.lineEnd = lineEndAfter(data, int(n.Raw.Offset+n.Raw.Length))
			e.comment = string(n.Data)
		default:
			continue
		}
		d.exprs = append(d.exprs, e)
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	for i := range d.exprs {
		if i+1 < len(d.exprs) {
			d.exprs[i].next = d.exprs[i+1].start
		} else {
			d.exprs[i].next = len(data)
		}
	}
	return d, nil
}

func lineStart(data []byte, off int) int {
	return bytes.LastIndexByte(data[:off], '\n') + 1
}

func lineEndAfter(data []byte, off int) int {
	i := bytes.IndexByte(data[off:], '\n')
	if i < 0 {
		return len(data)
	}
	return off + i + 1
}

// get returns the decoded value at path.
func (d *tomlDoc) get(path ...string) (any, bool) {
	var cur any = d.tree
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func hasPrefix(p, prefix []string) bool {
	return len(p) >= len(prefix) && slices.Equal(p[:len(prefix)], prefix)
}

// keyValue returns the key/value expression that sets path, or nil.
func (d *tomlDoc) keyValue(path []string) *tomlExpr {
	for i := range d.exprs {
		e := &d.exprs[i]
		if e.kind == tomlKeyValue && !e.inArray && slices.Equal(e.path, path) {
			return e
		}
	}
	return nil
}

// header returns the [table] header expression for path, or nil.
func (d *tomlDoc) header(path []string) (int, *tomlExpr) {
	for i := range d.exprs {
		e := &d.exprs[i]
		if e.kind == tomlTable && slices.Equal(e.path, path) {
			return i, e
		}
	}
	return -1, nil
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tomlKey writes a dotted key, quoting the parts that need it.
func tomlKey(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		if bareKey.MatchString(p) {
			parts[i] = p
		} else {
			parts[i] = tomlString(p)
		}
	}
	return strings.Join(parts, ".")
}

// tomlString is a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlValue writes a string or bool.
func tomlValue(v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "true"
		}
		return "false"
	case string:
		return tomlString(x)
	case []string:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = tomlString(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	panic(fmt.Sprintf("tomlValue: %T", v))
}

// indentOf returns the white space at the start of the line at off.
func indentOf(data []byte, off int) string {
	i := off
	for i < len(data) && (data[i] == ' ' || data[i] == '\t') {
		i++
	}
	return string(data[off:i])
}

// setValue sets path = v: in place when the key exists, as a new line after
// the header of its table when that exists, else as a new table at the end.
func (d *tomlDoc) setValue(path []string, v any) ([]byte, error) {
	data := d.data
	if e := d.keyValue(path); e != nil {
		val := tomlValue(v)
		// Keep a literal string literal ('…'), as containerd 2.x writes them.
		if s, ok := v.(string); ok && e.valStart < len(data) && data[e.valStart] == '\'' && !strings.ContainsAny(s, "'\n\r") {
			val = "'" + s + "'"
		}
		return splice(data, e.valStart, e.valEnd, []byte(val)), nil
	}
	parent, key := path[:len(path)-1], path[len(path)-1:]
	if i, h := d.header(parent); h != nil {
		indent := indentOf(data, h.start) + "  "
		// Indent like the table's first key when it has one.
		if i+1 < len(d.exprs) && d.exprs[i+1].kind == tomlKeyValue {
			indent = indentOf(data, d.exprs[i+1].start)
		}
		line := indent + tomlKey(key) + " = " + tomlValue(v) + "\n"
		// After the table's last key, before what follows it.
		at := h.lineEnd
		for j := i + 1; j < len(d.exprs) && d.exprs[j].kind != tomlTable && d.exprs[j].kind != tomlArrayTable; j++ {
			if d.exprs[j].kind == tomlKeyValue {
				at = d.exprs[j].lineEnd
			}
		}
		if at == len(data) && (len(data) == 0 || data[len(data)-1] != '\n') {
			line = "\n" + line
		}
		return splice(data, at, at, []byte(line)), nil
	}
	if _, ok := d.get(parent...); ok {
		// The table exists but has no header of its own: defined by dotted
		// keys or inline. A new header is allowed only for the first kind.
		if e := d.keyValue(parent); e != nil && e.valKind == unstable.InlineTable {
			line, _ := position(data, e.start)
			return nil, fmt.Errorf("line %d: %s is an inline table; edit it by hand (add %s = %s)", line, tomlKey(parent), tomlKey(key), tomlValue(v))
		}
	}
	block := "[" + tomlKey(parent) + "]\n  " + tomlKey(key) + " = " + tomlValue(v) + "\n"
	return appendBlock(data, block), nil
}

// appendBlock adds text at the end, after a blank line.
func appendBlock(data []byte, block string) []byte {
	out := append([]byte(nil), data...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	if len(out) > 0 {
		out = append(out, '\n')
	}
	return append(out, block...)
}

type span struct{ start, end int }

// removeSpans removes the byte ranges (sorted, not overlapping after merging).
func removeSpans(data []byte, spans []span) []byte {
	if len(spans) == 0 {
		return data
	}
	// sort and merge
	for i := 1; i < len(spans); i++ {
		for j := i; j > 0 && spans[j].start < spans[j-1].start; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	var out []byte
	pos := 0
	for _, s := range spans {
		if s.start < pos {
			s.start = pos
		}
		if s.end <= s.start {
			continue
		}
		out = append(out, data[pos:s.start]...)
		pos = s.end
	}
	return append(out, data[pos:]...)
}
func position(data []byte, off int) (line, col int) {
	if off > len(data) {
		off = len(data)
	}
	if off < 0 {
		off = 0
	}
	line = 1 + bytes.Count(data[:off], []byte{'\n'})
	col = off - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}
func splice(data []byte, start, end int, repl []byte) []byte {
	out := make([]byte, 0, len(data)-(end-start)+len(repl))
	out = append(out, data[:start]...)
	out = append(out, repl...)
	return append(out, data[end:]...)
}
