#!/usr/bin/env bash
# The Debian package: `cpack -G DEB` over the build tree writes gpurun_VERSION_ARCH.deb whose
# Depends dpkg-shlibdeps computed; `apt-get install ./gpurun_*.deb` installs it under /usr (man
# page, completion, modulefile, the gpuq units not enabled); the installed programs run; `apt-get
# purge` removes every file it brought. Runs on a throwaway machine as root (CI); the package is
# purged on every way out, so no /usr/bin/gpurun outlives the test.
#   deb_test.sh BUILD_DIR VERSION
# Skips (77) when not root, without apt-get or dpkg-shlibdeps, or when a gpurun package or a
# /usr/bin/gpurun is already there (someone's own install, not ours to replace or remove).
set -euo pipefail
build=$1; version=$2
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "not root: installing a package needs root (CI runs as root)"
for t in apt-get dpkg dpkg-shlibdeps cpack; do command -v "$t" >/dev/null || skip "no $t"; done
if dpkg-query -W -f='${Status}' gpurun 2>/dev/null | grep -q "install ok installed"; then
  skip "a gpurun package is already installed here; not replacing it"
fi
[[ ! -e /usr/bin/gpurun && ! -e /usr/bin/gpuq ]] || skip "/usr/bin/gpurun or gpuq exists (not from a package of ours)"

tmp=$(mktemp -d)
cleanup() {
  if dpkg-query -W -f='${Status}' gpurun 2>/dev/null | grep -q "installed"; then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq gpurun >/dev/null 2>&1 || dpkg --purge gpurun >/dev/null 2>&1
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

arch=$(dpkg --print-architecture)
deb=$tmp/gpurun_${version}_${arch}.deb
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp" >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
[[ -f $deb ]] || { cat "$tmp/cpack.log"; ls "$tmp"; fail "no $(basename "$deb")"; }
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libc6 libfmt9 libboost-program-options1.74.0 libsqlite3-0; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib (shlibdeps): $depends"
done
dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' | grep -v '/$' >"$tmp/files"
for f in /usr/bin/gpurun /usr/bin/gpuq /usr/bin/mnist_cnn /usr/share/man/man1/gpurun.1 \
  /usr/share/bash-completion/completions/gpurun "/usr/share/modulefiles/gpurun/$version.lua" \
  /usr/lib/systemd/system/gpuq.service /usr/lib/python3/dist-packages/gpuq_spawner.py \
  /usr/share/gpurun/jupyterhub_config.py; do
  grep -qx -- "$f" "$tmp/files" || fail "the package lacks $f"
done
scripts=$(dpkg-deb --ctrl-tarfile "$deb" | tar -t | grep -E '(pre|post)(inst|rm)$' || true)
[[ -z $scripts ]] || fail "the package has maintainer scripts ($scripts): the units must stay disabled"
echo "ok: $(basename "$deb"), $(wc -l <"$tmp/files") files, Depends: $depends"

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" >"$tmp/apt.log" 2>&1 ||
  { cat "$tmp/apt.log"; fail "apt-get install $deb"; }
got=$(/usr/bin/gpurun --version)
[[ $got == "gpurun $version"* ]] || fail "installed gpurun --version printed '$got'"
[[ $(man -w gpurun) == /usr/share/man/man1/gpurun.1* ]] || fail "man -w gpurun: $(man -w gpurun 2>&1)"
grep -q "submit" <<<"$(/usr/bin/gpuq --help)" || fail "installed gpuq --help"  # no SIGPIPE under pipefail
grep -qx "ExecStart=/usr/bin/gpuq daemon --state-dir /var/lib/gpuq --socket /run/gpuq.sock" \
  /usr/lib/systemd/system/gpuq.service || fail "the installed unit does not start /usr/bin/gpuq"
[[ ! -e /etc/systemd/system/multi-user.target.wants/gpuq.service ]] || fail "gpuq.service was enabled"
# JupyterHub's python3 finds the spawner (and imports it where JupyterHub is installed).
/usr/bin/python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("gpuq_spawner") is None)' ||
  fail "/usr/bin/python3 does not find gpuq_spawner"
if /usr/bin/python3 -c 'import jupyterhub' 2>/dev/null; then
  /usr/bin/python3 -c 'import gpuq_spawner; gpuq_spawner.GpuqSpawner' || fail "import gpuq_spawner"
fi
echo "ok: installed: $got; man -w gpurun; gpuq --help; gpuq.service present and not enabled; gpuq_spawner importable"

DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq gpurun >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get purge gpurun"; }
left=$(while read -r f; do if [[ -e $f ]]; then echo "$f"; fi; done <"$tmp/files")
[[ -z $left ]] || fail "files left after apt-get purge: $left"
echo "ok: apt-get purge gpurun removed all $(wc -l <"$tmp/files") files"
