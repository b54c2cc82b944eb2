package status

// Text that fits 120 columns unless Report.Wide: docker's and containerd's
// 64-character ids and the GPUs' 40-character UUIDs are cut to what tells
// them apart on one host (docker ps shows 12 characters of an id).

const (
	shortIDLen   = 12
	shortUUIDLen = len("GPU-") + 8
)

func (r *Report) displayID(id string) string {
	if r.Wide || len(id) != 64 || !isHex(id) {
		return id
	}
	return id[:shortIDLen]
}

func (r *Report) displayUUID(uuid string) string {
	if r.Wide || len(uuid) <= shortUUIDLen+1 {
		return uuid
	}
	return uuid[:shortUUIDLen] + "…"
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
