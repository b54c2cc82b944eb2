// Package inject decides what a limited container gets and puts it there.
//
// One description, the Plan, is computed by a pure function from the
// request, the config and what discovery found; two appliers use it: one
// edits the OCI spec (the shim, vgpu-runtime), one acts on the rootfs (the
// createContainer hook, vgpu-hook).
//
//	host, err := inject.Discover(cfg)                   // driver files + go-nvml (cgo) + device nodes
//	host, err := inject.DiscoverWith(cfg, lister)       // another GPU lister (tests)
//	plan, err := inject.NewPlan(req, cfg, host, id)     // pure; nil req is an error: pass the container through instead
//	plan.Name, plan.Bundle = …                          // optional, for container.json
//	err = plan.Install(s)           // shim: WriteState(s.RootfsPath()) + ApplyToSpec + s.Save(), all or nothing
//	err = plan.WriteState(rootfs)   // <state_dir>/<id>/{quota,ld.so.preload,shared/,container.json}, atomic
//	err = plan.ApplyToSpec(s)       // devices + "rwm" rules + mounts + env + vgpu.io/injected; s unchanged on error
//	err = plan.CheckDeviceRules(rules) // hook: the spec's cgroup rules must already allow the nodes
//	err = plan.ApplyToRootfs(rootfs)   // hook (createContainer): mknod + bind mounts inside the rootfs
//	err = inject.RemoveState(stateDir, id)              // on delete; missing is fine
//	info, quota, err := inject.ReadState(stateDir, id)  // vgpu status
//	err = inject.SetPIDs(stateDir, id, pids)
//	data, err := quota.Marshal(); q, err := inject.ParseQuota(data) // format v1, same rules as lib/cudahook/src/quota.c
//
// Discovery uses go-nvml, which needs cgo: a CGO_ENABLED=0 build compiles
// but Discover then returns an error saying so.
//
// Shim flow on `create`:
//
//	s, _ := spec.LoadBundle(bundle)
//	req, err := spec.ParseRequestWithDefaults(s.Env(), s.Annotations(), cfg.RequestDefaults())
//	if req == nil || spec.Injected(s.Annotations()) { exec runc unchanged }
//	host, _ := inject.Discover(cfg)
//	plan, _ := inject.NewPlan(req, cfg, host, id)
//	plan.Install(s)
//	… exec runc; on `delete`: inject.RemoveState(cfg.StateDir, id)
package inject
