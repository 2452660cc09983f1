"""Which catalogue keys the code uses, read from the code's calls (``ast``) and from the data that builds keys.

A key reaches the catalogue through ``page.t(key)`` (a page's own section when ``key`` has no dot) or
``i18n.text(lang, key)``. For each such call the key expression is resolved as far as the code says it
exactly: a literal, either branch of ``a if c else b``, a name bound only to such values in its scope (a
loop over a literal tuple, ``range`` of literals, ``enumerate`` of them, an assignment, a dict literal's
values), and f-strings or ``+`` of those. What stays open (a hole filled from a model's presets, a run's
kinds, a parameter) is a pattern; the keys such patterns can build come from the data that builds them,
listed once in tests/test_i18n.py (``dynamic_keys``), and each listed key must match a pattern in the code.

Nothing here reads a variable's name or copies source text: renaming a variable or reformatting a line
changes nothing.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_HOLE = object()  # an open part of a key
_MAX_KEYS = 400  # a product of literals larger than this is left open


def code_files(root: Path = ROOT) -> list[Path]:
    """The files that show text: the entry page, the pages, and the package (its CLI writes text too)."""
    return [root / "app.py", *sorted((root / "pages").glob("*.py")), *sorted((root / "lensa").rglob("*.py"))]


@dataclass(frozen=True)
class Pattern:
    """A key the code builds with open parts: ``parts`` are literal text or ``None`` for a hole."""

    file: str
    line: int
    parts: tuple[str | None, ...]
    section: str | None  # the page section an undotted ``page.t`` key falls into; "*" for any; None: full key
    strings: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # its file's string constants

    def regex(self) -> re.Pattern[str]:
        body = "".join(".+" if p is None else re.escape(p) for p in self.parts)
        literal = "".join(p for p in self.parts if p is not None)
        if self.section is None or "." in literal:
            return re.compile(body)
        prefix = r"\w+\." if self.section == "*" else re.escape(self.section + ".")
        return re.compile(f"(?:{prefix})?{body}")

    def matches(self, key: str) -> bool:
        return self.regex().fullmatch(key) is not None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: " + "".join("{…}" if p is None else p for p in self.parts)


@dataclass
class Usage:
    """What the code says about catalogue keys."""

    exact: dict[str, set[str]] = field(default_factory=dict)  # full key -> where ("file:line")
    patterns: list[Pattern] = field(default_factory=list)
    named: set[str] = field(default_factory=set)  # keys a string constant names (a key handed around as data)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp)
_SCOPES += (ast.GeneratorExp, ast.ClassDef)


class _Module:
    def __init__(self, path: Path, root: Path) -> None:
        self.name = str(path.relative_to(root))
        self.tree = ast.parse(path.read_text(), filename=self.name)
        self.parent = _parents(self.tree)
        self.section = next(
            (
                n.args[0].value
                for n in ast.walk(self.tree)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id == "setup"
                and n.args
                and isinstance(n.args[0], ast.Constant)
                and isinstance(n.args[0].value, str)
            ),
            None,
        )
        self.strings = {
            n.value for n in ast.walk(self.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        self.builders: dict[str, tuple[_Module, ast.AST]] = {}  # filled by scan: every module's key builders

    def scopes(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, _SCOPES):
                yield node

    def function_of(self, node: ast.AST) -> str | None:
        return next((s.name for s in self.scopes(node) if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)), None)

    # --- resolving an expression to the exact texts it can be ---------------------------------------

    def _own_nodes(self, scope: ast.AST) -> Iterator[ast.AST]:
        """The nodes of ``scope`` outside the scopes nested in it (a comprehension's generators included)."""
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            yield node
            if not isinstance(node, _SCOPES):
                stack.extend(ast.iter_child_nodes(node))
            elif isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
                # a comprehension's first iterable belongs to the scope around it; its target does not
                stack.append(node.generators[0].iter)

    def _bindings(self, scope: ast.AST, name: str) -> list[tuple[ast.AST, ast.AST]] | None:
        """(target, value source) of every binding of ``name`` in ``scope``; None when it is bound another way."""
        found: list[tuple[ast.AST, ast.AST]] = []
        nodes = list(self._own_nodes(scope))
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and name in {
            a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)
        }:
            return None  # a parameter: the callers decide
        for node in nodes:
            if isinstance(node, ast.Assign) and any(_binds(t, name) for t in node.targets):
                if not all(isinstance(t, ast.Name) for t in node.targets):
                    return None
                found.append((node.targets[0], node.value))
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and _binds(node.target, name):
                if isinstance(node, ast.AugAssign) or node.value is None:
                    return None
                found.append((node.target, node.value))
            elif isinstance(node, ast.For | ast.comprehension) and _binds(node.target, name):
                found.append((node.target, ast.Call(ast.Name("__iter__"), [node.iter], [])))
            elif isinstance(node, ast.NamedExpr | ast.With | ast.Import | ast.ImportFrom | ast.arguments):
                if any(_binds(t, name) for t in ast.walk(node) if isinstance(t, ast.Name | ast.alias | ast.arg)):
                    return None
            elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                return None
        return found

    def texts(self, node: ast.AST, depth: int = 0) -> set[str] | None:
        """Every text ``node`` can be, when the code says exactly; None when it is open."""
        if depth > 12:
            return None
        if isinstance(node, ast.Constant):
            return {node.value} if isinstance(node.value, str) else None
        if isinstance(node, ast.IfExp):
            a, b = self.texts(node.body, depth + 1), self.texts(node.orelse, depth + 1)
            return None if a is None or b is None else a | b
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._product([node.left, node.right], depth)
        if isinstance(node, ast.JoinedStr):
            return self._product([v.value if isinstance(v, ast.FormattedValue) else v for v in node.values], depth)
        if isinstance(node, ast.FormattedValue):
            return self.texts(node.value, depth + 1)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            table = self._name(node.value, depth)
            return table
        if isinstance(node, ast.Name):
            return self._name(node, depth)
        return None

    def _product(self, nodes: list[ast.AST], depth: int) -> set[str] | None:
        parts = [self.texts(n, depth + 1) for n in nodes]
        if any(p is None for p in parts) or _size(parts) > _MAX_KEYS:
            return None
        return {"".join(combo) for combo in itertools.product(*parts)}  # type: ignore[arg-type]

    def _reaching(self, node: ast.Name) -> tuple[ast.AST, ast.AST] | None:
        """The one binding that reaches ``node`` in straight-line code: the ``for`` around it that binds the name
        (its body binding it no more), or the nearest assignment before it in the same or an enclosing block.
        None when that is not plain (then every binding in the scope counts)."""
        name, child = node.id, node
        while child in self.parent:
            parent = self.parent[child]
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                return None
            comprehension = isinstance(parent, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp)
            if comprehension and any(_binds(g.target, name) for g in parent.generators):
                return None
            if isinstance(parent, ast.For) and child in parent.body and _binds(parent.target, name):
                if any(_stores(stmt, name) for stmt in parent.body):
                    return None
                return parent.target, ast.Call(ast.Name("__iter__"), [parent.iter], [])
            for block in ("body", "orelse", "finalbody"):
                stmts = getattr(parent, block, None)
                if isinstance(stmts, list) and any(s is child for s in stmts):
                    for before in reversed(stmts[: next(i for i, s in enumerate(stmts) if s is child)]):
                        if _stores(before, name):
                            plain = isinstance(before, ast.Assign) and len(before.targets) == 1
                            return (
                                (before.targets[0], before.value) if plain and _named(before.targets[0], name) else None
                            )
            child = parent
        return None

    def _name(self, node: ast.Name, depth: int) -> set[str] | None:
        reaching = self._reaching(node)
        if reaching is not None:
            return self._bound(*reaching[:1], node.id, reaching[1], depth)
        for scope in self.scopes(node):
            bindings = self._bindings(scope, node.id)
            if bindings is None:
                return None
            if bindings:
                out: set[str] = set()
                for target, value in bindings:
                    got = self._bound(target, node.id, value, depth)
                    if got is None:
                        return None
                    out |= got
                return out
        return None

    def _bound(self, target: ast.AST, name: str, value: ast.AST, depth: int) -> set[str] | None:
        """What ``name`` in ``target`` takes from ``value`` (an assignment's value, or __iter__(a loop's iterable))."""
        looped = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "__iter__"
        if not looped:
            if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
                return self._all(value.values, depth)  # a table of keys: any of its values
            return self.texts(value, depth + 1) if isinstance(target, ast.Name) else None
        items = self._items(value.args[0])  # type: ignore[attr-defined]
        if items is None:
            return None
        if isinstance(target, ast.Name):
            return self._all(items, depth)
        if isinstance(target, ast.Tuple):
            index = next(i for i, t in enumerate(target.elts) if _binds(t, name))
            if not isinstance(target.elts[index], ast.Name):
                return None
            rows = [item.elts[index] for item in items if isinstance(item, ast.Tuple) and len(item.elts) > index]
            return self._all(rows, depth) if len(rows) == len(items) else None
        return None

    def _items(self, node: ast.AST) -> list[ast.AST] | None:
        return _items(node, self._sequence)

    def _sequence(self, node: ast.Name) -> list[ast.AST] | None:
        """The items of the tuple or list display ``node`` names, when that is its only binding."""
        reaching = self._reaching(node)
        if reaching is None:
            for scope in self.scopes(node):
                bindings = self._bindings(scope, node.id)
                if bindings is None or len(bindings) > 1:
                    return None
                if bindings:
                    reaching = bindings[0]
                    break
        if reaching is None or not isinstance(reaching[0], ast.Name):
            return None
        value = reaching[1]
        return list(value.elts) if isinstance(value, ast.Tuple | ast.List) else None

    def _all(self, nodes: Iterable[ast.AST | None], depth: int) -> set[str] | None:
        out: set[str] = set()
        for n in nodes:
            got = None if n is None else self.texts(n, depth + 1)
            if got is None:
                return None
            out |= got
        return out

    def parts(self, node: ast.AST) -> tuple[str | None, ...]:
        """The literal parts and holes of a key expression that is open somewhere."""
        exact = self.texts(node)
        if exact is not None and len(exact) == 1:
            return (next(iter(exact)),)
        if isinstance(node, ast.JoinedStr):
            return tuple(
                p for v in node.values for p in self.parts(v.value if isinstance(v, ast.FormattedValue) else v)
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return (*self.parts(node.left), *self.parts(node.right))
        if isinstance(node, ast.Call) and (called := _called(node)) in self.builders:
            module, returned = self.builders[called]
            return module.parts(returned)
        return (None,)

    def key_builders(self) -> dict[str, ast.AST]:
        """Top-level functions named ``*_key`` whose body is one ``return``: the key each one builds, read from
        that expression (its parameters are holes), wherever a text lookup calls it."""
        out: dict[str, ast.AST] = {}
        for fn in self.tree.body:
            if isinstance(fn, ast.FunctionDef) and fn.name.endswith("_key"):
                body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
                if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                    out[fn.name] = body[0].value
        return out


def _binds(target: ast.AST, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, ast.alias):
        return (target.asname or target.name.split(".")[0]) == name
    if isinstance(target, ast.arg):
        return target.arg == name
    if isinstance(target, ast.Tuple | ast.List):
        return any(_binds(t, name) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _binds(target.value, name)
    return False


def _named(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _stores(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node))


def _items(node: ast.AST, named: Callable[[ast.Name], list[ast.AST] | None] = lambda _: None) -> list[ast.AST] | None:
    """The literal items a loop runs over: a tuple, list or set display (or a name bound to one, through
    ``named``), ``range`` or ``enumerate`` of literals."""
    if isinstance(node, ast.Name):
        return named(node)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return list(node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords[1:]:
        args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
        if node.func.id == "range" and args and all(isinstance(a, int) for a in args):
            return [ast.Constant(str(i)) for i in range(*args)]  # type: ignore[arg-type]
        if node.func.id == "enumerate" and node.args:
            inner = _items(node.args[0], named)
            start = node.keywords[0].value if node.keywords else ast.Constant(0)
            if inner is None or not isinstance(start, ast.Constant) or not isinstance(start.value, int):
                return None
            return [ast.Tuple([ast.Constant(str(start.value + i)), x]) for i, x in enumerate(inner)]
    return None


def _size(parts: list[set[str] | None]) -> int:
    n = 1
    for p in parts:
        n *= len(p or ())
    return n


def _called(call: ast.Call) -> str | None:
    fn = call.func
    return fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None


def _key_argument(call: ast.Call) -> tuple[ast.AST, bool] | None:
    """(the key expression, whether it may be relative to the page's section) of a text lookup, else None."""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
    if name == "t" and call.args:
        return call.args[0], True
    if name == "text" and len(call.args) >= 2 and isinstance(fn, ast.Attribute) and _named(fn.value, "i18n"):
        return call.args[1], False
    return None


def scan(root: Path = ROOT, sections: Iterable[str] = ()) -> Usage:
    """The keys the code at ``root`` uses; ``sections`` are the catalogue's sections (for undotted constants)."""
    modules = [_Module(p, root) for p in code_files(root)]
    builders = {name: (m, expr) for m in modules for name, expr in m.key_builders().items()}
    for m in modules:
        m.builders = builders
    sections = set(sections)
    # which pages call each function by name: a shared helper's undotted key falls into their sections
    callers: dict[str, set[str]] = {}
    for m in modules:
        if m.section is None:
            continue
        for n in ast.walk(m.tree):
            if isinstance(n, ast.Call):
                fn = n.func
                called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
                if called:
                    callers.setdefault(called, set()).add(m.section)
    usage = Usage()
    for m in modules:
        for node in ast.walk(m.tree):
            if not isinstance(node, ast.Call) or (found := _key_argument(node)) is None:
                continue
            expr, relative = found
            where = f"{m.name}:{node.lineno}"
            texts = m.texts(expr)
            own = m.section if m.section is not None else "*"
            if texts is None:
                pattern = Pattern(m.name, node.lineno, m.parts(expr), own if relative else None, frozenset(m.strings))
                usage.patterns.append(pattern)
                continue
            for key in texts:
                if not relative or "." in key:
                    usage.exact.setdefault(key, set()).add(where)
                elif m.section is not None:
                    usage.exact.setdefault(f"{m.section}.{key}", set()).add(where)
                else:  # a shared helper's own-section key: the sections of the pages that call the helper
                    function = m.function_of(node)
                    for section in sorted(callers.get(function or "", set())):
                        usage.exact.setdefault(f"{section}.{key}", set()).add(where)
        for s in m.strings:
            usage.named.add(s)
            owners = {m.section} if m.section is not None else sections
            usage.named |= {f"{o}.{s}" for o in owners}
    return usage


def check(
    usage: Usage, catalogues: Mapping[str, Mapping[str, str]], dynamic: Mapping[str, set[str]]
) -> dict[str, list[str]]:
    """What is wrong: used keys missing from a catalogue, catalogue keys nothing uses, open patterns no data
    fills, and families of keys the data builds that no pattern in the code builds. Empty lists when all is well."""
    built = set().union(*dynamic.values()) if dynamic else set()
    problems: dict[str, list[str]] = {}
    for lang, catalogue in catalogues.items():
        missing = sorted(k for k in usage.exact if k not in catalogue)
        problems[f"missing in {lang}"] = [f"{k} ({', '.join(sorted(usage.exact[k]))})" for k in missing]
        problems[f"missing in {lang}"] += sorted(f"{k} (built from data)" for k in built if k not in catalogue)
        fills = _fills(usage, catalogue)
        used = set(usage.exact) | built | usage.named | fills
        problems[f"unused in {lang}"] = sorted(set(catalogue) - used)
    problems["patterns nothing fills"] = [
        str(p)
        for p in usage.patterns
        if not any(p.matches(k) for k in built)
        and not any(p.matches(k) for c in catalogues.values() for k in _fills(usage, c, [p]))
    ]
    # A pattern with a word in it (``source_{…}``) names a family; one of holes and marks alone (``{…}``, a
    # helper's parameter) builds whatever its callers pass, so it counts only for a family some named pattern builds.
    named = [p for p in usage.patterns if any(part and re.search(r"[A-Za-z0-9]", part) for part in p.parts)]
    problems["families no code builds"] = sorted(
        f"{name}: {key}"
        for name, keys in dynamic.items()
        for key in keys
        if not any(p.matches(k) for p in named for k in keys) or not any(p.matches(key) for p in usage.patterns)
    )
    return problems


def _fills(usage: Usage, catalogue: Mapping[str, str], patterns: list[Pattern] | None = None) -> set[str]:
    """Catalogue keys that an open pattern with one hole builds from a string constant of its own file."""
    return {
        key
        for p in (usage.patterns if patterns is None else patterns)
        if p.parts.count(None) == 1
        for key in catalogue
        if p.matches(key) and _filled_by_constant(p, key)
    }


def _filled_by_constant(p: Pattern, key: str) -> bool:
    strings = p.strings
    i = p.parts.index(None)
    before, after = "".join(p.parts[:i]), "".join(p.parts[i + 1 :])  # type: ignore[arg-type]
    for candidate in {key, key.split(".", 1)[-1]}:
        fits = candidate.startswith(before) and candidate.endswith(after) and len(candidate) > len(before + after)
        if fits and candidate[len(before) : len(candidate) - len(after)] in strings:
            return True
    return False
