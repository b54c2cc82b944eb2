#!/bin/sh
# inshm.sh DIR CMD [ARG...]: CMD in a mount namespace of its own whose
# /dev/shm is DIR, as a container on a spatial GPU has it (docs/spatial.md:
# MPS clients and their server meet in POSIX shared memory, and vgpu node
# runs the GPU's MPS daemon with that directory as its /dev/shm). vgpu exec
# runs on the host, beside the host's /dev/shm: run.sh puts spatial50's
# servers in here.
[ $# -ge 2 ] || { echo "usage: inshm.sh DIR CMD [ARG...]" >&2; exit 2; }
[ -d "$1" ] || { echo "inshm.sh: '$1' is not a directory" >&2; exit 2; }
exec unshare -m sh -c 'mount --bind "$0" /dev/shm && exec "$@"' "$@"
