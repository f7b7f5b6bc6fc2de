#!/usr/bin/env python3
"""docs_test.py: the documentation stands alone in a clone and says what the code does.

  tests/docs/docs_test.py REPO_ROOT GPURUN

Checks:
  - no file of the repository points into the developers' folder beside it (the "shared"
    folder one level up: its design notes, style guide, notes and test data), which no clone has;
  - every relative link of every Markdown file names a file of the repository, and an anchor
    (#section) names a heading of that file, as GitHub spells it;
  - docs/DESIGN.md's tables hold exactly: the fields of `gpurun info --json` (and of its nodes and
    ranks), the fields runtime/src/train/report.cc writes, the variables gpurun sets in every rank
    (launcher/src/alloc/env_table.h, kEnvSet);
  - runtime/README.md's complete program is examples/custom_data/main.cc, byte for byte.
"""
import json
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(sys.argv[1]).resolve()
gpurun = sys.argv[2]
failures = []
# Spelled in two pieces so that this file does not name what it looks for.
SHARED = "../" + "shared"
SHARED_PATH = re.compile(r"(?<![\w./-])" + "shared" + r"/(DESIGN\.md|STYLE\.md|notes/|testdata/)")


def repo_files():
    r = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
    if r.returncode == 0 and r.stdout:
        return [root / p for p in r.stdout.decode().split("\0") if p]
    # Not a git checkout (an unpacked archive): every file but build trees and data.
    skip = {"build", "data", ".git"}
    return [p for p in root.rglob("*")
            if p.is_file() and not (set(p.relative_to(root).parts) & skip)
            and not p.relative_to(root).parts[0].startswith("build")]


def text_of(path):
    try:
        b = path.read_bytes()
    except OSError:
        return None
    return None if b"\0" in b else b.decode("utf-8", "replace")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, blanks to hyphens."""
    h = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(md_text):
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*?)\s*#*$", md_text, re.M)}


files = repo_files()
if len(files) < 50:
    failures.append(f"found only {len(files)} files under {root}: wrong root?")

# 1. Nothing points into the folder beside the repository.
for f in files:
    text = text_of(f)
    if text is None:
        continue
    for n, line in enumerate(text.splitlines(), 1):
        if SHARED in line or SHARED_PATH.search(line):
            failures.append(f"{f.relative_to(root)}:{n}: points outside the repository: "
                            f"{line.strip()[:120]}")

# 2. Relative links and their anchors.
for f in files:
    if f.suffix != ".md":
        continue
    text = text_of(f) or ""
    body = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    for m in re.finditer(r"\]\(([^)\s]+)\)", body):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (f.parent / path).resolve() if path else f
        where = f"{f.relative_to(root)}: link ({target})"
        if root not in dest.parents and dest != root:
            failures.append(f"{where} leaves the repository")
            continue
        if not dest.exists():
            failures.append(f"{where}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            failures.append(f"{where}: no heading '#{anchor}' in {dest.relative_to(root)}")

# 3. docs/DESIGN.md's tables against the code.
design = (root / "docs/DESIGN.md").read_text()


def section(title):
    start = design.index(title)
    nxt = design.find("\n## ", start + 1)
    return design[start:nxt if nxt > 0 else len(design)]


def first_column_names(text):
    names = set()
    for row in re.findall(r"^\| (.*?) \|", text, re.M):
        names |= set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", row))
    return names


def compare(what, documented, actual):
    if documented != actual:
        failures.append(f"docs/DESIGN.md, {what}: documented but not in the code: "
                        f"{sorted(documented - actual)}; in the code but not documented: "
                        f"{sorted(actual - documented)}")


info_text = subprocess.run([gpurun, "info", "--json", "-n", "2"], capture_output=True,
                           text=True, timeout=60)
if info_text.returncode != 0:
    failures.append(f"gpurun info --json -n 2: status {info_text.returncode}: {info_text.stderr}")
else:
    info = json.loads(info_text.stdout)
    sec = section("## `gpurun info --json`")
    compare("gpurun info --json fields", first_column_names(sec), set(info))
    for field in ("nodes", "ranks"):
        row = re.search(rf"^\| `{field}` \|.*?\{{(.*?)\}}", sec, re.M)
        documented = set(re.findall(r'"(\w+)"', row.group(1))) if row else set()
        compare(f"the fields of {field}[]", documented, set(info[field][0]))

report_src = (root / "runtime/src/train/report.cc").read_text()
compare("the run report's fields", first_column_names(section("**The run report**")),
        set(re.findall(r'\bj\["(\w+)"\]\s*=', report_src)))

env_table = (root / "launcher/src/alloc/env_table.h").read_text()
k_set = env_table[env_table.index("kEnvSet[]"):]
k_set = k_set[:k_set.index("};")]
compare("the rank environment", first_column_names(section("## The rank environment")),
        set(re.findall(r'\{"([A-Z][A-Z0-9_]*)",', k_set)))

# 4. The runtime's complete program is the example's file.
readme = (root / "runtime/README.md").read_text()
m = re.search(r"<!-- begin examples/custom_data/main.cc -->\n```cpp\n(.*?)```\n"
              r"<!-- end examples/custom_data/main.cc -->", readme, re.S)
if not m:
    failures.append("runtime/README.md: no block between the examples/custom_data/main.cc markers")
elif m.group(1) != (root / "examples/custom_data/main.cc").read_text():
    failures.append("runtime/README.md: the complete program differs from "
                    "examples/custom_data/main.cc (copy the file into the block)")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"ok: {len(files)} files point nowhere outside the repository; links, anchors, "
      "DESIGN.md's tables and runtime/README.md's program agree with the code")
