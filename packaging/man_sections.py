#!/usr/bin/env python3
"""man_sections.py: the parts of a man page that help2man cannot take from `PROGRAM --help` alone,
taken from the same places the program's own help comes from, so the page cannot drift from it:

  SYNOPSIS     the usage lines of `PROGRAM --help` (help2man only reads GNU's "Usage:" form),
               and .nh: the page is never hyphenated
  COMMANDS     every subcommand that `PROGRAM --help` lists, with its own `PROGRAM CMD --help`
  ENVIRONMENT  every variable in the program's environment table (a C++ header of
               {"NAME", "use"} rows: launcher/src/alloc/env_table.h, launcher/queue/src/client/env.h)

Writes a help2man include file (sections as [NAME] followed by roff) to OUT.
  man_sections.py PROGRAM -o OUT [--env-table HEADER:ARRAY:TITLE]...
A subcommand listed in the help that does not answer --help with exit status 0 is an error, so
a rename or a removal breaks the build instead of the page.
"""
import argparse
import os
import re
import subprocess
import sys


def run_help(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"man_sections.py: '{' '.join(argv)}' exited {r.returncode}: expected its help "
                 f"with status 0\n{r.stderr}")
    return r.stdout


def subcommands(program, help_text):
    """Subcommands in the order the help lists them: lines indented by exactly two blanks that
    start with a lower-case word (after the program's name, if it is spelled out), and the
    alternatives after ' | ' on such a line ('hold ID... | release ID...')."""
    name = program.rsplit("/", 1)[-1]
    found = []
    for line in help_text.splitlines():
        m = re.match(rf"^  (?:{re.escape(name)} )?([a-z][a-z-]*)\b(.*)$", line)
        if not m:
            continue
        words = [m.group(1)] + re.findall(r" \| ([a-z][a-z-]*)\b", m.group(2))
        found += [w for w in words if w not in found and w != name]
    return found


def roff_text(text):
    """Plain text as roff lines for a no-fill block: backslashes and minus signs escaped, and no
    line that roff would read as a request."""
    out = []
    for line in text.rstrip("\n").splitlines():
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def synopsis_section(program, help_text):
    """The usage block: the text after 'usage:' and the lines indented by exactly two blanks that
    follow it up to the next blank line, each cut at its description (two or more blanks); a line that
    starts with a subcommand or an option gets the program's name in front."""
    name = program.rsplit("/", 1)[-1]
    lines = help_text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.lower().startswith("usage:")), None)
    if start is None:
        sys.exit(f"man_sections.py: no 'usage:' line in '{name} --help'")
    usage = [lines[start][len("usage:"):].strip()]
    for line in lines[start + 1:]:
        if not line.strip():
            if len(usage) > 1:
                break
            continue  # gpuq's list of commands follows its usage line after a blank one
        if re.match(r"^  \S", line):
            usage.append(line.strip())
    synopsis = []
    for u in filter(None, usage):
        u = re.split(r"\s{2,}", u)[0]
        synopsis.append(u if u.startswith(name + " ") or u == name else f"{name} {u}")
    # .nh: no hyphenation in the whole page (SYNOPSIS comes first): a variable name, an option or
    # a value list broken with a hyphen at a line's end ("LO-CAL_RANK") reads as another word.
    return "[SYNOPSIS]\n.nh\n.nf\n" + roff_text("\n".join(synopsis)) + "\n.fi\n"


def commands_section(program):
    name = program.rsplit("/", 1)[-1]
    cmds = subcommands(program, run_help([program, "--help"]))
    if not cmds:
        sys.exit(f"man_sections.py: found no subcommand in '{name} --help'")
    parts = ["[COMMANDS]"]
    for c in cmds:
        parts += [f'.SS "{name} {c}"', ".nf", roff_text(run_help([program, c, "--help"])), ".fi"]
    return "\n".join(parts) + "\n"


def env_section(tables):
    parts = ["[ENVIRONMENT]"]
    for spec in tables:
        header, array, title = spec.split(":", 2)
        src = open(header, encoding="utf-8").read()
        m = re.search(rf"\b{re.escape(array)}\[\]\s*=\s*\{{(.*?)\n\}};", src, re.S)
        if not m:
            sys.exit(f"man_sections.py: no table '{array}[] = {{...}};' in {header}")
        rows = re.findall(r'\{"([A-Z0-9_]+)",\s*"((?:[^"\\]|\\.)*)"\}', m.group(1))
        if not rows:
            sys.exit(f"man_sections.py: table {array} in {header} has no {{\"NAME\", \"use\"}} rows")
        parts.append(f'.SS "{title}"')
        for var, use in rows:
            parts += [".TP", f".B {var}", roff_text(use)]
    return "\n".join(parts) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("program")
    ap.add_argument("-o", "--output", required=True, help="the include file to write")
    ap.add_argument("--env-table", action="append", default=[],
                    help="HEADER:ARRAY:TITLE, a table of {\"NAME\", \"use\"} rows")
    a = ap.parse_args()
    text = synopsis_section(a.program, run_help([a.program, "--help"]))
    text += commands_section(a.program) + (env_section(a.env_table) if a.env_table else "")
    with open(a.output + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(a.output + ".tmp", a.output)  # a failed run leaves no half-written page source


if __name__ == "__main__":
    main()
