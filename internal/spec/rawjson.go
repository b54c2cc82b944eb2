package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// member is one key of a JSON object, kept as the file had it.
type member struct {
	key    string
	keyRaw []byte // the key as written in the file, quotes included
	val    json.RawMessage
}

// object is an ordered JSON object.
type object []member

// parseObject splits raw (which must be a JSON object) into its members.
// Duplicate keys are an error. A valid object is split by splitValid;
// anything else goes through encoding/json's tokenizer (parseObjectTokens),
// whose errors are the ones reported.
func parseObject(raw []byte, where string) (object, error) {
	if json.Valid(raw) {
		if obj, ok, err := splitValid(raw, where); ok {
			return obj, err
		}
	}
	return parseObjectTokens(raw, where)
}

// parseValid is parseObject for raw that is known to be valid JSON when
// valid is true (a value of a document json.Valid accepted).
func parseValid(raw []byte, where string, valid bool) (object, error) {
	if !valid {
		return parseObject(raw, where)
	}
	if obj, ok, err := splitValid(raw, where); ok {
		return obj, err
	}
	return parseObjectTokens(raw, where)
}

// parseObjectTokens is parseObject through encoding/json's tokenizer.
func parseObjectTokens(raw []byte, where string) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%s: not a JSON object", where)
	}
	var obj object
	seen := map[string]bool{}
	for dec.More() {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%s: object key is not a string", where)
		}
		end := dec.InputOffset()
		keyRaw := bytes.TrimLeft(raw[start:end], " \t\r\n,")
		if seen[key] {
			return nil, fmt.Errorf("%s: duplicate key %q", where, key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", where, key, err)
		}
		obj = append(obj, member{key: key, keyRaw: append([]byte(nil), keyRaw...), val: v})
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", where)
	}
	return obj, nil
}

// get finds key as runc's decoder would: case-insensitively (checkKeys has
// made sure that at most one key of an object matches).
func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if sameKey(m.key, key) {
			return m.val, true
		}
	}
	return nil, false
}

// set replaces the value of key (matched as get does, keeping the key as
// the file spells it), or appends the key at the end.
func (o object) set(key string, val json.RawMessage) object {
	for i := range o {
		if sameKey(o[i].key, key) {
			n := append(object(nil), o...)
			n[i].val = val
			return n
		}
	}
	kr, _ := marshal(key)
	return append(append(object(nil), o...), member{key: key, keyRaw: kr, val: val})
}

func sameKey(a, b string) bool { return a == b || foldKey(a) == foldKey(b) }

func (o object) bytes() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m.keyRaw)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// marshal encodes v without HTML escaping and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// appendArray appends the encoded items to the JSON array raw (absent or null
// = empty array), keeping the existing elements' bytes.
func appendArray(raw json.RawMessage, where string, items []json.RawMessage) (json.RawMessage, error) {
	var elems []json.RawMessage
	if !isNull(raw) {
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, fmt.Errorf("%s: not a JSON array: %w", where, err)
		}
	}
	elems = append(elems, items...)
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}
