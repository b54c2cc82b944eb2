package setup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A minimal editor of raw JSON text: it finds objects and their members with
// their byte offsets, so that a member can be added, replaced or removed
// without re-encoding the rest of the document (key order, indentation,
// spacing and number spellings stay as the user wrote them).

// jsonValue is one value of the document and where it is.
type jsonValue struct {
	start, end int          // [start, end) of the value's text
	kind       byte         // '{', '[', '"', 'n', 't', 'f' or '0' (number)
	members    []jsonMember // objects only, in document order
	str        string       // strings only, decoded
}

// jsonMember is `"key": value` inside an object.
type jsonMember struct {
	key              string
	keyStart, keyEnd int // the quoted key
	value            *jsonValue
}

func (v *jsonValue) member(key string) *jsonMember {
	var found *jsonMember
	for i := range v.members {
		if v.members[i].key == key {
			found = &v.members[i] // last wins, as in encoding/json
		}
	}
	return found
}

func (v *jsonValue) count(key string) int {
	n := 0
	for _, m := range v.members {
		if m.key == key {
			n++
		}
	}
	return n
}

// position turns a byte offset into a 1-based line and column.
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

// checkJSON reports why data is not valid JSON, with the line and column.
func checkJSON(data []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&v)
	if err == nil {
		if _, terr := dec.Token(); terr == nil {
			line, col := position(data, int(dec.InputOffset()))
			return fmt.Errorf("line %d, column %d: more than one JSON value", line, col)
		}
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, int(se.Offset))
		return fmt.Errorf("line %d, column %d: %s", line, col, se.Error())
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		line, col := position(data, int(te.Offset))
		return fmt.Errorf("line %d, column %d: %s", line, col, te.Error())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		line, col := position(data, len(data))
		return fmt.Errorf("line %d, column %d: unexpected end of JSON input", line, col)
	}
	return err
}

// parseJSON parses a document that checkJSON accepted. It still returns
// errors (never panics) on anything else.
func parseJSON(data []byte) (*jsonValue, error) {
	p := &jsonParser{data: data}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(data) {
		return nil, p.errorf("unexpected %q after the top-level value", data[p.i])
	}
	return v, nil
}

type jsonParser struct {
	data []byte
	i    int
}

const maxJSONDepth = 1000

func (p *jsonParser) errorf(format string, a ...any) error {
	line, col := position(p.data, p.i)
	return fmt.Errorf("line %d, column %d: %s", line, col, fmt.Sprintf(format, a...))
}

func (p *jsonParser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (*jsonValue, error) {
	if depth > maxJSONDepth {
		return nil, p.errorf("nested too deeply")
	}
	if p.i >= len(p.data) {
		return nil, p.errorf("unexpected end of input")
	}
	v := &jsonValue{start: p.i}
	switch c := p.data[p.i]; {
	case c == '{':
		v.kind = '{'
		p.i++
		p.ws()
		if p.i < len(p.data) && p.data[p.i] == '}' {
			p.i++
			v.end = p.i
			return v, nil
		}
		for {
			p.ws()
			if p.i >= len(p.data) || p.data[p.i] != '"' {
				return nil, p.errorf("expected a quoted key")
			}
			ks := p.i
			key, err := p.str()
			if err != nil {
				return nil, err
			}
			m := jsonMember{key: key, keyStart: ks, keyEnd: p.i}
			p.ws()
			if p.i >= len(p.data) || p.data[p.i] != ':' {
				return nil, p.errorf("expected ':' after key %q", key)
			}
			p.i++
			p.ws()
			if m.value, err = p.value(depth + 1); err != nil {
				return nil, err
			}
			v.members = append(v.members, m)
			p.ws()
			if p.i >= len(p.data) {
				return nil, p.errorf("unexpected end of input in an object")
			}
			if p.data[p.i] == ',' {
				p.i++
				continue
			}
			if p.data[p.i] == '}' {
				p.i++
				v.end = p.i
				return v, nil
			}
			return nil, p.errorf("expected ',' or '}' in an object")
		}
	case c == '[':
		v.kind = '['
		p.i++
		p.ws()
		if p.i < len(p.data) && p.data[p.i] == ']' {
			p.i++
			v.end = p.i
			return v, nil
		}
		for {
			p.ws()
			if _, err := p.value(depth + 1); err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.data) {
				return nil, p.errorf("unexpected end of input in an array")
			}
			if p.data[p.i] == ',' {
				p.i++
				continue
			}
			if p.data[p.i] == ']' {
				p.i++
				v.end = p.i
				return v, nil
			}
			return nil, p.errorf("expected ',' or ']' in an array")
		}
	case c == '"':
		v.kind = '"'
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		v.str, v.end = s, p.i
		return v, nil
	case c == 't' || c == 'f' || c == 'n':
		for _, w := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(p.data[p.i:], []byte(w)) {
				v.kind = w[0]
				p.i += len(w)
				v.end = p.i
				return v, nil
			}
		}
		return nil, p.errorf("unexpected %q", c)
	case c == '-' || c >= '0' && c <= '9':
		v.kind = '0'
		for p.i < len(p.data) && strings.IndexByte("+-.eE0123456789", p.data[p.i]) >= 0 {
			p.i++
		}
		var n json.Number
		if err := json.Unmarshal(p.data[v.start:p.i], &n); err != nil {
			return nil, p.errorf("bad number %q", p.data[v.start:p.i])
		}
		v.end = p.i
		return v, nil
	default:
		return nil, p.errorf("unexpected %q", c)
	}
}

// str reads a quoted string at p.i and decodes it.
func (p *jsonParser) str() (string, error) {
	start := p.i
	p.i++
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case '\\':
			p.i += 2
			continue
		case '"':
			p.i++
			var s string
			if err := json.Unmarshal(p.data[start:p.i], &s); err != nil {
				p.i = start
				return "", p.errorf("bad string: %v", err)
			}
			return s, nil
		}
		p.i++
	}
	p.i = start
	return "", p.errorf("unterminated string")
}

// ---- formatting of inserted members ------------------------------------------

// jsonStyle is how an object lays out its members.
type jsonStyle struct {
	multiline bool   // one member per line
	indent    string // of the member lines (multiline)
	closing   string // of the closing brace's line (multiline)
	colon     string // between key and value: ": " or ":" …
	comma     string // between members on one line: ", " or ","
	unit      string // one level of indentation in the document
}

// indentUnit guesses the document's indentation step: the first indented
// member line gives it (its indent minus its parent's); two spaces if none.
func indentUnit(data []byte, root *jsonValue) string {
	var walk func(v *jsonValue, parent string) string
	walk = func(v *jsonValue, parent string) string {
		if v.kind != '{' || len(v.members) == 0 {
			return ""
		}
		ind, ok := lineIndent(data, v.members[0].keyStart)
		if ok && len(ind) > len(parent) && strings.HasPrefix(ind, parent) {
			return ind[len(parent):]
		}
		for _, m := range v.members {
			if u := walk(m.value, ind); u != "" {
				return u
			}
		}
		return ""
	}
	if u := walk(root, ""); u != "" {
		return u
	}
	return "  "
}

// lineIndent returns the white space before off on its line, and whether
// only white space precedes off there.
func lineIndent(data []byte, off int) (string, bool) {
	ls := bytes.LastIndexByte(data[:off], '\n') + 1
	ind := data[ls:off]
	return string(ind), len(bytes.TrimLeft(ind, " \t")) == 0
}

func styleOf(data []byte, root, obj *jsonValue) jsonStyle {
	unit := indentUnit(data, root)
	st := jsonStyle{colon: ": ", comma: ", ", unit: unit}
	open, _ := lineIndent(data, obj.start)
	open = leadingWS(open)
	if len(obj.members) > 0 {
		m := obj.members[0]
		st.colon = string(data[m.keyEnd:m.value.start])
		st.comma = ", "
		if len(obj.members) > 1 {
			st.comma = string(data[m.value.end:obj.members[1].keyStart])
		} else if st.colon == ":" {
			st.comma = ","
		}
		ind, ok := lineIndent(data, m.keyStart)
		st.multiline = ok
		st.indent = ind
		cl, ok := lineIndent(data, obj.end-1)
		if ok {
			st.closing = cl
		} else {
			st.closing = open
		}
		return st
	}
	// An empty object: multi-line unless the document is all on one line
	// (an empty document becomes a multi-line one).
	st.multiline = bytes.Contains(bytes.TrimSpace(data), []byte{'\n'}) || obj == root
	st.closing = open
	st.indent = open + unit
	return st
}

func leadingWS(s string) string {
	return s[:len(s)-len(strings.TrimLeft(s, " \t"))]
}

// formatValue encodes v for insertion at a member line with the given indent.
func formatValue(v any, st jsonStyle) ([]byte, error) {
	if !st.multiline {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return compactSpaced(b, st.colon), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(st.indent, st.unit)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// compactSpaced re-spaces compact JSON's colons like the document's.
func compactSpaced(b []byte, colon string) []byte {
	if colon == ":" {
		return b
	}
	var out bytes.Buffer
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case in && c == '\\':
			out.WriteByte(c)
			i++
			if i < len(b) {
				out.WriteByte(b[i])
			}
			continue
		case c == '"':
			in = !in
		case !in && c == ':':
			out.WriteString(colon)
			continue
		case !in && c == ',':
			out.WriteString(", ")
			continue
		}
		out.WriteByte(c)
	}
	return out.Bytes()
}

func quoteJSON(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string into a bytes.Buffer cannot fail
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// ---- edits ---------------------------------------------------------------------

func splice(data []byte, start, end int, repl []byte) []byte {
	out := make([]byte, 0, len(data)-(end-start)+len(repl))
	out = append(out, data[:start]...)
	out = append(out, repl...)
	return append(out, data[end:]...)
}

// addMember appends `"key": v` as the last member of obj.
func addMember(data []byte, root, obj *jsonValue, key string, v any) ([]byte, error) {
	st := styleOf(data, root, obj)
	val, err := formatValue(v, st)
	if err != nil {
		return nil, err
	}
	member := append(append(quoteJSON(key), st.colon...), val...)
	if len(obj.members) > 0 {
		last := obj.members[len(obj.members)-1]
		var ins []byte
		if st.multiline {
			ins = append([]byte(",\n"+st.indent), member...)
		} else {
			ins = append([]byte(st.comma), member...)
		}
		return splice(data, last.value.end, last.value.end, ins), nil
	}
	var inner []byte
	if st.multiline {
		inner = append(append([]byte("\n"+st.indent), member...), "\n"+st.closing...)
	} else {
		inner = member
	}
	return splice(data, obj.start+1, obj.end-1, inner), nil
}

// removeMember removes the i-th member of obj with its separator: the exact
// inverse of addMember when the member was added last.
func removeMember(data []byte, obj *jsonValue, i int) []byte {
	m := obj.members[i]
	switch {
	case i > 0:
		return splice(data, obj.members[i-1].value.end, m.value.end, nil)
	case len(obj.members) > 1:
		return splice(data, m.keyStart, obj.members[1].keyStart, nil)
	default:
		return splice(data, obj.start+1, obj.end-1, nil)
	}
}

func memberIndex(obj *jsonValue, key string) int {
	idx := -1
	for i, m := range obj.members {
		if m.key == key {
			idx = i
		}
	}
	return idx
}

// replaceValue puts v in place of the value of member m.
func replaceValue(data []byte, root *jsonValue, obj *jsonValue, m *jsonMember, v any) ([]byte, error) {
	st := styleOf(data, root, obj)
	val, err := formatValue(v, st)
	if err != nil {
		return nil, err
	}
	return splice(data, m.value.start, m.value.end, val), nil
}
