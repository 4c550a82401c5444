"""Only the record module knows where a record's fields sit (issue 13, item 1).

The record module is :mod:`pymq.protocol.record` (the layout) with its siblings
:mod:`pymq.protocol.record_batch` (the broker's batch validator, patcher and stored-record scanner)
and :mod:`pymq.protocol.record_edit` (a moved message's record from the old one's bytes).

Everything else reads and patches records through its scanner, accessors and patchers.
The check walks the source of ``pymq/`` (without importing it): no other module may import
the layout constants or structs, define a ``struct`` over a record header, or add a
record field's offset to a position. RocketMQ's own record layout (remoting/message_layout.py,
issue 30) is another format and is exempt from the offset patterns (it still may not import ours).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pymq"
RECORD_MODULES = {
    PKG / "protocol" / "record.py",
    PKG / "protocol" / "record_batch.py",
    PKG / "protocol" / "record_edit.py",
}
#: other formats, not pymq's records: RocketMQ's MessageDecoder layout (what 4.x clients read) and
#: its frame, whose ">iI" prefix (length, serialize type | header length) is no record header
OTHER_FORMATS = {PKG / "remoting" / "message_layout.py", PKG / "remoting" / "command.py"}

#: names in pymq.protocol.record that encode the byte layout
LAYOUT_NAMES = {
    "BODY_LEN_POS",
    "BODY_POS",
    "BROKER_BLOCK",
    "BROKER_BLOCK_OFFSET",
    "FIXED",
    "FIXED_SIZE",
    "HEAD",
    "MIN_RECORD_SIZE",
    "PHYSICAL_OFFSET_POS",
    "QUEUE_ID_POS",
    "QUEUE_OFFSET_POS",
    "STORE_TIMESTAMP_POS",
    "BLANK_MARKER",
    "STORED_HEAD",
    "VALIDATION_HEAD",
}
#: a field's offset (bytes 12 .. 88) added to a position, e.g. ``pos + 48`` or ``buf[p + 84 : ...]``
OFFSET_ARITHMETIC = re.compile(
    r"\b(pos|p|at|w|wpos|start|begin|offset|off|phys|base)\s*\+\s*(12|16|20|28|36|40|48|52|60|68|76|84|88)\b"
)
#: a struct over a record header: it starts with total_size, magic (">iI…")
HEADER_STRUCT = re.compile(r"""Struct\(\s*["']>iI""")


def _sources() -> list[Path]:
    return [p for p in PKG.rglob("*.py") if p not in RECORD_MODULES | OTHER_FORMATS]


def test_no_module_but_the_record_module_imports_the_layout() -> None:
    bad = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "pymq.protocol.record":
                bad += [f"{path.relative_to(PKG)}: {a.name}" for a in node.names if a.name in LAYOUT_NAMES]
            elif isinstance(node, ast.Attribute) and node.attr in LAYOUT_NAMES:
                bad.append(f"{path.relative_to(PKG)}:{node.lineno}: .{node.attr}")
    assert bad == []


def test_no_module_but_the_record_module_hard_codes_a_record_offset() -> None:
    bad = []
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        # Code only: docstrings and comments may describe other formats' offsets.
        code = ast.unparse(_without_docstrings(tree))
        for line in code.splitlines():
            if OFFSET_ARITHMETIC.search(line) or HEADER_STRUCT.search(line):
                bad.append(f"{path.relative_to(PKG)}: {line.strip()}")
    assert bad == []


def test_the_checks_catch_what_they_are_for() -> None:
    """The patterns above match the kinds of code this redesign removed."""
    assert OFFSET_ARITHMETIC.search("qid, qoff = unpack_qid_qoff(mm, pos + 48)")
    assert HEADER_STRUCT.search('_HDR = struct.Struct(">iII72xi")')
    assert OFFSET_ARITHMETIC.search("body = buf[pos + 88 : end]")
    assert not OFFSET_ARITHMETIC.search("limit = max_count * 4 + 16")


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:] or [ast.Pass()]
    return tree
