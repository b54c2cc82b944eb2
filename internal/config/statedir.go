package config

// StateDirOf is the state directory a host tool works in: flag (its
// --state-dir; "" when not given), else state_dir of the configuration at
// Path(), else DefaultStateDir, also when the configuration cannot be read:
// a broken file must not keep a tool from reporting or cleaning up.
func StateDirOf(flag string) string {
	if flag != "" {
		return flag
	}
	if c, err := Load(Path()); err == nil && c.StateDir != "" {
		return c.StateDir
	}
	return DefaultStateDir
}
