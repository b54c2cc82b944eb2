package pipeline

import "testing"

func TestContainerName(t *testing.T) {
	for _, c := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{"io.kubernetes.cri.container-name": "app", "io.kubernetes.cri.sandbox-name": "pod-1"}, "pod-1/app"},
		{map[string]string{"io.kubernetes.container.name": "app"}, "app"},
		{map[string]string{"nerdctl/name": "web"}, "web"},
		{nil, ""},
	} {
		if got := ContainerName(c.ann); got != c.want {
			t.Errorf("%v: %q, want %q", c.ann, got, c.want)
		}
	}
}
