package setup

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tailscale/hujson"
)

// jsonObject is an object to insert, its members in order.
type jsonObject []jsonMember

type jsonMember struct {
	key string
	val any // string or jsonObject
}

// lineOf is the line of offset off in data (1-based).
func lineOf(data []byte, off int) int {
	return bytes.Count(data[:min(off, len(data))], []byte("\n")) + 1
}

func memberIndex(obj *hujson.Object, key string) int {
	for i, m := range obj.Members {
		if l, ok := m.Name.Value.(hujson.Literal); ok && l.String() == key {
			return i
		}
	}
	return -1
}

// member is obj's member key (nil: none); a key given twice is an error,
// since which one dockerd takes is not ours to guess.
func member(data []byte, obj *hujson.Object, key string) (*hujson.ObjectMember, error) {
	var found *hujson.ObjectMember
	for i := range obj.Members {
		m := &obj.Members[i]
		if l, ok := m.Name.Value.(hujson.Literal); ok && l.String() == key {
			if found != nil {
				return nil, fmt.Errorf("line %d: %q is given more than once", lineOf(data, found.Name.StartOffset), key)
			}
			found = m
		}
	}
	return found, nil
}

// style is how an object lays out its members: the whitespace before a
// member at its depth ("\n    ", or "" / " " when on one line), the indent
// of one level, and the whitespace after a colon.
type style struct {
	nl     bool   // members on lines of their own
	indent string // of obj's members (nl)
	unit   string // one level (nl)
	sep    string // before a member after the first (one line)
	colon  string
}

// styleOf reads obj's style; depth is obj's depth below the document's
// object (0), for an empty object whose members show no indent.
func styleOf(top *hujson.Value, obj *hujson.Object, depth int) style {
	st := style{nl: true, unit: "  ", colon: " "}
	// The unit: the document's first indented member, as the file has it.
	if r, ok := top.Value.(*hujson.Object); ok && len(r.Members) > 0 {
		b := string(r.Members[0].Name.BeforeExtra)
		if i := strings.LastIndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			st.unit = b[i+1:]
		}
		st.colon = string(r.Members[0].Value.BeforeExtra)
	}
	if len(obj.Members) == 0 {
		st.nl = bytes.ContainsRune(top.Pack(), '\n') || depth == 0
		st.indent = strings.Repeat(st.unit, depth+1)
		return st
	}
	b := string(obj.Members[0].Name.BeforeExtra)
	if i := strings.LastIndexByte(b, '\n'); i >= 0 {
		st.indent = b[i+1:]
	} else {
		st.nl = false
		st.sep = ""
		if len(obj.Members) > 1 {
			st.sep = string(obj.Members[1].Name.BeforeExtra)
		}
	}
	st.colon = string(obj.Members[0].Value.BeforeExtra)
	return st
}

// value builds v laid out in st's style at st.indent.
func (st style) value(v any) hujson.ValueTrimmed {
	switch v := v.(type) {
	case string:
		return hujson.String(v)
	case jsonObject:
		inner := st
		inner.indent = st.indent + st.unit
		obj := &hujson.Object{}
		for i, m := range v {
			obj.Members = append(obj.Members, inner.member(i, m.key, m.val))
		}
		if st.nl {
			obj.AfterExtra = hujson.Extra("\n" + st.indent)
		}
		return obj
	}
	panic(fmt.Sprintf("setup: no JSON for %T", v))
}

// member is a new member key: val, the i-th of its object.
func (st style) member(i int, key string, val any) hujson.ObjectMember {
	before := "\n" + st.indent
	if !st.nl {
		before = ""
		if i > 0 {
			before = st.sep
		}
	}
	return hujson.ObjectMember{
		Name:  hujson.Value{BeforeExtra: hujson.Extra(before), Value: hujson.String(key)},
		Value: hujson.Value{BeforeExtra: hujson.Extra(st.colon), Value: st.value(val)},
	}
}

// setMember sets obj's member key to val: in place when it exists (the
// whitespace around it kept), else appended after the last member.
func setMember(top *hujson.Value, obj *hujson.Object, depth int, key string, val any) {
	st := styleOf(top, obj, depth)
	if i := memberIndex(obj, key); i >= 0 {
		obj.Members[i].Value.Value = st.value(val)
		return
	}
	if len(obj.Members) == 0 && st.nl && !bytes.ContainsRune(obj.AfterExtra, '\n') {
		obj.AfterExtra = hujson.Extra("\n" + strings.Repeat(st.unit, depth))
	}
	obj.Members = append(obj.Members, st.member(len(obj.Members), key, val))
}

// removeMember takes obj's i-th member out with the whitespace before it;
// an object left empty closes on the line it opened.
func removeMember(obj *hujson.Object, i int) {
	if i == 0 && len(obj.Members) > 1 {
		obj.Members[1].Name.BeforeExtra = obj.Members[0].Name.BeforeExtra
	}
	obj.Members = append(obj.Members[:i], obj.Members[i+1:]...)
	if len(obj.Members) == 0 {
		obj.AfterExtra = nil
	}
}
