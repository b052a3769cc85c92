"""Parity oracle for tests/integration/mcp.rs: reads a JSON array of raw CallToolResult objects (wire form)
on stdin and prints the Python SDK's flattening of each (rebuno 0.29.2 `_default_flatten` on
`mcp` 2.3.0's CallToolResult model) as a JSON array."""

import json
import sys

from mcp.types import CallToolResult
from rebuno.mcp import _default_flatten

results = [_default_flatten(CallToolResult.model_validate(raw)) for raw in json.load(sys.stdin)]
json.dump(results, sys.stdout)
