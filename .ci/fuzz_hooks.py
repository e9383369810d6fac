"""Schemathesis hooks for .ci/fuzz (loaded through SCHEMATHESIS_HOOKS).

The name pattern of the interface uses Unicode property classes that the
server's Rust `regex` knows (`\\p{ID_Start}`, `\\p{Pattern_Syntax}`, ...) and
Python's `re` does not, so schemathesis could not draw a name from it and
reported those operations as schema errors. Before the schema is used, each
such pattern is replaced by the same regex with its classes written out as
code-point ranges, from `cargo xtask spelled-out-patterns` (a JSON object,
original pattern -> spelled-out pattern, in the file named by
$FUZZ_SPELLED_OUT_PATTERNS). The translation is exact (the xtask's tests
re-parse it into the very regex the server compiles), so nothing about what is
valid changes: the fuzzer only learns to read the pattern.

One schemathesis bug is worked around here (4.32.5, the latest): when it folds
a `maxLength` into a pattern's quantifiers it re-serialises the regex, writing
each character Python's Unicode tables call unprintable as an escape. For
characters past U+FFFF that escape is Python's `\\U0001xxxx`, which ECMA-262
and its own Rust validator reject, so every character the server's newer
Unicode tables added above U+FFFF turned the operation into a schema error.
Such a character is written as itself instead, which all three read.

And one speed-up: Hypothesis builds a strategy for a character class one code
point at a time, which takes seconds for the name classes (about 290,000 code
points), and schemathesis asks for the same regex again for each operation and
phase. Built strategies are kept per (regex, flags, alphabet) and reused.
"""

import json
import os

import hypothesis.strategies._internal.regex as _hypothesis_regex
import schemathesis
import schemathesis.core.jsonschema.patterns as _patterns
from hypothesis.strategies._internal.lazy import unwrap_strategies

_serialize_literal = _patterns._serialize_literal
_serialize_literal_in_class = _patterns._serialize_literal_in_class


def _literal(charcode: int) -> str:
    return chr(charcode) if charcode > 0xFFFF else _serialize_literal(charcode)


def _literal_in_class(charcode: int) -> str:
    return chr(charcode) if charcode > 0xFFFF else _serialize_literal_in_class(charcode)


_patterns._serialize_literal = _literal
_patterns._serialize_literal_in_class = _literal_in_class

_base_regex_strategy = _hypothesis_regex.base_regex_strategy
_built: dict[tuple, object] = {}


def _memoized_base_regex_strategy(regex, *, parsed=None, alphabet):
    # The alphabet as the character intervals it allows, when it says (a text alphabet does).
    intervals = getattr(unwrap_strategies(alphabet), "intervals", None) if alphabet is not None else None
    if intervals is None and alphabet is not None:
        return _base_regex_strategy(regex, parsed=parsed, alphabet=alphabet)
    key = (type(regex.pattern), regex.pattern, regex.flags, None if intervals is None else intervals.intervals)
    if key not in _built:
        _built[key] = _base_regex_strategy(regex, parsed=parsed, alphabet=alphabet)
    return _built[key]


_hypothesis_regex.base_regex_strategy = _memoized_base_regex_strategy

with open(os.environ["FUZZ_SPELLED_OUT_PATTERNS"], encoding="utf-8") as f:
    SPELLED_OUT: dict[str, str] = json.load(f)

replaced = 0


def _replace(node: object) -> None:
    global replaced
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str) and value in SPELLED_OUT:
                node[key] = SPELLED_OUT[value]
                replaced += 1
            else:
                _replace(value)
    elif isinstance(node, list):
        for item in node:
            _replace(item)


def _send_link_bodies_as_they_are(raw_schema: dict) -> None:
    """A link's `requestBody` is the whole body (schemathesis merges it into a drawn one by default).

    The spec's one such link creates a session for a new agent; merged into a drawn session it
    mostly met drawn `agents` or users that do not exist, and stateful runs seldom got a session.
    """
    for item in raw_schema.get("paths", {}).values():
        for op in item.values():
            if not isinstance(op, dict):
                continue
            for response in op.get("responses", {}).values():
                for link in response.get("links", {}).values():
                    if "requestBody" in link:
                        link.setdefault("x-schemathesis", {})["merge_body"] = False


@schemathesis.hook
def before_load_schema(context, raw_schema: dict) -> None:
    _replace(raw_schema)
    _send_link_bodies_as_they_are(raw_schema)
    if SPELLED_OUT and not replaced:
        raise RuntimeError("none of the spelled-out patterns is in the schema: is the file stale?")
