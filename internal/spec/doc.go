// Package spec loads, edits and saves an OCI bundle's config.json without
// losing anything it does not understand. The user's GPU request is parsed
// by internal/request.
//
// # Bundle editing
//
// The document is held as the syntax tree of github.com/tailscale/hujson, the
// library that also edits docker's daemon.json (internal/setup): an edit
// replaces or appends one value of the tree, and everything else (key order,
// whitespace, fields that vgpu does not know: seccomp extensions, future
// runtime-spec fields, vendor keys) is written back byte for byte. New
// members and elements are spaced as their neighbours. A spec that was not
// edited is never rewritten. Edits walk the tree rather than go through
// hujson's JSON Patch: a JSON Pointer names keys exactly, and vgpu must edit
// the key runc's decoder uses, found case-insensitively (below). hujson also
// reads comments and trailing commas; a document that has any is refused, as
// runc refuses it.
//
//	s, err := spec.LoadBundle(bundleDir)   // reads <bundle>/config.json
//	s.Env() []string                       // process.env (nil if absent)
//	s.Annotations() map[string]string      // annotations (nil if absent)
//	s.RootfsPath() string                  // root.path, made absolute against the bundle
//	s.Bundle(), s.Path() string
//	s.Devices() ([]specs.LinuxDevice, error)          // linux.devices
//	s.SetEnv(key, value string) error                 // replace or append KEY=value
//	s.SetAnnotation(key, value string) error
//	s.AddMounts(m ...specs.Mount) error               // appended after existing mounts
//	s.AddDevices(d ...specs.LinuxDevice) error        // linux.devices
//	s.AddDeviceRules(r ...specs.LinuxDeviceCgroup) error // linux.resources.devices
//	s.AddHook(stage string, h specs.Hook) error       // hooks.<stage>
//	s.Clone() *Spec                                   // independent copy for all-or-nothing edits
//	s.Modified() bool
//	s.Bytes() []byte                                  // the document as it would be saved
//	s.Save() error   // atomic: temp file in the bundle dir, fsync, rename, fsync dir; keeps mode (and owner when root)
//	spec.Injected(annotations) bool                   // already edited by vgpu (annotation vgpu.io/injected)
//
// No object anywhere in the document may hold two keys that match
// case-insensitively ("mounts" and "Mounts", or the same key twice): runc's
// decoder (encoding/json) matches keys that way and keeps the last, so vgpu
// and runc could read different values; Parse and LoadBundle refuse such a
// document with one error naming the object and both keys, and nothing is
// edited. A key spelled in another case alone ("Mounts") is the one runc
// uses, and vgpu reads and edits that one.
package spec
