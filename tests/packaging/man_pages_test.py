#!/usr/bin/env python3
"""man_pages_test.py: renders a man page written by help2man (packaging/) as man does and fails on
a broken option entry:
  - a line broken with a hyphen (groff's hyphenation: "app-" / "tainer", "LO-" / "CAL_RANK");
  - an option's line that holds more than the option (help2man joins an option and its
    description when --help leaves one blank between them: "--checkpoint-signal arg (=USR1)
    signal that asks ...", "--monitor [=SECONDS(=1)] --monitor[=SECONDS] FILE.csv: every");
  - an option of --help without its own entry, or an entry whose words differ from the help's;
  - a word of an option's description that the program's sources do not hold whole (a word
    split at the end of a line, "util,m" / "em_used_mib", as Boost's help wrapping did).

  man_pages_test.py --built|--not-built PROGRAM PAGE SOURCE...
SOURCE: the C++ files the help text comes from. --not-built (the build has no help2man, so no
pages): skip, exit status 77.
Renders at 80 and 64 columns with groff -man -Tutf8, as man-db does.
"""
import re
import subprocess
import sys


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def words(text):
    return text.split()


def help_entries(help_text):
    """{option synopsis: description words} of the lines of --help that start with an option."""
    entries, cur = {}, None
    for line in help_text.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$", line)
        if m:
            cur = " ".join(words(m.group(1)))
            entries[cur] = words(m.group(2) or "")
        elif cur and re.match(r"^\s{4,}\S", line):
            entries[cur] += words(line)
        else:
            cur = None
    return entries


def source_words(paths):
    """Every whitespace-separated word of the sources' string literals, adjacent literals joined
    ("abc " "def" is one string), so a word split across two literals still counts whole."""
    found = set()
    for path in paths:
        src = open(path, encoding="utf-8").read()
        run, last_end = [], None
        for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', src):
            if last_end is not None and src[last_end:m.start()].strip():
                found.update(words("".join(run)))
                run = []
            run.append(m.group(1).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
            last_end = m.end()
        found.update(words("".join(run)))
    return found


def render(page, width):
    r = subprocess.run(["groff", "-man", "-Tutf8", f"-rLL={width}n", "-P-cbou", page],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"groff -man {page}: {r.stderr}")
    return r.stdout.splitlines()


def sections(lines):
    """{SECTION: [lines]} by the unindented headings."""
    out, cur = {}, None
    for line in lines:
        if re.match(r"^[A-Z][A-Z ]+$", line):
            cur = line
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def rendered_entries(body, indent):
    """(tag line, description words) of the entries whose tag starts with an option, at `indent`
    blanks; the description is the more-indented lines under it, up to a blank line."""
    found, i = [], 0
    while i < len(body):
        line = body[i]
        if line.startswith(" " * indent + "-") and not line.startswith(" " * (indent + 1)):
            desc, j = [], i + 1
            while j < len(body) and body[j].startswith(" " * (indent + 1)):
                desc += words(body[j])
                j += 1
            found.append((line, desc))
            i = j
        else:
            i += 1
    return found


def check(program, page, width, help_text, known):
    lines = render(page, width)
    name = page.rsplit("/", 1)[-1]
    for n, line in enumerate(lines, 1):
        if re.search(r"(\u2010|\u00ad|\w-)$", line.rstrip()):
            fail(f"{name} at {width} columns, line {n}: broken with a hyphen: '{line.strip()}'")
    want = help_entries(help_text)
    secs = sections(lines)
    seen = set()
    for sec in ("DESCRIPTION", "OPTIONS"):
        for tag, desc in rendered_entries(secs.get(sec, []), 7):
            syn = " ".join(words(tag))
            if syn not in want:
                fail(f"{name} at {width} columns: an option line that is not just an option of "
                     f"'{program} --help': '{tag.strip()}'")
            if desc != want[syn]:
                fail(f"{name} at {width} columns: the entry of {syn} says\n  {' '.join(desc)}\n"
                     f"where --help says\n  {' '.join(want[syn])}")
            seen.add(syn)
    missing = sorted(set(want) - seen)
    if missing:
        fail(f"{name} at {width} columns: no entry for {', '.join(missing)} of '{program} --help'")
    # Every option entry, the subcommands' verbatim ones too: no word that the sources lack.
    entries = [e for sec in ("DESCRIPTION", "OPTIONS") for e in rendered_entries(secs.get(sec, []), 7)]
    for line in secs.get("COMMANDS", []):
        m = re.match(r"^ {9}(-\S.*?)\s{2,}(\S.*)$", line)
        if m:
            entries.append((m.group(1), words(m.group(2))))
    for tag, desc in entries:
        for w in desc:
            if w not in known:
                fail(f"{name} at {width} columns: the entry of '{tag.strip()}' has the word '{w}', "
                     f"which no string of the sources holds whole (a word split at a line's end?)")
    return len(seen)


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("--built", "--not-built"):
        fail("usage: man_pages_test.py --built|--not-built PROGRAM PAGE SOURCE...")
    if sys.argv[1] == "--not-built":
        print("SKIP: this build writes no man pages (no help2man; scripts/install-deps.sh has it)")
        sys.exit(77)
    program, page, sources = sys.argv[2], sys.argv[3], sys.argv[4:]
    help_text = subprocess.run([program, "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    known = source_words(sources)
    for width in (80, 64):
        n = check(program, page, width, help_text, known)
    print(f"ok: {page.rsplit('/', 1)[-1]}: {n} option entries whole at 80 and 64 columns")


if __name__ == "__main__":
    main()
