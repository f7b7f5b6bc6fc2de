#!/usr/bin/env bash
# output_e2e_test.sh: ranks' output never splits or glues lines, and --output-dir files are complete
# (CTest launcher_e2e_output).
#
#   tests/launcher/output_e2e_test.sh GPURUN BEAT
#
# 4 ranks each print 1000 lines of 3000 bytes as fast as they can, every line in three write()
# calls, odd lines to stderr, then "done RANK" without a newline (beat --lines). Through mpirun
# and through gpurun's own fork, with and without --tag-output: every line gpurun prints is one
# whole line of one rank, each rank's lines arrive complete and in order, and each
# DIR/rank-N.out/.err holds exactly the bytes the rank wrote.
set -euo pipefail
gpurun=$1 beat=$2
work=$(mktemp -d /tmp/gpurun-output.XXXXXX)
trap 'rm -rf "$work"' EXIT
lines=1000 bytes=3000

check() {  # check ENGINE TAG
  local engine=$1 tag=$2
  local args=(--scheduler local --launcher "$engine" -n 4 -q --output-dir "$work/out")
  [[ $tag == tag ]] && args+=(--tag-output)
  rm -rf "$work/out"
  timeout 120 "$gpurun" "${args[@]}" -- "$beat" --lines $lines --line-bytes $bytes \
    >"$work/stdout" 2>"$work/stderr" || { echo "FAIL($engine/$tag): gpurun exited $?"; exit 1; }
  python3 - "$work" $lines $bytes "$tag" <<'PY' || { echo "FAIL($engine/$tag)"; exit 1; }
import re, sys
work, n, width, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "tag"
def payload(r): return chr(ord("a") + r)
def expected(r, odd):  # what rank r wrote to stdout (odd=False) or stderr
    out = "".join(f"{r}:{i}:{payload(r) * width}\n" for i in range(n) if (i % 2 == 1) == odd)
    return out if odd else out + f"done {r}"
bad = []
for stream, odd in (("stdout", False), ("stderr", True)):
    seen = {r: [] for r in range(4)}
    for line in open(f"{work}/{stream}").read().split("\n")[:-1]:
        if tag:
            m = re.fullmatch(r"(\d+): (.*)", line)
            if not m: bad.append(f"{stream}: untagged line {line[:60]!r}"); continue
            prefix, line = int(m.group(1)), m.group(2)
        if line.startswith("done "):
            seen[int(line[5:])].append("done"); continue
        m = re.fullmatch(r"(\d+):(\d+):([a-d]+)", line)
        if not m or len(m.group(3)) != width or set(m.group(3)) != {payload(int(m.group(1)))}:
            bad.append(f"{stream}: a cut or glued line {line[:40]!r}...{line[-20:]!r} ({len(line)} bytes)"); continue
        r = int(m.group(1))
        if tag and prefix != r: bad.append(f"{stream}: rank {r}'s line tagged {prefix}")
        seen[r].append(int(m.group(2)))
    for r in range(4):
        want = [i for i in range(n) if (i % 2 == 1) == odd] + ([] if odd else ["done"])
        if seen[r] != want: bad.append(f"{stream}: rank {r} has {len(seen[r])} lines, not {len(want)} in order")
    for r in range(4):
        got = open(f"{work}/out/rank-{r}.{'err' if odd else 'out'}").read()
        if got != expected(r, odd): bad.append(f"rank-{r}.{'err' if odd else 'out'}: {len(got)} bytes, not the rank's {len(expected(r, odd))}")
for b in bad[:10]: print("  " + b)
sys.exit(1 if bad else 0)
PY
  echo "ok: $engine, ${tag:-untagged}: 4 x $lines lines of $bytes bytes, none cut or glued; files complete"
}

for engine in mpirun local; do
  check "$engine" ""
  check "$engine" tag
done

# A rank file that cannot be written (rank-1.out on a full disk: a link to /dev/full) is said at
# once and at the end; the output still reaches the terminal, the other files are complete.
rm -rf "$work/full" && mkdir -p "$work/full" && ln -s /dev/full "$work/full/rank-1.out"
rc=0
"$gpurun" -q --scheduler local -n 2 --output-dir "$work/full" -- sh -c 'echo "hello from $RANK"' \
  >"$work/full.stdout" 2>"$work/full.log" || rc=$?
[[ $rc == 0 ]] || { echo "FAIL: the job exited $rc"; cat "$work/full.log"; exit 1; }
grep -q "writing $work/full/rank-1.out failed: No space left on device" "$work/full.log" &&
  grep -q -- "--output-dir: incomplete, writing them failed: $work/full/rank-1.out" "$work/full.log" ||
  { echo "FAIL: the lost rank file was not said"; cat "$work/full.log"; exit 1; }
grep -qx "hello from 1" "$work/full.stdout" && [[ $(cat "$work/full/rank-0.out") == "hello from 0" ]] ||
  { echo "FAIL: the output did not reach the terminal and the other file"; exit 1; }
echo "ok: a rank file on a full disk is said, and its output still reaches the terminal"
