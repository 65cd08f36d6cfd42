"""Load a YAML file keeping where every value came from.

Returns plain Python data plus a map from each key path to its line and column,
so that validation errors can point at `file:LINE:COL`. Refuses what a config
file never needs: duplicate keys, non-string keys, and alias expansions large
enough to be a "billion laughs" bomb."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

Path_ = tuple[str | int, ...]

# The tags a plain config file uses (what the YAML resolver gives untagged values).
_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge")}
_MINOR_VERSION = re.compile(r"^\d+\.\d+$")

# Far above any real build matrix, far below what would exhaust memory.
MAX_NODES = 20_000
# A build matrix nests four or five levels; PyYAML composes recursively.
MAX_DEPTH = 64


@dataclass
class Problem:
    line: int
    col: int
    message: str


@dataclass
class Located:
    """Parsed data, and for each key path the (line, col) of its key or item."""

    data: Any
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    # The source text of each scalar, e.g. "2.10" where YAML reads the float 2.1.
    raw: dict[Path_, str] = field(default_factory=dict)

    def position(self, path: Path_) -> tuple[int, int]:
        """The position of path, or of its nearest located ancestor."""
        for n in range(len(path), -1, -1):
            if path[:n] in self.positions:
                return self.positions[path[:n]]
        return (1, 1)


class YamlProblems(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


class _TooLarge(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that stops composing at MAX_NODES nodes or MAX_DEPTH levels:
    the node graph is built whole before _Builder sees it, so counting there
    (as for alias bombs) came only after the memory and minutes were spent."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.composed = 0
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # Each node of the text (an alias once, not its expansion: _Builder counts that).
        self.composed += 1
        self.depth += 1
        try:
            if self.composed > MAX_NODES or self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
                message = (
                    f"the document has more than {MAX_NODES} values"
                    if self.composed > MAX_NODES
                    else f"the document is nested too deeply (more than {MAX_DEPTH} levels)"
                )
                raise _TooLarge(Problem(mark.line + 1, mark.column + 1, f"{message}; refusing to read it"))
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_located(text: str) -> Located:
    """Parse text; raise YamlProblems (with positions) for anything malformed."""
    try:
        root = yaml.compose(text, Loader=_LimitedLoader)
    except _TooLarge as exc:
        raise YamlProblems([exc.problem]) from None
    except RecursionError:
        raise YamlProblems([Problem(1, 1, "the document is nested too deeply")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise YamlProblems([Problem(line, col, f"invalid YAML: {exc.problem or exc.context}")]) from None
    except yaml.YAMLError as exc:
        raise YamlProblems([Problem(1, 1, f"invalid YAML: {exc}")]) from None
    if root is None:
        raise YamlProblems([Problem(1, 1, "the file is empty; it must be a mapping")])
    if not isinstance(root, yaml.MappingNode):
        raise YamlProblems(
            [
                Problem(
                    root.start_mark.line + 1,
                    root.start_mark.column + 1,
                    f"the file must be a mapping of keys to values, not a {_kind(root)}",
                )
            ]
        )
    located = Located(data=None)
    builder = _Builder(located)
    try:
        located.data = builder.build(root, ())
    except RecursionError:
        raise YamlProblems([Problem(1, 1, "the document is nested too deeply")]) from None
    if builder.problems:
        raise YamlProblems(builder.problems)
    return located


_KINDS: dict[type[yaml.Node], str] = {yaml.SequenceNode: "list", yaml.MappingNode: "mapping"}


def _kind(node: yaml.Node) -> str:
    return _KINDS.get(type(node), "single value")


def _where(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    def __init__(self, located: Located) -> None:
        self.located = located
        self.nodes = 0
        self.problems: list[Problem] = []
        self.constructor = yaml.SafeLoader("")  # only its scalar constructors are used
        self.open_nodes: set[int] = set()  # the collections being built, to catch a cycle

    def build(self, node: yaml.Node, path: Path_) -> Any:
        if id(node) in self.open_nodes:
            raise YamlProblems([Problem(*_where(node), "an alias refers to a value that contains it (a cycle)")])
        if node.tag not in _PLAIN_TAGS:
            self.problems.append(Problem(*_where(node), f"unsupported tag {node.tag!r}"))
            return None
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise YamlProblems(
                [
                    Problem(
                        *_where(node),
                        f"the document expands to more than {MAX_NODES} values (an alias bomb?); refusing to read it",
                    )
                ]
            )
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            self.open_nodes.add(id(node))
            try:
                return self._collection(node, path)
            finally:
                self.open_nodes.discard(id(node))
        return self._scalar(node, path)

    def _collection(self, node: yaml.Node, path: Path_) -> Any:
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self.problems.append(Problem(*_where(key_node), "merge keys (<<) are not supported"))
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    self.problems.append(Problem(*_where(key_node), "keys must be plain values"))
                    continue
                key = key_node.value  # the key's text: "2.10" stays "2.10"
                child = (*path, key)
                if key in result:
                    first = self.located.positions[child]
                    self.problems.append(
                        Problem(*_where(key_node), f"duplicate key '{key}' (first defined on line {first[0]})")
                    )
                    continue
                self.located.positions[child] = _where(key_node)
                result[key] = self.build(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                child = (*path, index)
                self.located.positions[child] = _where(item)
                items.append(self.build(item, child))
            return items

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        self.located.raw[path] = node.value
        if node.tag == "tag:yaml.org,2002:float" and _MINOR_VERSION.match(node.value):
            return node.value  # a version: 2.10 must not become the float 2.1
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            reason = getattr(exc, "problem", None) or str(exc)
            self.problems.append(Problem(*_where(node), f"unreadable value {node.value!r}: {reason}"))
            return None
