#!/bin/sh
# The proxy image's root filesystem, in two steps that scripts/image runs:
#
#   rootfs.sh extract ROOT   mmdebstrap's --extract-hook: the packages were only extracted (--variant=extract: no
#                            maintainer script ran, no dpkg or apt is installed), their .debs are still there.
#                            Checks they are exactly the pinned list (IMAGE_LOCK), or writes that list
#                            (IMAGE_LOCK_OUT; IMAGE_ARCH is the native architecture); writes /var/lib/dpkg/status from the packages' own control fields,
#                            so that scanners and SBOM tools (syft, trivy, grype) and `dpkg-query --admindir` see
#                            what is inside.
#   rootfs.sh finish ROOT    after mmdebstrap: links the busybox applets that the probe pods and the firewall init
#                            container run (IMAGE_APPLETS); writes /etc/passwd and /etc/group with root and the
#                            proxy's user (IMAGE_UID, also its GID); removes what only the build used (apt's and
#                            dpkg's configuration, the host's resolver and name, device nodes).
set -eu
export LC_ALL=C  # globs and sort in byte order
step=${1:?extract or finish} root=${2:?the root directory}
archives="$root/var/cache/apt/archives"

extract() {
  # name=version, or name:arch=version for a package of another architecture than IMAGE_ARCH (the build root's
  # arm64 libc6-dev).
  list=$(for deb in "$archives"/*.deb; do dpkg-deb -f "$deb" Package Architecture Version | sed 's/^[A-Za-z]*: //' | paste -sd' '; done \
    | awk -v native="${IMAGE_ARCH:-}" '{ print (native == "" || $2 == "all" || $2 == native ? $1 : $1 ":" $2) "=" $3 }' | sort)
  if [ -n "${IMAGE_LOCK_OUT:-}" ]; then
    printf '%s\n' "$list" >"$IMAGE_LOCK_OUT"
  else
    expected=$(grep -v '^#' "$IMAGE_LOCK" | grep . | sort)
    if [ "$list" != "$expected" ]; then
      echo "images/proxy/rootfs.sh: the mirror gave other packages than $IMAGE_LOCK pins (run: scripts/image lock):" >&2
      tmp=$(mktemp -d)
      printf '%s\n' "$expected" >"$tmp/pinned"; printf '%s\n' "$list" >"$tmp/got"
      diff "$tmp/pinned" "$tmp/got" | grep '^[<>]' | sed 's/^</  pinned:/; s/^>/  got:   /' >&2
      rm -rf "$tmp"
      exit 1
    fi
  fi

  mkdir -p "$root/var/lib/dpkg"
  for deb in "$archives"/*.deb; do
    dpkg-deb -f "$deb" | awk 'NR == 1 { print; print "Status: install ok installed"; next } { print }'
    echo
  done >"$root/var/lib/dpkg/status"
}

finish() {
  for applet in $IMAGE_APPLETS; do
    [ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
  done

  uid=$IMAGE_UID
  printf 'root:x:0:0:root:/root:/bin/sh\ntinyproxy:x:%s:%s:tinyproxy:/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' "$uid" "$uid" >"$root/etc/passwd"
  printf 'root:x:0:\ntinyproxy:x:%s:\nnogroup:x:65534:\n' "$uid" >"$root/etc/group"
  chmod 0644 "$root/etc/passwd" "$root/etc/group"

  rm -rf "${root:?}/etc/apt" "${root:?}/etc/dpkg/dpkg.cfg.d" "${root:?}/var/lib/apt" "${root:?}/var/cache/apt" \
    "${root:?}/var/log/"* "${root:?}/etc/hostname" "${root:?}/etc/resolv.conf" "${root:?}/boot" "${root:?}/dev/"*
  [ -z "$(find "$root" -xdev \( -type b -o -type c -o -type p -o -type s \) -print -quit)" ] \
    || { echo "images/proxy/rootfs.sh: special files left in the image" >&2; exit 1; }
  mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"
}

case "$step" in
  extract) extract ;;
  finish) finish ;;
  *) echo "images/proxy/rootfs.sh: unknown step $step (expected extract or finish)" >&2; exit 2 ;;
esac
