"""Checks MCP wire messages against the specification's JSON Schema (schema/2025-11-25.json,
from github.com/modelcontextprotocol/modelcontextprotocol at tag 2025-11-25).

Reads a JSON array on stdin whose items are {"def": "<definition>", "message": {...}}; each
message is validated against `#/$defs/<definition>` (the request and notification definitions
are whole wire messages, `jsonrpc` and `id` included). Prints `ok <definition>` or
`FAIL <definition>: <where>: <why>` per item; exits 1 when any fails.

    python validate_messages.py < messages.json

Needs PyPI's `jsonschema` (the mcp venv has it: `mcp` depends on it).
"""

import json
import pathlib
import sys

from jsonschema import Draft202012Validator

SCHEMA = pathlib.Path(__file__).with_name("schema") / "2025-11-25.json"


def validator_for(root, definition):
    if definition not in root["$defs"]:
        raise SystemExit(f"no definition {definition!r} in {SCHEMA.name}")
    # The root document with a $ref, so that every "#/$defs/..." inside resolves.
    return Draft202012Validator({**root, "$ref": f"#/$defs/{definition}"})


def main():
    root = json.loads(SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(root)
    failed = 0
    for item in json.load(sys.stdin):
        definition = item["def"]
        errors = sorted(validator_for(root, definition).iter_errors(item["message"]), key=str)
        if errors:
            failed += 1
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "<root>"
            print(f"FAIL {definition}: {where}: {first.message}")
        else:
            print(f"ok {definition}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
