// Package config reads /etc/vgpu/config.toml.
//
//	cfg, err := config.Load(path)   // missing file: Default(); unknown keys: error with line number
//	cfg, err := config.Parse(data)  // same, from memory
//	cfg := config.Default()
//	cfg.DriverPath(rel) string      // <driver.root>/<rel>
//	cfg.DevPath(name) string        // <driver.dev_root>/dev/<name>
//
// Every key is documented in configs/config.toml. A bad file is an error for
// the caller to report; callers that only pass a command through (runc
// delete/state/kill) should not need the config at all.
package config
