package hook

import (
	"strings"
	"testing"
)

func TestBadInput(t *testing.T) {
	if Main([]string{"createContainer"}, strings.NewReader("not json"), &strings.Builder{}) == 0 {
		t.Error("bad state accepted")
	}
	if Main(nil, strings.NewReader("{}"), &strings.Builder{}) == 0 {
		t.Error("no stage accepted")
	}
}
