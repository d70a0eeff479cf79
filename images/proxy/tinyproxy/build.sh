#!/bin/sh
# Builds tinyproxy from an upstream source archive, inside the pinned build root (scripts/image runs it with chroot,
# the archive, patches and output mounted under /build):
#
#   build.sh ARCH ARCHIVE VERSION PATCHES OUT [SANITIZE]
#
# ARCH is amd64 (the build root's own gcc) or arm64 (its cross gcc, against the build root's libc6-dev:arm64, the
# image's libc version). The archive's patches (PATCHES/*.patch, in name order) are applied, VERSION becomes the
# program's version (`tinyproxy -v`), and OUT receives the stripped `tinyproxy`. Everything that could differ
# between two builds is fixed (SANITIZE, none by default, is `asan` for AddressSanitizer with
# UndefinedBehaviorSanitizer or `tsan` for ThreadSanitizer: the same sources and patches, with debug information and
# not stripped, for the image lane's adversarial suite; they run in the build root, which has the runtimes): the path (/build/src), the locale, the time zone, SOURCE_DATE_EPOCH (set by the
# caller), the file order (autoreconf and make see the same tree), and no debug information.
set -eu
arch=${1:?amd64 or arm64} archive=${2:?source archive} version=${3:?version} patches=${4:?patch directory} out=${5:?out}
sanitize=${6:-none}
export LC_ALL=C TZ=UTC PATH=/usr/bin:/usr/sbin
umask 022

case "$arch" in
  amd64) host=x86_64-linux-gnu; arch_flags="-fcf-protection" ;;
  arm64) host=aarch64-linux-gnu; arch_flags="-mbranch-protection=standard" ;;
  *) echo "build.sh: architecture '$arch' is not amd64 or arm64" >&2; exit 2 ;;
esac

rm -rf /build/src
mkdir -p /build/src
tar -xzf "$archive" -C /build/src --strip-components=1 --no-same-owner
cd /build/src
for patch in "$patches"/*.patch; do
  [ -e "$patch" ] || continue
  patch -p1 --quiet --no-backup-if-mismatch <"$patch"
done
printf '%s\n' "$version" >VERSION

# Debian's hardening flags for the architecture (dpkg-buildflags with hardening=+all), without debug information;
# tinyproxy's configure adds -D_FORTIFY_SOURCE=2 itself.
CFLAGS="-O2 -ffile-prefix-map=/build/src=. -fstack-protector-strong -fstack-clash-protection -Wformat \
-Werror=format-security -Werror=implicit-function-declaration $arch_flags"
LDFLAGS="-Wl,-z,relro -Wl,-z,now"
case "$sanitize" in
  none) ;;
  asan) CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
-ffile-prefix-map=/build/src=. $arch_flags"; LDFLAGS="$LDFLAGS -fsanitize=address,undefined" ;;
  tsan) CFLAGS="-O1 -g -fsanitize=thread -ffile-prefix-map=/build/src=. $arch_flags"; LDFLAGS="$LDFLAGS -fsanitize=thread" ;;
  *) echo "build.sh: sanitizer '$sanitize' is not none, asan or tsan" >&2; exit 2 ;;
esac
export CFLAGS LDFLAGS
# automake's unversioned names are alternatives that no maintainer script made here (the root is only extracted).
aclocal=$(ls /usr/bin/aclocal-1.*) automake=$(ls /usr/bin/automake-1.*)
"$aclocal" -I m4macros
autoheader
"$automake" --gnu --add-missing --copy
autoconf
./configure --quiet --build=x86_64-linux-gnu --host="$host" --prefix=/usr --sysconfdir=/etc --localstatedir=/var \
  --disable-manpage_support --disable-silent-rules CC="$host-gcc" STRIP="$host-strip" >/dev/null
make -j"$(nproc)" -C src tinyproxy >/dev/null
if [ "$sanitize" = none ]; then
  "$host-strip" --strip-all -o "$out/tinyproxy" src/tinyproxy
else
  cp src/tinyproxy "$out/tinyproxy"
fi
cp COPYING "$out/COPYING"
