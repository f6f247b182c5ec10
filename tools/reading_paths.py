"""How much a reader must read to follow one entry point: the specref functions it reaches, their files and lines.

    python3 -m tools.reading_paths                      # the three paths docs/package.md reports
    python3 -m tools.reading_paths specref.sampling:speculative_sampling --skip-tree

From the entry function, follow every call to a function or class of specref that the call names
statically (`name(...)`, `module.name(...)`, `Class.method`, calls on `self`), through the modules'
imports, and count the lines of the bodies reached (a def's body without its docstring).  Calls the code
only makes at run time through a variable (a verifier passed in, a model's next_probs) are not followed:
name them as extra entries (`--also module:function`).  What it prints is a measurement of the code as it
is, not a target.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Index:
    """Every module-level function, class and method of the specref modules reached, by qualified name."""

    def __init__(self):
        self.defs: dict[str, tuple[str, ast.AST]] = {}  # "module:qualname" -> (file, node)
        self.imports: dict[str, dict[str, str]] = {}  # module -> local name -> "module" or "module:name"
        self.loaded: set[str] = set()

    def load(self, module: str) -> None:
        if module in self.loaded or not module.startswith("specref"):
            return
        self.loaded.add(module)
        path = Path(inspect.getsourcefile(importlib.import_module(module)))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: dict[str, str] = {}
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    try:
                        importlib.import_module(full)
                        names[a.asname or a.name] = full  # a submodule
                    except ImportError:
                        names[a.asname or a.name] = f"{base}:{a.name}"
        self.imports[module] = names
        rel = str(path.relative_to(ROOT))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs[f"{module}:{node.name}"] = (rel, node)
            elif isinstance(node, ast.ClassDef):
                self.defs[f"{module}:{node.name}"] = (rel, node)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.defs[f"{module}:{node.name}.{item.name}"] = (rel, item)

    def resolve(self, module: str, dotted: list[str], cls: str | None) -> str | None:
        """The definition a call `a.b.c(...)` in `module` (inside class `cls`) names, if it is specref's."""
        self.load(module)
        head, rest = dotted[0], dotted[1:]
        if head == "self" and cls and rest:
            return self._member(f"{module}:{cls}", rest[0])
        if f"{module}:{head}" in self.defs:
            key = f"{module}:{head}"
            return self._member(key, rest[0]) if rest else key
        target = self.imports.get(module, {}).get(head)
        if target is None or not target.startswith("specref"):
            return None
        if ":" in target:  # from module import name
            mod, name = target.split(":")
            self.load(mod)
            key = f"{mod}:{name}"
            if key not in self.defs:  # re-exported: follow the module's own import
                again = self.imports.get(mod, {}).get(name)
                return self.resolve(mod, [name] + rest, None) if again else None
            return self._member(key, rest[0]) if rest else key
        mod = target  # a module
        while rest:
            self.load(mod)
            if f"{mod}:{rest[0]}" in self.defs:
                key = f"{mod}:{rest[0]}"
                return self._member(key, rest[1]) if len(rest) > 1 else key
            sub = self.imports.get(mod, {}).get(rest[0])
            if sub and ":" not in sub and sub.startswith("specref"):
                mod, rest = sub, rest[1:]
                continue
            if sub and ":" in sub:
                return self.resolve(mod, rest, None)
            return None
        return None

    def _member(self, key: str, name: str) -> str | None:
        member = f"{key}.{name}"
        return member if member in self.defs else key


def _dotted(func: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        return [func.id] + parts[::-1]
    return None


def body_lines(node: ast.AST) -> int:
    """Lines of a def's body without its docstring (a class: its methods are counted when reached)."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if isinstance(node, ast.ClassDef):
        body = [b for b in body if not isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not body:
        return 0
    return body[-1].end_lineno - body[0].lineno + 1


def walk(entries: list[str], skip: set[str]) -> dict[str, tuple[str, int]]:
    """Every definition reached from `entries` ("module:qualname"), with its file and body lines."""
    index, seen, todo = Index(), {}, list(entries)
    while todo:
        key = todo.pop()
        if key in seen or key in skip:
            continue
        module = key.split(":")[0]
        index.load(module)
        if key not in index.defs:
            raise SystemExit(f"{key}: no such function or class in {module}")
        path, node = index.defs[key]
        seen[key] = (path, body_lines(node))
        cls = key.split(":")[1].split(".")[0] if "." in key.split(":")[1] else None
        if isinstance(node, ast.ClassDef):
            cls = node.name
            todo += [f"{module}:{node.name}.{m}" for m in ("__init__", "__post_init__", "__call__")
                     if f"{module}:{node.name}.{m}" in index.defs]
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and (dotted := _dotted(sub.func)):
                target = index.resolve(module, dotted, cls)
                if target:
                    todo.append(target)
    return seen


def report(name: str, entries: list[str], skip: set[str]) -> str:
    seen = walk(entries, skip)
    files: dict[str, int] = {}
    for path, n in seen.values():
        files[path] = files.get(path, 0) + n
    lines = [f"{name}: {len(files)} files, {sum(files.values())} lines of function bodies"]
    lines += [f"  {path:<34} {n:>4}  " + ", ".join(sorted(k.split(":")[1] for k, (p, _) in seen.items() if p == path))
              for path, n in sorted(files.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


# The paths issue "one idea, one home" asks about.  The chain path follows speculative_sampling with its
# default verifier; the tree path adds the tree step the loop calls on its `tree` argument (Tree.step) and
# the tree verifier a Tree drawn i.i.d. uses (verify_tree_mss), the chain's verifier left out; the checker
# path follows conform.check of a chain verifier, with the chain part's functions the run calls on the module
# `algorithms.part(algorithm)` returns (conform/chain.py).
PATHS = {
    "Algorithm 2, a chain": (["specref.sampling:speculative_sampling", "specref.mrs:verify"], set()),
    "Algorithm 2, a tree": (["specref.sampling:speculative_sampling", "specref.trees:Tree.step",
                             "specref.mrs_tree:verify_tree_mss"], {"specref.mrs:verify"}),
    "conform.check of a verifier": (["specref.proof.conform.run:check"] + [
        f"specref.proof.conform.chain:{name}" for name in ("probe_args", "vectors_check", "edge_checks", "plan",
                                                            "certain_name", "certain_check", "check_laws", "caught",
                                                            "diagnosed", "edge_bug")], set()),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.reading_paths", description=__doc__.split("\n")[0])
    parser.add_argument("entry", nargs="?", help="module:function (default: the three paths of docs/package.md)")
    parser.add_argument("--also", action="append", default=[], help="another entry, module:function")
    parser.add_argument("--skip", action="append", default=[], help="a module:function not to follow")
    args = parser.parse_args(argv)
    paths = {args.entry: ([args.entry, *args.also], set(args.skip))} if args.entry else PATHS
    print("\n\n".join(report(name, entries, skip) for name, (entries, skip) in paths.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
