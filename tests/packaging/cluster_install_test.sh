#!/usr/bin/env bash
# A fresh prefix install as a cluster uses it: `module use PREFIX/share/modulefiles && module load
# gpurun` under Debian's Lmod puts gpurun, its man pages and its CMake package on the paths (and
# `module unload` takes them off); the installed programs need no LD_LIBRARY_PATH; both man pages
# render with no groff warning and name every option, subcommand and environment variable the
# programs' help and tables do; the completion scripts load in bash, complete options, choices
# and subcommands, and load on demand under the module; the systemd units name the installed gpuq.
#   cluster_install_test.sh BUILD_DIR VERSION
# Skips (77) without Debian's lmod, man-db or bash-completion (scripts/install-deps.sh has them).
set -euo pipefail
build=$1; version=$2
lmod_init=/usr/share/lmod/lmod/init/bash
bashcomp=/usr/share/bash-completion/bash_completion
for need in "$lmod_init" "$bashcomp" /usr/bin/man /usr/bin/groff; do
  [[ -r $need ]] || { echo "SKIP: $need missing (scripts/install-deps.sh installs lmod, bash-completion, man-db)"; exit 77; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
p=$tmp/prefix
cmake --install "$build" --prefix "$p" >"$tmp/install.log" || { cat "$tmp/install.log"; echo "FAIL: cmake --install"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }

for f in "share/modulefiles/gpurun/$version.lua" share/man/man1/gpurun.1 share/man/man1/gpuq.1 \
  share/bash-completion/completions/gpurun share/bash-completion/completions/gpuq \
  lib/systemd/system/gpuq.service lib/systemd/system/gpuq-web.service; do
  [[ -f $p/$f ]] || { find "$p" -maxdepth 4 | head -40; fail "$f not installed"; }
done
grep -qx "ExecStart=$p/bin/gpuq daemon --state-dir /var/lib/gpuq --socket /run/gpuq.sock" \
  "$p/lib/systemd/system/gpuq.service" || fail "gpuq.service does not start $p/bin/gpuq"
grep -q "^ExecStart=$p/bin/gpuq web " "$p/lib/systemd/system/gpuq-web.service" ||
  fail "gpuq-web.service does not start $p/bin/gpuq"
# What the daemon creates is private (issue 26): the unit sets the umask too.
grep -qx "UMask=0077" "$p/lib/systemd/system/gpuq.service" || fail "gpuq.service sets no UMask=0077"
# One source of truth: the units the README tells admins to use are the ones the install writes.
src=$(cd "$(dirname "$0")/../.." && pwd)
[[ ! -e $src/scripts/gpuq.service && ! -e $src/scripts/gpuq-web.service ]] ||
  fail "a second copy of the units in scripts/"
grep -q "lib/systemd/system/gpuq.service" "$src/launcher/queue/README.md" ||
  fail "the queue README does not point at the installed unit"
if grep -n "scripts/gpuq[-a-z]*\.service" "$src/README.md" "$src/launcher/queue/README.md"; then
  fail "a README names a unit file that the install does not write"
fi

# No LD_LIBRARY_PATH in the module because none is needed: every library resolves without it.
for b in "$p"/bin/*; do
  missing=$(env -u LD_LIBRARY_PATH ldd "$b" | grep 'not found' || true)
  [[ -z $missing ]] || fail "$b needs libraries that only LD_LIBRARY_PATH would find: $missing"
done
echo "ok: installed files in place; programs run without LD_LIBRARY_PATH"

# Lmod, in a clean shell whose PATH has no gpurun.
out=$(env -i HOME="$tmp" PATH=/usr/bin:/bin LANG=C.UTF-8 bash --norc --noprofile -c "
  set -e
  source $lmod_init
  module use $p/share/modulefiles
  module load gpurun
  echo \"which=\$(command -v gpurun)\"
  echo \"version=\$(gpurun --version)\"
  echo \"gpuq=\$(command -v gpuq)\"
  echo \"man=\$(man -w gpurun)\"
  echo \"manls=\$(man -w man)\"
  echo \"cmake=\$CMAKE_PREFIX_PATH\"
  echo \"ld=\${LD_LIBRARY_PATH-unset}\"
  source $bashcomp
  __load_completion gpurun && echo \"completion=\$(complete -p gpurun)\"
  module unload gpurun
  echo \"after=\$(command -v gpurun || echo none)\"
" 2>&1) || { echo "$out"; fail "module load gpurun under Lmod"; }
want=("which=$p/bin/gpurun" "version=gpurun $version" "gpuq=$p/bin/gpuq"
  "man=$p/share/man/man1/gpurun.1" "manls=/usr/share/man/man1/" "cmake=$p" "ld=unset" "completion=complete -F _gpurun gpurun"
  "after=none")
for w in "${want[@]}"; do
  grep -q -- "^$w" <<<"$out" || { echo "$out"; fail "under the module, wanted a line starting '$w'"; }
done
echo "ok: module load gpurun: $(grep '^version=' <<<"$out")"

# Man pages: no groff warning at 80 columns, and everything the programs' help names.
for page in gpurun gpuq; do
  f=$p/share/man/man1/$page.1
  warn=$(MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
  [[ -z $warn ]] || fail "man --warnings -l $page.1: $warn"
  warn=$(groff -ww -z -man -Tutf8 "$f" 2>&1)
  [[ -z $warn ]] || fail "groff -ww $page.1: $warn"
  LC_ALL=C MANWIDTH=200 man -l "$f" 2>/dev/null | col -b >"$tmp/$page.txt"
  for opt in $("$p/bin/$page" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
    grep -qF -- "$opt" "$tmp/$page.txt" || fail "$page(1) does not mention $opt of '$page --help'"
  done
  for section in NAME SYNOPSIS DESCRIPTION COMMANDS ENVIRONMENT "EXIT STATUS" EXAMPLES "SEE ALSO"; do
    grep -qx "$section" "$tmp/$page.txt" || fail "$page(1) has no $section section"
  done
done
for sub in info hostlist; do grep -q "^   gpurun $sub\$" "$tmp/gpurun.txt" || fail "gpurun(1) has no 'gpurun $sub'"; done
for sub in submit queue cancel show log history stats report web hold release requeue drain resume daemon; do
  grep -q "^   gpuq $sub\$" "$tmp/gpuq.txt" || fail "gpuq(1) has no 'gpuq $sub'"
done
for opt in $("$p/bin/gpuq" submit --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
  grep -qF -- "$opt" "$tmp/gpuq.txt" || fail "gpuq(1) does not mention $opt of 'gpuq submit --help'"
done
for var in SLURM_JOB_NODELIST LSB_DJOB_HOSTFILE PBS_NODEFILE MASTER_PORT GPURUN_RESTART_COUNT; do
  grep -q "^       $var\$" "$tmp/gpurun.txt" || fail "gpurun(1) ENVIRONMENT lacks $var"
done
grep -q "^       GPUQ_SOCKET\$" "$tmp/gpuq.txt" || fail "gpuq(1) ENVIRONMENT lacks GPUQ_SOCKET"
echo "ok: gpurun(1) and gpuq(1) render without warnings and cover the help"

# Completion: what Tab offers after a few prefixes.
complete_words() {  # complete_words LINE...: the words the completion offers for LINE
  env -i HOME="$tmp" PATH="$p/bin:/usr/bin:/bin" bash --norc --noprofile -c '
    source '"$bashcomp"'
    source '"$p"'/share/bash-completion/completions/gpurun
    source '"$p"'/share/bash-completion/completions/gpuq
    COMP_LINE=$1; COMP_POINT=${#COMP_LINE}
    read -ra COMP_WORDS <<<"$COMP_LINE"
    [[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    fn=$(complete -p "${COMP_WORDS[0]}" | sed -E "s/.*-F ([^ ]+) .*/\1/")
    "$fn" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}" | sort' _ "$1"
}
expect_completion() {  # expect_completion LINE WORD...: every WORD is offered
  local line=$1 got; shift
  got=$(complete_words "$line")
  for w in "$@"; do grep -qx -- "$w" <<<"$got" || fail "completing '$line' offered: $(tr '\n' ' ' <<<"$got") (wanted $w)"; done
}
expect_completion "gpurun --sch" --scheduler
expect_completion "gpurun --scheduler " slurm pbs lsf gpuq local auto
expect_completion "gpurun --launcher s" srun
expect_completion "gpurun i" info
expect_completion "gpurun hostlist " expand compress tasks
expect_completion "gpurun info --js" --json
expect_completion "gpuq s" submit show stats
expect_completion "gpuq " queue cancel hold release requeue drain resume daemon web --version
expect_completion "gpuq submit --ti" --time
# Values named only under a long option's line, or in a subcommand's usage line.
expect_completion "gpurun --cpu-bind " auto none
expect_completion "gpurun --container-runtime " auto apptainer podman pyxis
expect_completion "gpurun --container-runtime p" podman pyxis
expect_completion "gpurun info --scheduler " slurm gpuq
expect_completion "gpuq report --by " user account
expect_completion "gpuq report --since 7d --by a" account
[[ -z $(complete_words "gpurun -n 2 -- --sch") ]] || fail "options offered after '--' (the program's)"
echo "ok: bash completion of gpurun and gpuq"
