package hook

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// At createContainer the hook is a child of the container's init, in the
// container's cgroup (and, with a private cgroup namespace, seeing that
// cgroup as "/"), in the container's mount namespace before pivot_root: the
// host's /proc and /sys/fs/cgroup are still where they are on the host. It
// records the init (host pid, start time) and the container's host cgroup
// before any code of the container runs, so that vgpu node holds every
// process of that cgroup to the limits whatever the tenant does later.

// cgroupRoot is where the host's cgroup filesystem is mounted.
var cgroupRoot = "/sys/fs/cgroup"

// maxCgroupWalk bounds the search for our cgroup on the host.
const maxCgroupWalk = 50000

// recordInit records the init and cgroup of container id (best effort: the
// container still starts; vgpu node then attributes it by what it sees, and
// `vgpu status` shows no cgroup).
func recordInit(stateDir, id string, warn io.Writer) {
	pid, start, cg, err := selfContainer()
	if err == nil {
		err = state.SetInit(stateDir, id, pid, start, cg)
	}
	if err != nil {
		fmt.Fprintf(warn, "vgpu-hook: container %s: init and cgroup not recorded (vgpu node attributes its processes by the quota file they see): %v\n", id, err)
	}
}

// selfContainer finds the init that ran us (its host pid and start time)
// and our cgroup's path on the host.
func selfContainer() (pid int, start uint64, cgroup string, err error) {
	self, err := os.Readlink("/proc/self") // the host's procfs: our host pid
	if err != nil {
		return 0, 0, "", err
	}
	me, err := strconv.Atoi(self)
	if err != nil {
		return 0, 0, "", fmt.Errorf("/proc/self is %q", self)
	}
	st, err := procinfo.StatOf("", me)
	if err != nil {
		return 0, 0, "", err
	}
	if st.PPID <= 1 {
		return 0, 0, "", fmt.Errorf("parent pid %d is not a container's init", st.PPID)
	}
	init, err := procinfo.StatOf("", st.PPID)
	if err != nil {
		return 0, 0, "", err
	}
	cg, err := procinfo.CgroupOf("", me)
	if err != nil {
		return 0, 0, "", err
	}
	root := cgroupRoot
	if cg.Freezer != "" {
		root = filepath.Join(cgroupRoot, "freezer")
	}
	path, err := hostCgroup(root, cg.Path(), os.Getpid())
	if err != nil {
		return 0, 0, "", err
	}
	return st.PPID, init.Start, path, nil
}

// hostCgroup is the path below root of the cgroup whose cgroup.procs lists
// nspid (our pid as our pid namespace sees it: cgroup.procs shows pids as
// the reader's namespace does): first the path /proc/self/cgroup gives
// (right without a cgroup namespace), else a search of the hierarchy (with
// one, the path is "/" and says nothing).
func hostCgroup(root, seen string, nspid int) (string, error) {
	if seen != "/" && lists(filepath.Join(root, seen, "cgroup.procs"), nspid) {
		return seen, nil
	}
	queue := []string{"/"}
	for n := 0; len(queue) > 0 && n < maxCgroupWalk; n++ {
		p := queue[0]
		queue = queue[1:]
		if p != "/" && lists(filepath.Join(root, p, "cgroup.procs"), nspid) {
			return p, nil
		}
		ents, err := os.ReadDir(filepath.Join(root, p))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				queue = append(queue, filepath.Join(p, e.Name()))
			}
		}
	}
	return "", fmt.Errorf("our cgroup is not found under %s", root)
}

func lists(procs string, pid int) bool {
	f, err := os.Open(procs)
	if err != nil {
		return false
	}
	defer f.Close()
	want := strconv.Itoa(pid)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == want {
			return true
		}
	}
	return false
}
