package spec

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tailscale/hujson"
)

// checkKeys refuses a document in which one object has two keys that
// encoding/json would take for the same struct field: runc decodes
// config.json with it, which matches keys case-insensitively
// (bytes.EqualFold) and keeps the last. vgpu edits one of them, so with both
// "mounts" and "Mounts" present runc could run the container with the other
// one. The rule holds for every object of the document (maps such as
// annotations included: one rule, and no consumer has to guess). The error
// names the object as config.json.a.b[2].
func checkKeys(v *hujson.Value) error {
	type frame struct {
		key   []byte // objects: the member's key
		index int    // arrays: the element's index, else -1
	}
	var stack []frame
	where := func() string {
		var b strings.Builder
		b.WriteString("config.json")
		for _, f := range stack {
			if f.index < 0 {
				b.WriteString(".")
				b.Write(f.key)
			} else {
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	var keys [][]byte
	var walk func(v *hujson.Value) error
	walk = func(v *hujson.Value) error {
		switch t := v.Value.(type) {
		case *hujson.Object:
			keys = keys[:0]
			var seen map[string][]byte // folded -> key, for large objects
			for i := range t.Members {
				key := keyBytes(t.Members[i].Name.Value.(hujson.Literal))
				var prev []byte
				if len(t.Members) <= 16 {
					for _, k := range keys {
						if bytes.EqualFold(k, key) {
							prev = k
							break
						}
					}
					keys = append(keys, key)
				} else {
					if seen == nil {
						seen = make(map[string][]byte, len(t.Members))
					}
					fk := foldKey(string(key))
					prev = seen[fk]
					seen[fk] = key
				}
				if prev != nil {
					w := where()
					if bytes.Equal(prev, key) {
						return fmt.Errorf("%s: duplicate key %q; runc would use only the last one: keep one", w, key)
					}
					return fmt.Errorf("%s: keys %q and %q match case-insensitively and runc would use only the last one: keep one", w, prev, key)
				}
			}
			for i := range t.Members {
				stack = append(stack, frame{key: keyBytes(t.Members[i].Name.Value.(hujson.Literal)), index: -1})
				if err := walk(&t.Members[i].Value); err != nil {
					return err
				}
				stack = stack[:len(stack)-1]
			}
		case *hujson.Array:
			for i := range t.Elements {
				stack = append(stack, frame{index: i})
				if err := walk(&t.Elements[i]); err != nil {
					return err
				}
				stack = stack[:len(stack)-1]
			}
		}
		return nil
	}
	return walk(v)
}

// keyBytes is the string the JSON string lit stands for, as encoding/json
// decodes it (escapes, invalid UTF-8 as U+FFFD): lit's own bytes when it
// holds neither.
func keyBytes(lit hujson.Literal) []byte {
	inner := lit[1 : len(lit)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	return []byte(lit.String())
}

// sameKey: encoding/json would take key (a member's name) for name.
func sameKey(key []byte, name string) bool {
	return string(key) == name || bytes.EqualFold(key, []byte(name))
}

// foldKey maps s to a key that is equal for two strings exactly when
// bytes.EqualFold holds for them (for the map of a large object): every rune becomes the smallest rune of its
// simple case-folding orbit (encoding/json's foldName does the same).
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			continue
		}
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}
