"""The shape of a tree of the collection, in figures: files and lines per folder, the longest Python functions,
``set_fact`` tasks, Jinja expressions over 200 characters, and how many near-duplicate pairs ``duplicates``
reports (where that command exists).

    python -m tools.bench.shape_metrics [TREE ...]     # default: this checkout; several trees print side by side

A Jinja expression is a YAML string of a role or playbook that holds ``{{``/``{%``, or the value of a conditional
keyword (``when``, ``failed_when``, ``changed_when``, ``until``), measured with its whitespace folded to one space.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys

import yaml

FOLDERS = ("plugins/modules", "plugins/action", "plugins/filter", "plugins/lookup", "plugins/module_utils",
           "plugins/plugin_utils", "roles", "playbooks", "tests/unit", "molecule", "tools")
CONDITIONALS = ("when", "failed_when", "changed_when", "until")
LONG = 200


def _files(tree, folder):
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(tree, folder)):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("__pycache__", "fixtures")]
        out.extend(os.path.join(dirpath, f) for f in filenames if f.endswith((".py", ".yml", ".yaml", ".j2")))
    return out


def _lines(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for dummy in handle)


def folders(tree):
    return {folder: (len(files), sum(_lines(f) for f in files))
            for folder, files in ((d, _files(tree, d)) for d in FOLDERS)}


def longest_functions(tree, top=8):
    found = []
    for path in _files(tree, "plugins"):
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8") as handle:
            module = ast.parse(handle.read())
        for node in ast.walk(module):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, "%s:%s" % (os.path.relpath(path, tree), node.name)))
    return sorted(found, reverse=True)[:top]


def _walk(value, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, key)
    elif isinstance(value, str):
        yield key, value


def yaml_figures(tree):
    set_facts, long_exprs = 0, []
    for top in ("roles", "playbooks"):
        for path in _files(tree, top):
            if not path.endswith((".yml", ".yaml")) or "/files/" in path or "/templates/" in path:
                continue
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            set_facts += len(re.findall(r"^\s*-?\s*(?:ansible\.builtin\.)?set_fact:", text, re.MULTILINE))
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            for key, value in _walk(data):
                if "{{" in value or "{%" in value or key in CONDITIONALS:
                    folded = " ".join(value.split())
                    if len(folded) > LONG:
                        long_exprs.append((len(folded), os.path.relpath(path, tree)))
    return set_facts, sorted(long_exprs, reverse=True)


def duplicate_pairs(tree):
    tool = shutil.which("duplicates")
    if not tool:
        return None
    proc = subprocess.run([tool, "--repo", tree, "--seconds", "120"], capture_output=True, text=True, timeout=300,
                          check=False)
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    match = re.search(r"(\d+) pairs?", first)
    return int(match.group(1)) if match else (0 if "no duplicates" in first else first)


def figures(tree):
    set_facts, long_exprs = yaml_figures(tree)
    per_dir = {}
    for length, path in long_exprs:
        top = "/".join(path.split("/")[:2])
        per_dir[top] = per_dir.get(top, 0) + 1
    return {"folders": folders(tree), "longest": longest_functions(tree), "set_fact": set_facts,
            "jinja_over_200": len(long_exprs), "jinja_over_200_by_place": per_dir,
            "duplicates": duplicate_pairs(tree)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("trees", nargs="*", default=[os.getcwd()])
    args = parser.parse_args(argv)
    results = [(tree, figures(tree)) for tree in args.trees]
    names = [os.path.basename(os.path.abspath(t)) for t, dummy in results]
    print("| folder | " + " | ".join("%s files / lines" % n for n in names) + " |")
    print("| --- |" + " --- |" * len(names))
    for folder in FOLDERS:
        print("| %s | " % folder + " | ".join("%d / %d" % r["folders"][folder] for dummy, r in results) + " |")
    for label, key in (("set_fact tasks", "set_fact"), ("Jinja expressions over 200 chars", "jinja_over_200"),
                       ("duplicates pairs", "duplicates")):
        print("| %s | " % label + " | ".join(str(r[key]) for dummy, r in results) + " |")
    for tree, result in results:
        print("\n%s: longest functions: %s" % (tree, ", ".join("%s (%d)" % (n, ln) for ln, n in result["longest"])))
        print("%s: Jinja over 200 by place: %s" % (tree, result["jinja_over_200_by_place"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
