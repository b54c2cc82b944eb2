package tenant

import (
	"path/filepath"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// The names in a tenant's directory, <state_dir>/<id> (docs/design.md
// "State directory").
const (
	QuotaName   = "quota"          // the quota file, mounted at contract.QuotaPath
	PreloadName = "ld.so.preload"  // mounted at /etc/ld.so.preload
	SharedName  = "shared"         // the shared accounting region's directory
	HostName    = "host"           // written by the host only (hostpids, the share file), mounted read-only
	RecordName  = "container.json" // the record
)

// ContainerShared is where a container sees its shared directory (the
// quota file's shared-dir inside a container); ContainerHost where it sees
// host/.
const (
	ContainerShared = "/run/vgpu/shared"
	ContainerHost   = "/run/vgpu/host"
)

// ClaimIDPrefix starts the id of every DRA claim's tenant (ClaimID): vgpu
// node's readers tell a claim from a container by it.
const ClaimIDPrefix = "claim-"

// ClaimID is the id (state directory name) of the tenant of DRA claim uid.
func ClaimID(uid string) string { return ClaimIDPrefix + uid }

// Places are where a tenant's files are on the host. They follow from the
// state directory and the id alone, whatever the record says the library
// sees: a reader never recovers a host path from a path inside the
// container.
type Places struct{ Dir string }

// PlacesOf is the places of tenant id of stateDir.
func PlacesOf(stateDir, id string) Places { return Places{Dir: filepath.Join(stateDir, id)} }

// Record is container.json.
func (p Places) Record() string { return filepath.Join(p.Dir, RecordName) }

// Quota is the quota file rendered from the record.
func (p Places) Quota() string { return filepath.Join(p.Dir, QuotaName) }

// Preload is the container's ld.so.preload.
func (p Places) Preload() string { return filepath.Join(p.Dir, PreloadName) }

// Shared is the library's shared directory (its region and lock).
func (p Places) Shared() string { return filepath.Join(p.Dir, SharedName) }

// Region is the library's accounting region, in Shared.
func (p Places) Region() string { return filepath.Join(p.Shared(), contract.RegionFile) }

// Host is the directory the host writes for the library (mounted
// read-only at ContainerHost).
func (p Places) Host() string { return filepath.Join(p.Dir, HostName) }

// ShareFile is the share file (the admission and arbitration words the
// host writes for the library), where the contract's path rule puts it
// beside the region (contract.SharePath: in Host).
func (p Places) ShareFile() string { return contract.SharePath(p.Shared()) }
