package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkKeys refuses a document in which one object has two keys that
// encoding/json would take for the same struct field: runc decodes
// config.json with it, which matches keys case-insensitively
// (bytes.EqualFold) and keeps the last. vgpu edits one of them, so with both
// "mounts" and "Mounts" present runc could run the container with the other
// one. The rule holds for every object of the document (maps such as
// annotations included: one rule, and no consumer has to guess).
//
// A valid document (valid: json.Valid, encoding/json's own scanner, which
// also caps the nesting depth) is walked by checkKeysValid, without a token per value;
// others by checkKeysTokens, which stops at the syntax error that the parser
// then reports. FuzzScanAgrees holds the two to the same answers.
func checkKeys(data []byte, valid bool) error {
	if valid {
		return checkKeysValid(data)
	}
	return checkKeysTokens(data)
}

// checkKeysTokens is checkKeys through encoding/json's tokenizer, for any
// input.
func checkKeysTokens(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		scanFrame                   // where: object and key, or array and index
		seen      map[string]string // folded key -> key as written
		expect    bool              // objects: the next token is a key
	}
	var stack []*frame
	where := func() string { return configPath(len(stack), func(i int) *scanFrame { return &stack[i].scanFrame }) }
	// value is called after a complete value (scalar or container) inside
	// the top frame.
	value := func() {
		if n := len(stack); n > 0 {
			if f := stack[n-1]; f.isObject {
				f.expect = true
			} else {
				f.index++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			// Syntax errors are reported by the parser proper.
			return nil
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		if top != nil && top.isObject && top.expect {
			key, ok := tok.(string)
			if !ok { // the closing brace
				stack = stack[:len(stack)-1]
				value()
				continue
			}
			fk := foldKey(key)
			if prev, dup := top.seen[fk]; dup {
				top.key = key
				w := strings.TrimSuffix(where(), "."+key)
				if prev == key {
					return fmt.Errorf("%s: duplicate key %q; runc would use only the last one: keep one", w, key)
				}
				return fmt.Errorf("%s: keys %q and %q match case-insensitively and runc would use only the last one: keep one", w, prev, key)
			}
			top.seen[fk] = key
			top.key = key
			top.expect = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{scanFrame: scanFrame{isObject: true}, seen: map[string]string{}, expect: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			value()
		default:
			value()
		}
		if len(stack) == 0 {
			return nil
		}
	}
}

// foldKey maps s to a key that is equal for two strings exactly when
// bytes.EqualFold holds for them: every rune becomes the smallest rune of its
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
