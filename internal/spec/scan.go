package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The fast paths of checkKeys and parseObject, for documents json.Valid has
// accepted. vgpu-runtime parses every container's config.json, most of which
// ask for no GPU; encoding/json's Decoder.Token allocates for every token,
// which made parsing a docker config.json with its seccomp profile most of
// the runtime's own work. On a valid document, strings, nesting and the
// end of every value are found with a few byte tests; keys are decoded by
// encoding/json whenever they hold an escape or a byte outside ASCII, so a
// key means what runc's decoder reads. FuzzScanAgrees compares both paths.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(d []byte, i int) int {
	for i < len(d) && isSpace(d[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at d[i] ('"').
func skipString(d []byte, i int) int {
	for i++; ; i++ {
		switch d[i] {
		case '\\':
			i++ // the escaped byte (\uXXXX: its hex digits are plain bytes)
		case '"':
			return i + 1
		}
	}
}

// skipValue returns the index after the value that starts at d[i].
func skipValue(d []byte, i int) int {
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for {
			switch d[i] {
			case '"':
				i = skipString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	default: // number, true, false, null
		for i < len(d) && d[i] != ',' && d[i] != '}' && d[i] != ']' && !isSpace(d[i]) {
			i++
		}
		return i
	}
}

// decodeKey is the string the quoted JSON string raw stands for, as
// encoding/json decodes it (escapes, invalid UTF-8 as U+FFFD).
func decodeKey(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var k string
	_ = json.Unmarshal(raw, &k) // valid JSON: cannot fail
	return k
}

// keySet maps folded keys to the keys as written: a short list (most
// objects of a config.json have a few keys), a map once it grows.
type keySet struct {
	few  [][2]string
	many map[string]string
}

func (k *keySet) get(folded string) (string, bool) {
	if k.many != nil {
		v, ok := k.many[folded]
		return v, ok
	}
	for _, p := range k.few {
		if p[0] == folded {
			return p[1], true
		}
	}
	return "", false
}

func (k *keySet) add(folded, key string) {
	if k.many == nil && len(k.few) < 8 {
		k.few = append(k.few, [2]string{folded, key})
		return
	}
	if k.many == nil {
		k.many = make(map[string]string, 16)
		for _, p := range k.few {
			k.many[p[0]] = p[1]
		}
	}
	k.many[folded] = key
}

type scanFrame struct {
	isObject bool
	key      string // objects: the current member's key
	index    int    // arrays: the current element's index
}

// configPath names where the walk is, for an error: config.json, then a
// ".key" for each object and an "[index]" for each array of the n frames
// frame(0..n-1).
func configPath(n int, frame func(i int) *scanFrame) string {
	var b strings.Builder
	b.WriteString("config.json")
	for i := 0; i < n; i++ {
		if f := frame(i); f.isObject {
			b.WriteString("." + f.key)
		} else {
			fmt.Fprintf(&b, "[%d]", f.index)
		}
	}
	return b.String()
}

// checkKeysValid is checkKeys for a document json.Valid accepts.
func checkKeysValid(d []byte) error {
	var stack []scanFrame
	where := func() string { return configPath(len(stack), func(i int) *scanFrame { return &stack[i] }) }
	var walk func(i int) (int, error)
	walk = func(i int) (int, error) {
		i = skipSpace(d, i)
		switch d[i] {
		case '{':
			stack = append(stack, scanFrame{isObject: true})
			top := len(stack) - 1
			var seen keySet
			if i = skipSpace(d, i+1); d[i] == '}' {
				stack = stack[:top]
				return i + 1, nil
			}
			for {
				start := skipSpace(d, i)
				end := skipString(d, start)
				key := decodeKey(d[start:end])
				fk := foldKey(key)
				if prev, dup := seen.get(fk); dup {
					stack[top].key = key
					w := strings.TrimSuffix(where(), "."+key)
					if prev == key {
						return 0, fmt.Errorf("%s: duplicate key %q; runc would use only the last one: keep one", w, key)
					}
					return 0, fmt.Errorf("%s: keys %q and %q match case-insensitively and runc would use only the last one: keep one", w, prev, key)
				}
				seen.add(fk, key)
				stack[top].key = key
				i = skipSpace(d, end) + 1 // the colon
				var err error
				if i, err = walk(i); err != nil {
					return 0, err
				}
				i = skipSpace(d, i)
				if d[i] == ',' {
					i++
					continue
				}
				stack = stack[:top] // the closing brace
				return i + 1, nil
			}
		case '[':
			stack = append(stack, scanFrame{})
			top := len(stack) - 1
			if i = skipSpace(d, i+1); d[i] == ']' {
				stack = stack[:top]
				return i + 1, nil
			}
			for {
				var err error
				if i, err = walk(i); err != nil {
					return 0, err
				}
				i = skipSpace(d, i)
				if d[i] == ',' {
					stack[top].index++
					i++
					continue
				}
				stack = stack[:top] // the closing bracket
				return i + 1, nil
			}
		default:
			return skipValue(d, i), nil
		}
	}
	_, err := walk(0)
	return err
}

// splitValid is parseObject for a document json.Valid accepts; ok is false
// when it is not an object (parseObjectTokens says so).
func splitValid(raw []byte, where string) (obj object, ok bool, err error) {
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, false, nil
	}
	seen := map[string]bool{}
	if i = skipSpace(raw, i+1); raw[i] == '}' {
		return nil, true, nil
	}
	for {
		start := skipSpace(raw, i)
		end := skipString(raw, start)
		key := decodeKey(raw[start:end])
		if seen[key] {
			return nil, true, fmt.Errorf("%s: duplicate key %q", where, key)
		}
		seen[key] = true
		vs := skipSpace(raw, skipSpace(raw, end)+1) // past the colon
		ve := skipValue(raw, vs)
		// Slices of raw, capped: nothing writes into a member (set and
		// bytes build new ones), and an append cannot reach the bytes after.
		obj = append(obj, member{key: key, keyRaw: raw[start:end:end], val: json.RawMessage(raw[vs:ve:ve])})
		if i = skipSpace(raw, ve); raw[i] == ',' {
			i++
			continue
		}
		return obj, true, nil
	}
}
