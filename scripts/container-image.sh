#!/usr/bin/env bash
# Builds the container image of vidgate from this checkout, with nothing set
# up beforehand but the Rust toolchain and podman (or docker):
#
#     scripts/container-image.sh            # localhost/vidgate:dev
#     VIDGATE_IMAGE=registry.example.com/vidgate:1.4 scripts/container-image.sh
#
# The image is `FROM scratch` (see Containerfile): this script compiles the
# release binary here and gathers what it needs at run time into the build
# context target/container/rootfs: the binary, the shared libraries `ldd`
# names (glibc and the loader), the CA certificates the providers' and S3's
# TLS is verified against, and the passwd and group entries of the non-root
# user. No image registry is reached, so it builds on an offline machine.
set -euo pipefail
cd "$(dirname "$0")/.."

image="${VIDGATE_IMAGE:-localhost/vidgate:dev}"
engine="${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}"
if [ -z "$engine" ]; then
    echo "neither podman nor docker is installed (apt-get install podman)" >&2
    exit 1
fi
ca_bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -f "$ca_bundle" ]; then
    echo "no CA bundle at $ca_bundle (apt-get install ca-certificates)" >&2
    exit 1
fi

cargo build --release --locked -p vidgate
binary=target/release/vidgate

context=target/container
rm -rf "$context"
rootfs="$context/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/var/lib" "$context/data/vidgate"
install -m 0755 "$binary" "$rootfs/usr/local/bin/vidgate"
# The release profile keeps line tables for backtraces on a developer's
# machine; in the image they are four fifths of its size and not needed to
# run. Symbols stay, so a backtrace still names its functions.
strip --strip-debug "$rootfs/usr/local/bin/vidgate"

# Every shared library the binary loads, at the path the loader looks for it:
# "name => /path (address)" lines, and the loader's own "/path (address)".
ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
    while read -r library; do
        mkdir -p "$rootfs$(dirname "$library")"
        cp -L "$library" "$rootfs$library"
    done

cp -L "$ca_bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/nonexistent\nvidgate:x:10001:10001:vidgate:/var/lib/vidgate:/nonexistent\n' \
    > "$rootfs/etc/passwd"
printf 'root:x:0:\nvidgate:x:10001:\n' > "$rootfs/etc/group"
# Names resolve from /etc/hosts (which the container runtime writes), then DNS.
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
# Scratch files (tempfile's) go to /tmp, writable by everyone, sticky.
mkdir -m 1777 "$rootfs/tmp"
# The data directory belongs to vidgate's user and only to it, as vidgate
# itself creates it (0700); the Containerfile copies it with that owner.
chmod 0700 "$context/data/vidgate"

cp Containerfile "$context/Containerfile"
"$engine" build --file "$context/Containerfile" --tag "$image" "$context"
echo "built $image"
