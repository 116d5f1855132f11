"""cYAML's builder error for a file that is not YAML (cyaml.c ``cYAML_parser_to_tree``).

libyaml and PyYAML share the scanner design and token types, so the token a parse stopped at
names the same ``yaml_token_type_t`` lnetctl prints (tests/unit/test_import_error.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

import yaml


def _token_name(tok: Any) -> str:
    """libyaml's ``yaml_token_type_t`` name of a PyYAML token (same scanner, same tokens)."""
    if isinstance(tok, yaml.DirectiveToken):
        return "YAML_VERSION_DIRECTIVE_TOKEN" if tok.name == "YAML" else "YAML_TAG_DIRECTIVE_TOKEN"
    camel = type(tok).__name__.removesuffix("Token")
    return "YAML_" + "".join(f"_{c}" if c.isupper() else c.upper() for c in camel)[1:] + "_TOKEN"


#: libyaml's yaml_token_type_t, in enum order (cyaml.c token_type_string)
_TOKEN_TYPES = ("NO", "STREAM_START", "STREAM_END", "VERSION_DIRECTIVE", "TAG_DIRECTIVE",
                "DOCUMENT_START", "DOCUMENT_END", "BLOCK_SEQUENCE_START", "BLOCK_MAPPING_START",
                "BLOCK_END", "FLOW_SEQUENCE_START", "FLOW_SEQUENCE_END", "FLOW_MAPPING_START",
                "FLOW_MAPPING_END", "BLOCK_ENTRY", "FLOW_ENTRY", "KEY", "VALUE", "ALIAS",
                "ANCHOR", "TAG", "SCALAR")


def yaml_token_error(text: str, e: yaml.YAMLError) -> str:
    """cyaml.c ``cYAML_parser_to_tree``'s descr for a file it cannot build a tree from:
    "Failed to handle token:N NAME [...]", the token the parse stopped at (NO_TOKEN when the
    scanner itself failed, as libyaml's ``yaml_parser_scan`` gives). The bracket holds the
    line/column and the problem instead of cYAML's builder state (docs/differences.md)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    name = "YAML_NO_TOKEN"
    if mark is not None and not isinstance(e, yaml.scanner.ScannerError):
        at: list[Any] = []  # the tokens starting where the parse stopped
        with contextlib.suppress(yaml.YAMLError):
            for tok in yaml.scan(text):
                if tok.start_mark.index >= mark.index:
                    if at and tok.start_mark.index != at[0].start_mark.index:
                        break
                    at.append(tok)
        named = [t for t in at if f"'{t.id}'" in (getattr(e, "problem", None) or "")]
        if at:
            name = _token_name((named or at)[0])
    num = _TOKEN_TYPES.index(name.removeprefix("YAML_").removesuffix("_TOKEN"))
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"Failed to handle token:{num} {name} [{where}{problem}]"
