"""Old spellings of command-line options, kept for one release: each is read as its new name, with a one-line
note on stderr that names the new one. The commands share one convention (`--model` a checkpoint, `--out` what
the command writes, `--method` the SD method, `--prompts` a file), and these tables say what was renamed."""
from __future__ import annotations

import sys
from collections.abc import Mapping


def rename(argv: list[str], renamed: Mapping[str, str], prog: str) -> list[str]:
    """`argv` with each old option of `renamed` (old -> new) written as the new one: `--old V`, `--old=V`, and for
    a `key=value` command `old=V` too (give both spellings in `renamed`). One note per old spelling used."""
    out, noted = [], set()
    for word in argv:
        key, sep, value = word.partition("=")
        new = renamed.get(key)
        if new is None or (not sep and not key.startswith("--")):
            out.append(word)
            continue
        if key not in noted:
            noted.add(key)
            old_form, new_form = (key, new) if key.startswith("--") else (f"{key}=", f"{new}=")
            print(f"{prog}: note: {old_form} is now {new_form}; the old spelling goes in the next release",
                  file=sys.stderr)
        out.append(f"{new}{sep}{value}")
    return out
