// Package install puts the files of the vgpu image onto a node and takes
// them off again: what `vgpu-install` (the image's installer, which the Helm
// chart's node DaemonSet runs as an init step) does.
//
// Install copies the image's binaries and libraries under the install root,
// each file written new and renamed into place (the libraries are
// bind-mounted into running tenants: a tenant keeps the inode it has, the
// next one gets the new file), writes the default configuration when the
// node has none, adds the containerd drop-in (internal/setup's, the same as
// `vgpu setup containerd --kubernetes`) and restarts containerd only when
// its configuration changed. It records what it wrote in the install root
// (Record); Remove undoes exactly that: a file changed since is kept and
// named, a file it did not write is never touched. Install twice changes
// nothing the second time.
//
// Removal is a step of its own (the chart's pre-delete hook), never a
// reaction to SIGTERM: an upgrade and an uninstall both stop the node pod
// the same way. It refuses while vgpu containers run (containerd calls
// vgpu-runtime to stop them), unless forced.
package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"
	"github.com/vgpu-dev/vgpu/internal/setup"
)

// RecordName is the record of an install, in the install root.
const RecordName = "install-record.json"

// RecordVersion is the version of the record this release writes.
const RecordVersion = 1

// Options say where the image's files come from and where they go. Paths
// other than HostRoot and Payload are the host's own (as the node sees
// them), joined under HostRoot to be reached.
type Options struct {
	// HostRoot is where the node's / is mounted ("/" on the node itself).
	HostRoot string
	// Payload holds bin/ (the binaries), lib/ (the libraries) and
	// config.toml (the default configuration), in the image.
	Payload string
	// InstallRoot receives bin/ and lib/ (e.g. /opt/vgpu).
	InstallRoot string
	// ConfigPath is vgpu's configuration on the node: written from the
	// payload's (library.dir set to InstallRoot/lib) when missing, kept
	// when present.
	ConfigPath string
	// ConfigSource, when set, is a configuration to write to ConfigPath
	// whatever is there (the Helm chart's, rendered from its values); the
	// node's previous file is kept in the record and restored by Remove.
	ConfigSource string
	// ContainerdConfig is containerd's config.toml on the node; its
	// drop-in goes to conf.d/99-vgpu.toml beside it. "": containerd is
	// left alone.
	ContainerdConfig string
	// RestartCommand restarts containerd, run inside HostRoot (chroot)
	// when Install or Remove changed its configuration. Empty: not
	// restarted (the result says so).
	RestartCommand []string
	// StateDir is vgpu's state directory on the node (state_dir): Remove
	// refuses while it holds a container, unless Force.
	StateDir string
	Force    bool
	// Log receives one line per action (nil: discarded).
	Log io.Writer
}

// Record is what an install wrote, in InstallRoot/RecordName: Remove
// undoes exactly this.
type Record struct {
	Version int `json:"version"`
	// Files written, by host path, with the SHA-256 of what was written.
	Files map[string]string `json:"files"`
	// Dirs created (they did not exist), outermost first.
	Dirs []string `json:"dirs,omitempty"`
	// Config is the configuration file when the install created it.
	Config *FileRecord `json:"config,omitempty"`
	// Containerd is what was done to containerd's configuration.
	Containerd *ContainerdRecord `json:"containerd,omitempty"`
}

// FileRecord is one file the install wrote.
type FileRecord struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// Previous is the node's file before the install replaced it (nil:
	// there was none); Remove puts it back.
	Previous []byte `json:"previous,omitempty"`
	Existed  bool   `json:"existed,omitempty"`
}

// ContainerdRecord: the drop-in written, the config.toml that imports it,
// and whether config.toml was created (it did not exist).
type ContainerdRecord struct {
	Config        string `json:"config"`
	DropIn        string `json:"dropIn"`
	CreatedConfig bool   `json:"createdConfig,omitempty"`
	// ConfigSHA256 is config.toml as the install left it (for a created
	// one: Remove deletes it only while it is still that).
	ConfigSHA256 string `json:"configSHA256,omitempty"`
	// ImportExisted: config.toml already imported the drop-in (a node set
	// up by hand with vgpu setup containerd); Remove leaves the import.
	ImportExisted bool `json:"importExisted,omitempty"`
	// DropInPrevious is the drop-in the node had before (DropInExisted);
	// Remove puts it back instead of removing the file.
	DropInPrevious []byte `json:"dropInPrevious,omitempty"`
	DropInExisted  bool   `json:"dropInExisted,omitempty"`
}

// Result says what a run did.
type Result struct {
	Changed          []string // host paths written or removed
	Kept             []string // host paths left in place, with why
	ContainerdChange bool     // containerd's configuration changed
	Restarted        bool     // and containerd was restarted
}

type installer struct {
	o   Options
	res *Result
}

func (in *installer) logf(format string, args ...any) {
	if in.o.Log != nil {
		fmt.Fprintf(in.o.Log, format+"\n", args...)
	}
}

// host returns the path at which the node's path p is reached, resolving
// symbolic links inside HostRoot (a link on the node never leads out of it).
func (in *installer) host(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path on the node", p)
	}
	if in.o.HostRoot == "" || in.o.HostRoot == "/" {
		return filepath.Clean(p), nil
	}
	return securejoin.SecureJoin(in.o.HostRoot, p)
}

func (o Options) check() error {
	for _, f := range []struct{ name, v string }{
		{"--install-root", o.InstallRoot}, {"--config", o.ConfigPath},
	} {
		if !filepath.IsAbs(f.v) {
			return fmt.Errorf("%s %q: give an absolute path on the node", f.name, f.v)
		}
	}
	if o.ContainerdConfig != "" && !filepath.IsAbs(o.ContainerdConfig) {
		return fmt.Errorf("--containerd-config %q: give an absolute path on the node (or \"\" to leave containerd alone)", o.ContainerdConfig)
	}
	if filepath.Clean(o.InstallRoot) == "/" {
		return errors.New("--install-root /: give a directory of vgpu's own, such as /opt/vgpu")
	}
	return nil
}

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// readRecord reads the record at the node's path p (nil when there is none).
func readRecord(p string) (*Record, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it by hand once the files it names are gone)", p, err)
	}
	if r.Version > RecordVersion {
		return nil, fmt.Errorf("%s: record version %d is newer than this installer reads (%d): remove with the newer image", p, r.Version, RecordVersion)
	}
	return &r, nil
}

func (in *installer) recordPath() (string, error) {
	return in.host(filepath.Join(in.o.InstallRoot, RecordName))
}

func (in *installer) writeRecord(r *Record) error {
	p, err := in.recordPath()
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(p, append(data, '\n'), 0o644)
}

// mkdirs creates the node's directory d and its missing parents, adding
// each one it created to r.Dirs.
func (in *installer) mkdirs(r *Record, d string) error {
	var missing []string
	for p := filepath.Clean(d); p != "/"; p = filepath.Dir(p) {
		hp, err := in.host(p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(hp); err == nil {
			break
		}
		missing = append(missing, p)
	}
	for _, p := range slices.Backward(missing) {
		hp, err := in.host(p)
		if err != nil {
			return err
		}
		if err := os.Mkdir(hp, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if !slices.Contains(r.Dirs, p) {
			r.Dirs = append(r.Dirs, p)
		}
		in.logf("created %s", p)
	}
	return nil
}

// payloadFiles lists the payload's bin/ and lib/ files as node paths under
// InstallRoot, with their content.
func (in *installer) payloadFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, sub := range []string{"bin", "lib"} {
		ents, err := os.ReadDir(filepath.Join(in.o.Payload, sub))
		if err != nil {
			return nil, fmt.Errorf("payload: %w (is --payload %q the image's payload directory?)", err, in.o.Payload)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(in.o.Payload, sub, e.Name()))
			if err != nil {
				return nil, err
			}
			files[filepath.Join(in.o.InstallRoot, sub, e.Name())] = data
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("payload %q holds no files in bin/ or lib/", in.o.Payload)
	}
	return files, nil
}

// DefaultLibraryDir is library.dir in the shipped configuration.
const DefaultLibraryDir = "/usr/lib/vgpu"

// open checks o and reads the record of the last install under it (nil:
// none), at path rp: where Install and Remove both start.
func open(o Options) (in *installer, rp string, r *Record, err error) {
	if err := o.check(); err != nil {
		return nil, "", nil, err
	}
	in = &installer{o: o, res: &Result{}}
	if rp, err = in.recordPath(); err != nil {
		return nil, "", nil, err
	}
	if r, err = readRecord(rp); err != nil {
		return nil, "", nil, err
	}
	return in, rp, r, nil
}

// Install puts the payload onto the node (see the package comment).
func Install(o Options) (*Result, error) {
	in, _, prev, err := open(o)
	if err != nil {
		return nil, err
	}
	r := &Record{Version: RecordVersion, Files: map[string]string{}}
	if prev != nil {
		r.Dirs = prev.Dirs
		r.Config = prev.Config
		r.Containerd = prev.Containerd
	}
	files, err := in.payloadFiles()
	if err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(o.InstallRoot, "bin"), filepath.Join(o.InstallRoot, "lib")} {
		if err := in.mkdirs(r, d); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if err := in.writeFile(p, files[p], 0o755); err != nil {
			return nil, err
		}
		r.Files[p] = sum(files[p])
	}
	// A file an earlier release wrote that this one does not ship.
	if prev != nil {
		for p, h := range prev.Files {
			if _, ok := r.Files[p]; !ok {
				if err := in.removeIfUnchanged(p, h); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := in.writeRecord(r); err != nil {
		return nil, err
	}
	if err := in.installConfig(r); err != nil {
		return nil, err
	}
	if err := in.writeRecord(r); err != nil {
		return nil, err
	}
	if o.ContainerdConfig != "" {
		if err := in.installContainerd(r); err != nil {
			return nil, err
		}
		if err := in.writeRecord(r); err != nil {
			return nil, err
		}
	}
	return in.res, in.restartIfChanged()
}

// writeFile writes the node's file p as a new file renamed into place,
// unless it already holds data (then it is left alone: same inode).
func (in *installer) writeFile(p string, data []byte, mode os.FileMode) error {
	hp, err := in.host(p)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(hp); err == nil && bytes.Equal(old, data) {
		if fi, err := os.Stat(hp); err == nil && fi.Mode().Perm() == mode {
			return nil
		}
	}
	if err := atomicfile.Write(hp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	in.res.Changed = append(in.res.Changed, p)
	in.logf("wrote %s", p)
	return nil
}

// removeIfUnchanged removes the node's file p when it still has the
// SHA-256 h (what the install wrote); a changed file is kept.
func (in *installer) removeIfUnchanged(p, h string) error {
	hp, err := in.host(p)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(hp)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if sum(data) != h {
		in.res.Kept = append(in.res.Kept, p+" (changed since it was installed)")
		in.logf("kept %s: changed since it was installed", p)
		return nil
	}
	if err := os.Remove(hp); err != nil {
		return err
	}
	in.res.Changed = append(in.res.Changed, p)
	in.logf("removed %s", p)
	return nil
}

func (in *installer) installConfig(r *Record) error {
	hp, err := in.host(in.o.ConfigPath)
	if err != nil {
		return err
	}
	if in.o.ConfigSource != "" {
		return in.replaceConfig(r, hp)
	}
	if _, err := os.Stat(hp); err == nil {
		return nil // the node's own (or ours from before): kept
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	def, err := os.ReadFile(filepath.Join(in.o.Payload, "config.toml"))
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	libDir := filepath.Join(in.o.InstallRoot, "lib")
	data := bytes.Replace(def, []byte(fmt.Sprintf("dir = %q", DefaultLibraryDir)), []byte(fmt.Sprintf("dir = %q", libDir)), 1)
	if err := in.mkdirs(r, filepath.Dir(in.o.ConfigPath)); err != nil {
		return err
	}
	if err := in.writeFile(in.o.ConfigPath, data, 0o644); err != nil {
		return err
	}
	r.Config = &FileRecord{Path: in.o.ConfigPath, SHA256: sum(data)}
	return nil
}

// replaceConfig writes ConfigSource over the node's configuration at hp,
// keeping the node's own in the record the first time.
func (in *installer) replaceConfig(r *Record, hp string) error {
	data, err := os.ReadFile(in.o.ConfigSource)
	if err != nil {
		return fmt.Errorf("--config-source: %w", err)
	}
	cur, err := readOptional(hp)
	if err != nil {
		return err
	}
	if r.Config == nil || r.Config.Path != in.o.ConfigPath {
		r.Config = &FileRecord{Path: in.o.ConfigPath, Previous: cur, Existed: cur != nil}
	}
	r.Config.SHA256 = sum(data)
	if err := in.mkdirs(r, filepath.Dir(in.o.ConfigPath)); err != nil {
		return err
	}
	// The record first: a crash after the write still restores the node's.
	if err := in.writeRecord(r); err != nil {
		return err
	}
	return in.writeFile(in.o.ConfigPath, data, 0o644)
}

func readOptional(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if b == nil && err == nil {
		b = []byte{}
	}
	return b, err
}

func (in *installer) installContainerd(r *Record) error {
	cfg := in.o.ContainerdConfig
	dropIn := setup.DropInPath(cfg)
	hcfg, err := in.host(cfg)
	if err != nil {
		return err
	}
	hdrop, err := in.host(dropIn)
	if err != nil {
		return err
	}
	before, err := readOptional(hcfg)
	if err != nil {
		return err
	}
	oldDrop, err := readOptional(hdrop)
	if err != nil {
		return err
	}
	after, dropData, err := setup.Containerd(before, dropIn, setup.ContainerdOptions{
		RuntimePath:   filepath.Join(in.o.InstallRoot, "bin", "vgpu-runtime"),
		Kubernetes:    true,
		DefaultConfig: in.containerdDefault,
	})
	if err != nil {
		return fmt.Errorf("%s: %w (nothing was changed in containerd's configuration)", cfg, err)
	}
	// What the node had before the first install is kept from the first
	// record: later installs see the install's own files.
	rec := &ContainerdRecord{Config: cfg, DropIn: dropIn, CreatedConfig: before == nil,
		ImportExisted: before != nil && bytes.Equal(before, after), DropInPrevious: oldDrop, DropInExisted: oldDrop != nil}
	if prev := r.Containerd; prev != nil && prev.Config == cfg {
		rec.CreatedConfig, rec.ImportExisted = prev.CreatedConfig, prev.ImportExisted
		rec.DropInPrevious, rec.DropInExisted = prev.DropInPrevious, prev.DropInExisted
	}
	// The drop-in first: config.toml never imports a file that is not there.
	if err := in.mkdirs(r, filepath.Dir(dropIn)); err != nil {
		return err
	}
	if !bytes.Equal(oldDrop, dropData) || oldDrop == nil {
		if err := atomicfile.Replace(hdrop, dropData, 0o644); err != nil {
			return err
		}
		in.res.Changed = append(in.res.Changed, dropIn)
		in.res.ContainerdChange = true
		in.logf("wrote %s", dropIn)
	}
	if before == nil || !bytes.Equal(before, after) {
		if err := atomicfile.Replace(hcfg, after, 0o644); err != nil {
			return err
		}
		in.res.Changed = append(in.res.Changed, cfg)
		in.res.ContainerdChange = true
		in.logf("wrote %s", cfg)
	}
	rec.ConfigSHA256 = sum(after)
	r.Containerd = rec
	return nil
}

// containerdDefault is `containerd config default` of the node's
// containerd, for a node without config.toml.
func (in *installer) containerdDefault() ([]byte, error) {
	cmd := in.hostCommand([]string{"containerd", "config", "default"})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("containerd config default (on the node): %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// hostCommand runs argv inside HostRoot: the node's own programs, with the
// node's libraries.
func (in *installer) hostCommand(argv []string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	if in.o.HostRoot != "" && filepath.Clean(in.o.HostRoot) != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: in.o.HostRoot}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	return cmd
}

func (in *installer) restartIfChanged() error {
	if !in.res.ContainerdChange {
		return nil
	}
	if len(in.o.RestartCommand) == 0 {
		in.logf("containerd's configuration changed; no restart command: restart containerd to apply it (running containers keep running)")
		return nil
	}
	cmd := in.hostCommand(in.o.RestartCommand)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("restart containerd (%s): %v: %s (its configuration was changed: restart it by hand)", strings.Join(in.o.RestartCommand, " "), err, strings.TrimSpace(string(out)))
	}
	in.res.Restarted = true
	in.logf("restarted containerd (%s)", strings.Join(in.o.RestartCommand, " "))
	return nil
}

// Tenants lists the containers in the node's state directory: vgpu
// containers that have not ended (their record goes at poststop).
func (in *installer) tenants() ([]string, error) {
	if in.o.StateDir == "" {
		return nil, nil
	}
	hp, err := in.host(in.o.StateDir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(hp)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(hp, e.Name(), "container.json")); err == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// ErrTenants is Remove's refusal while vgpu containers run.
var ErrTenants = errors.New("vgpu containers are running")

// Remove undoes what the record says an install did (see the package
// comment). Without a record it does nothing.
func Remove(o Options) (*Result, error) {
	in, rp, r, err := open(o)
	if err != nil {
		return nil, err
	}
	if r == nil {
		in.logf("no %s: nothing was installed here", filepath.Join(o.InstallRoot, RecordName))
		return in.res, nil
	}
	if ids, err := in.tenants(); err != nil {
		return nil, err
	} else if len(ids) > 0 && !o.Force {
		return nil, fmt.Errorf("%w on this node (%s in %s): containerd calls vgpu-runtime to stop them, so vgpu stays until they end; delete those pods and remove again (or force, and stop them with runc)", ErrTenants, strings.Join(ids, ", "), o.StateDir)
	}
	// containerd first: once it no longer names vgpu-runtime, the
	// binaries can go.
	if c := r.Containerd; c != nil {
		if err := in.removeContainerd(c); err != nil {
			return nil, err
		}
		r.Containerd = nil
		if err := in.writeRecord(r); err != nil {
			return nil, err
		}
		if err := in.restartIfChanged(); err != nil {
			return nil, err
		}
	}
	paths := make([]string, 0, len(r.Files))
	for p := range r.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := in.removeIfUnchanged(p, r.Files[p]); err != nil {
			return nil, err
		}
	}
	if c := r.Config; c != nil && c.Existed {
		if err := in.restore(c); err != nil {
			return nil, err
		}
	} else if c != nil {
		if err := in.removeIfUnchanged(c.Path, c.SHA256); err != nil {
			return nil, err
		}
	}
	if err := os.Remove(rp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// Directories it created, innermost first, while empty.
	dirs := slices.Clone(r.Dirs)
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		hd, err := in.host(d)
		if err != nil {
			return nil, err
		}
		if err := os.Remove(hd); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				in.res.Kept = append(in.res.Kept, d+" (not empty)")
				in.logf("kept %s: not empty", d)
			}
			continue
		}
		in.res.Changed = append(in.res.Changed, d)
		in.logf("removed %s", d)
	}
	return in.res, nil
}

// restore puts the node's previous file back, unless the installed one
// was changed since.
func (in *installer) restore(c *FileRecord) error {
	hp, err := in.host(c.Path)
	if err != nil {
		return err
	}
	cur, err := readOptional(hp)
	if err != nil {
		return err
	}
	if cur != nil && sum(cur) != c.SHA256 {
		in.res.Kept = append(in.res.Kept, c.Path+" (changed since it was installed)")
		in.logf("kept %s: changed since it was installed", c.Path)
		return nil
	}
	if err := atomicfile.Replace(hp, c.Previous, 0o644); err != nil {
		return err
	}
	in.res.Changed = append(in.res.Changed, c.Path)
	in.logf("restored %s", c.Path)
	return nil
}

func (in *installer) removeContainerd(c *ContainerdRecord) error {
	hcfg, err := in.host(c.Config)
	if err != nil {
		return err
	}
	hdrop, err := in.host(c.DropIn)
	if err != nil {
		return err
	}
	before, err := readOptional(hcfg)
	if err != nil {
		return err
	}
	switch {
	case before == nil:
	case c.CreatedConfig && sum(before) == c.ConfigSHA256:
		// It did not exist before the install and nobody changed it since.
		if err := os.Remove(hcfg); err != nil {
			return err
		}
		in.res.Changed = append(in.res.Changed, c.Config)
		in.res.ContainerdChange = true
		in.logf("removed %s", c.Config)
	case c.ImportExisted:
		// The node imported the drop-in before the install: left so.
	default:
		after, _, err := setup.Containerd(before, c.DropIn, setup.ContainerdOptions{Remove: true})
		if err != nil {
			return fmt.Errorf("%s: %w (nothing was changed)", c.Config, err)
		}
		if !bytes.Equal(before, after) {
			if err := atomicfile.Replace(hcfg, after, 0o644); err != nil {
				return err
			}
			in.res.Changed = append(in.res.Changed, c.Config)
			in.res.ContainerdChange = true
			in.logf("wrote %s (import of %s removed)", c.Config, c.DropIn)
		}
	}
	if c.DropInExisted {
		cur, err := readOptional(hdrop)
		if err != nil {
			return err
		}
		if !bytes.Equal(cur, c.DropInPrevious) {
			if err := atomicfile.Replace(hdrop, c.DropInPrevious, 0o644); err != nil {
				return err
			}
			in.res.Changed = append(in.res.Changed, c.DropIn)
			in.res.ContainerdChange = true
			in.logf("restored %s", c.DropIn)
		}
		return nil
	}
	if err := os.Remove(hdrop); err == nil {
		in.res.Changed = append(in.res.Changed, c.DropIn)
		in.res.ContainerdChange = true
		in.logf("removed %s", c.DropIn)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
