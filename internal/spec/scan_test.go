package spec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzScanAgrees holds the fast paths for valid documents (scan.go) to
// encoding/json's tokenizer: the same duplicate-key refusals, word for word,
// and the same members, bytes for bytes, at every level.
func FuzzScanAgrees(f *testing.F) {
	for _, name := range corpus {
		data, _ := os.ReadFile(filepath.Join("testdata", name+".json"))
		f.Add(data)
	}
	for _, c := range ambiguous {
		f.Add([]byte(c.doc))
	}
	for _, s := range []string{
		`{}`, ` { } `, `[]`, `"x"`, `1`, `null`, `{"a":[{"b":1,"B":2}]}`, `{"a":{"b":[1,{"c":{},"C":[]}]}}`,
		`{"\u0041":1,"a":2}`, `{"k\"":"v\\","k\\":{"x":"\"}"}}`, "{\"\xff\":1,\"\xfe\":2}", `{"a" : 1 , "b" :[ true , false , null , -1.5e3 ]}`,
		`[[[{"x":1}],{"y":2,"Y":3}]]`, `{"annotations":{"k":"a","K":"b"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		slow, fast := checkKeysTokens(data), checkKeysValid(data)
		if (slow == nil) != (fast == nil) || (slow != nil && slow.Error() != fast.Error()) {
			t.Fatalf("checkKeys: tokens %v, scan %v\n%q", slow, fast, data)
		}
		var walk func(raw []byte, depth int)
		walk = func(raw []byte, depth int) {
			want, werr := parseObjectTokens(raw, "x")
			got, ok, gerr := splitValid(raw, "x")
			if !ok {
				if werr == nil {
					t.Fatalf("scan: not an object; tokens: %v\n%q", want, raw)
				}
				return
			}
			if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
				t.Fatalf("parseObject: tokens %v, scan %v\n%q", werr, gerr, raw)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("members differ:\ntokens %q\nscan   %q\n%q", want, got, raw)
			}
			if depth < 8 {
				for _, m := range got {
					walk(m.val, depth+1)
				}
			}
		}
		walk(data, 0)
	})
}

// BenchmarkParseDocker is what vgpu-runtime pays to read a docker
// config.json, for every container (go test -bench ParseDocker).
func BenchmarkParseDocker(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "docker.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
