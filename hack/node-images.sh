#!/usr/bin/env bash
# Root filesystems for the e2e real node's images, built without Docker or a
# registry from Debian's packages (mmdebstrap), cached outside the clone:
#   $cache/images/postgres-15-pgbackrest-<date>.tar
#                                          PostgreSQL 15 laid out like the official
#                                          postgres image: user postgres uid/gid 999,
#                                          bash, /var/run/postgresql, no cluster made;
#                                          with pgBackRest, as a platform's image for
#                                          the WAL archive has it (docs/backups.md)
# The e2e harness turns each tar into a one-layer OCI image (PATH with the server
# binaries) and imports it into the suite's containerd. Prints the images folder.
#
#   hack/node-images.sh          build what is missing
set -euo pipefail

cache=${FUNCTION_DATABASE_CACHE:-$HOME/.cache/function-database}
images="$cache/images"
mkdir -p "$images"
log() { echo "node-images: $*" >&2; }

# One rootfs per month is enough for tests (security updates land in new
# builds); the name keys the cache.
stamp=$(date -u +%Y-%m)
# The name says what is in it: a package added is a new name, not a stale hit.
pg="$images/postgres-15-pgbackrest-$stamp.tar"
if [ ! -s "$pg" ]; then
	command -v mmdebstrap >/dev/null || { log "mmdebstrap missing: run hack/cluster-tools.sh node"; exit 1; }
	start=$SECONDS
	log "building $pg (mmdebstrap, ~30 s)"
	tmp="$images/.postgres-15-pgbackrest-$stamp.partial.tar" # mmdebstrap picks the format from .tar
	# The essential hooks run before the --include packages are installed
	# (minbase has no useradd yet): the postgres user gets uid/gid 999 (as in the official image, and the
	# pods' runAsUser), and the Debian package makes no cluster of its own.
	# shellcheck disable=SC2016 # "$1" is the hooks' own argument (the root), for mmdebstrap to expand
	mmdebstrap --quiet --variant=minbase --mode=root \
		--include=postgresql-15,pgbackrest,bash,ca-certificates \
		--essential-hook='echo "postgres:x:999:" >>"$1/etc/group"' \
		--essential-hook='echo "postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/bash" >>"$1/etc/passwd"' \
		--essential-hook='echo "postgres:*:20000:0:99999:7:::" >>"$1/etc/shadow"' \
		--essential-hook='mkdir -p "$1/etc/postgresql-common" && echo "create_main_cluster = false" >"$1/etc/postgresql-common/createcluster.conf"' \
		--customize-hook='mkdir -p "$1/var/run/postgresql" "$1/var/lib/postgresql/data" && chown 999:999 "$1/var/run/postgresql" "$1/var/lib/postgresql/data" && chmod 3777 "$1/var/run/postgresql"' \
		--customize-hook='rm -rf "$1/usr/share/doc" "$1/usr/share/man" "$1/var/cache/apt" "$1/var/lib/apt/lists"' \
		bookworm "$tmp" >&2
	mv "$tmp" "$pg"
	log "built in $((SECONDS - start)) s ($(du -h "$pg" | cut -f1))"
fi
ln -sf "$(basename "$pg")" "$images/postgres-15.tar"
echo "$images"
