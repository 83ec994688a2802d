#!/usr/bin/env bash
# image.sh [--debug] [OUT_DIR]
#
# Builds the image the Kubernetes manifests run, with no registry, no base image and no engine:
# an OCI image layout written directly (one gzip layer; FROM scratch in effect) holding only
#   /opt/cpuplan/cpuplan-nri    the NRI plugin, static (scripts/build-static.sh: no PT_INTERP)
#   /opt/cpuplan/cpuplan        the operator's command (the hook overlays' installer), static
#   /opt/cpuplan/cpuplan-hook   the OCI hook the installer copies to the node, static
#   /opt/cpuplan/cpuplan-exec   static
# (under /opt so that a node's /usr/local mounted over the image's hides nothing), entrypoint
# /opt/cpuplan/cpuplan-nri, with the OCI labels title, version, licenses, revision, created
# and (IMAGE_SOURCE) source. It is archived as OUT_DIR/cpuplan-VERSION.oci.tar (default OUT_DIR:
# $CARGO_TARGET_DIR/image) and the path printed. The archive names the image
# localhost/cpuplan:VERSION (IMAGE_NAME overrides the name before the colon), so it loads as
#   podman load -i target/image/cpuplan-VERSION.oci.tar
#   ctr -n k8s.io images import target/image/cpuplan-VERSION.oci.tar      (a Kubernetes node)
#   skopeo copy oci-archive:target/image/cpuplan-VERSION.oci.tar docker://REGISTRY/cpuplan:VERSION
# The same binaries give the same archive (sorted names, owner 0, mtime of the last commit or
# SOURCE_DATE_EPOCH). IMAGE_SOURCE (an http(s) URL) sets the source label; without it the image
# has none (never the build machine's checkout path or remote).
# Release builds unless --debug (the tests use --debug). Needs tar, gzip, sha256sum, readelf.
# Honours CARGO_TARGET_DIR and CARGO.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
target=${CARGO_TARGET_DIR:-target}
out=${1:-$target/image}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
license=$(sed -n 's/^license = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
name=${IMAGE_NAME:-localhost/cpuplan}
reference=$name:$version
source=${IMAGE_SOURCE:-}
case $source in
  *[\"\\[:space:]]*) echo "image.sh: IMAGE_SOURCE holds a quote, a backslash or a space: ${source@Q}" >&2; exit 2 ;;
  ''|http://*|https://*) ;;
  *) echo "image.sh: IMAGE_SOURCE must be an http(s) URL, not ${source@Q}" >&2; exit 2 ;;
esac
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
mtime=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$mtime" +%Y-%m-%dT%H:%M:%SZ)

static_flags=()
[ "$profile" = debug ] && static_flags+=(--debug)
mapfile -t bins < <(scripts/build-static.sh "${static_flags[@]}")
[ ${#bins[@]} -eq 4 ] || { echo "image.sh: scripts/build-static.sh failed" >&2; exit 1; }

work=$target/image-work
rm -rf "$work"
mkdir -p "$work/rootfs/opt/cpuplan" "$work/layout/blobs/sha256"
install -m 755 "${bins[@]}" "$work/rootfs/opt/cpuplan/"
if [ "$profile" = debug ]; then strip --strip-debug "$work"/rootfs/opt/cpuplan/*; fi

blob() { # FILE -> moves it into the layout as a blob; prints "sha256:HEX SIZE"
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  mv "$1" "$work/layout/blobs/sha256/$d"
  echo "sha256:$d $s"
}
tar_flags=(--sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" --format=posix
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)

tar -C "$work/rootfs" "${tar_flags[@]}" -cf "$work/layer.tar" opt
diff_id=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 "$work/layer.tar"
read -r layer layer_size < <(blob "$work/layer.tar.gz")

source_label=
[ -z "$source" ] || source_label="\"org.opencontainers.image.source\":\"$source\","
labels="\"org.opencontainers.image.title\":\"cpuplan\",\"org.opencontainers.image.version\":\"$version\",$source_label\"org.opencontainers.image.licenses\":\"$license\",\"org.opencontainers.image.revision\":\"$revision\",\"org.opencontainers.image.created\":\"$created\""
printf '{"architecture":"amd64","os":"linux","created":"%s","config":{"Entrypoint":["/opt/cpuplan/cpuplan-nri"],"Env":["PATH=/opt/cpuplan"],"Labels":{%s}},"rootfs":{"type":"layers","diff_ids":["%s"]},"history":[{"created":"%s","created_by":"scripts/image.sh: the static cpuplan-nri, cpuplan, cpuplan-hook and cpuplan-exec"}]}' \
  "$created" "$labels" "$diff_id" "$created" > "$work/config.json"
read -r config config_size < <(blob "$work/config.json")

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"%s","size":%s}],"annotations":{%s}}' \
  "$config" "$config_size" "$layer" "$layer_size" "$labels" > "$work/manifest.json"
read -r manifest manifest_size < <(blob "$work/manifest.json")

# ref.name: podman load and skopeo name the image from it; io.containerd.image.name: ctr import.
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$reference" "$reference" > "$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"

mkdir -p "$out"
archive=$out/cpuplan-$version.oci.tar
tar -C "$work/layout" "${tar_flags[@]}" -cf "$archive.tmp" oci-layout index.json blobs
mv "$archive.tmp" "$archive"
rm -rf "$work"
echo "$archive"
