#!/usr/bin/env bash
# Builds the skiff container image: a static skiff binary on an empty (scratch) base.
#
#   container/build.sh [IMAGE]        # IMAGE defaults to localhost/skiff:<version>
#
# Needs cargo and buildah (Debian: apt-get install buildah); no registry is contacted, since the
# base is scratch. The binary is linked statically against glibc (+crt-static) so the image
# needs no libc; it is built into target/container, apart from the usual builds.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

for tool in cargo buildah readelf; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed" >&2; exit 1; }
done

target=x86_64-unknown-linux-gnu
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
image="${1:-localhost/skiff:${version}}"

echo "==> building a static skiff ${version} for ${target}" >&2
RUSTFLAGS="-C target-feature=+crt-static" \
CARGO_PROFILE_RELEASE_DEBUG=0 \
CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin skiff --target "$target" --target-dir target/container

binary="target/container/${target}/release/skiff"
# A dynamically linked binary would build an image that cannot start: refuse it here (a
# program interpreter is what a dynamically linked ELF file names).
if readelf --program-headers "$binary" | grep -q INTERP; then
    echo "build.sh: ${binary} is dynamically linked; the scratch image needs a static binary" >&2
    exit 1
fi
"$binary" --version >/dev/null

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$binary" "$stage/skiff"
cp container/Containerfile container/skiff.toml "$stage/"
mkdir "$stage/data"

echo "==> building ${image}" >&2
buildah build --layers=false --format oci --file "$stage/Containerfile" --tag "$image" "$stage"

# The image's own binary, run from its unpacked filesystem (no container runtime needed).
# buildah mounts need root, or `buildah unshare` around this script.
if [ "$(id -u)" = 0 ]; then
    container="$(buildah from "$image")"
    root="$(buildah mount "$container")"
    "$root/skiff" --version
    buildah umount "$container" >/dev/null
    buildah rm "$container" >/dev/null
fi

size="$(buildah images --format '{{.Size}}' "$image")"
echo "built ${image} (${size})"
