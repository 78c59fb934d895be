#!/usr/bin/env python3
"""The statements of fixture.sql that insert the given rows (all rows without any), and every
statement that inserts none (BEGIN, COMMIT, the UPDATE and the DELETE).

usage: rows.py FIXTURE_SQL [NN...]

tests/registry_goldens.rs keeps the same statements (`fixture_rows`).
"""
import re
import sys

path, rows = sys.argv[1], set(sys.argv[2:])
text = "".join(l for l in open(path, encoding="utf-8") if not l.lstrip().startswith("--"))
for stmt in (s.strip() for s in text.split(";\n")):
    if not stmt:
        continue
    inserted = re.findall(r"'00000000-0000-0000-0000-0000000000(\d\d)'", stmt) if stmt.startswith("INSERT") else []
    if not rows or not inserted or set(inserted) & rows:
        print(stmt + ";")
