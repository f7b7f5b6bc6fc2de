#!/usr/bin/env bash
# `--version` of every installed program prints "NAME VERSION (git DESCRIBE)": the project's
# version from CMake, and `git describe` of the checkout the build came from (no "(git ...)" part
# when the source tree is not a checkout).
#   version_test.sh VERSION SOURCE_DIR NAME=BINARY...
set -euo pipefail
version=$1; src=$2; shift 2
git_part=""
if command -v git >/dev/null && [[ -e $src/.git ]]; then
  git_part=" (git $(git -C "$src" describe --always --dirty))"
fi
for pair in "$@"; do
  name=${pair%%=*}; bin=${pair#*=}
  want="$name $version$git_part"
  got=$("$bin" --version) || { echo "FAIL: $bin --version exited $?"; exit 1; }
  [[ $got == "$want" ]] || { echo "FAIL: $bin --version printed '$got', want '$want' (rebuild after a commit)"; exit 1; }
  echo "ok: $got"
done
