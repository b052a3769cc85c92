"""Checks captured requests against E2B's published specification (spec/ beside this file).

    python validate.py CAPTURE [--allow-sdk-v2] [--quiet]

CAPTURE is the JSON-lines file the stand-in writes (`--capture FILE`). Every request is checked:

- REST API requests (`target` "api") against spec/openapi.yml with openapi-core: path, method,
  parameters, security header and JSON body;
- envd HTTP requests (`/files`, `/health`) against spec/envd.yaml the same way (multipart bodies
  are rebuilt from the capture's part summaries);
- envd Connect requests (`/<package>.<Service>/<Method>`) against spec/filesystem.proto and
  spec/process.proto: the method exists, the content type and framing fit its streaming kind,
  and every request message's field names and value types fit the message (proto3 JSON).

Each violation is printed; so is every request to a path or method the spec does not have.
The Python SDK's own `/v2` create and connect routes are not in the spec: they count as
unspecified unless `--allow-sdk-v2` is given (the Rust driver must not send them). Exits 1 when
anything was a violation or unspecified, 2 on a usage error, 0 otherwise.
"""

import argparse
import base64
import json
import re
import sys
from pathlib import Path
from urllib.parse import parse_qsl

from openapi_core import OpenAPI
from openapi_core.datatypes import RequestParameters
from openapi_core.templating.paths.exceptions import PathError
from werkzeug.datastructures import Headers, ImmutableMultiDict

SPEC = Path(__file__).resolve().parent / "spec"
API_HOST = "https://api.e2b.app"
ENVD_HOST = "http://localhost"
SDK_V2 = [
    ("POST", re.compile(r"^/v2/sandboxes$")),
    ("POST", re.compile(r"^/v2/sandboxes/[^/]+/connect$")),
]
CONNECT_PATH = re.compile(r"^/([a-z_][\w]*\.[A-Z]\w*)/(\w+)$")


# --- Requests for openapi-core -------------------------------------------------------------


class CapturedRequest:
    """One captured request in the shape openapi-core validates (its Request protocol)."""

    def __init__(self, host_url, entry, body):
        self.host_url = host_url
        self.path = entry["path"]
        self.method = entry["method"].lower()
        self.content_type = (entry.get("content_type") or "").lower()
        self.body = body
        headers = dict(entry.get("headers") or {})
        if entry.get("content_type"):
            headers["content-type"] = entry["content_type"]
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(parse_qsl(entry.get("query") or "", keep_blank_values=True)),
            header=Headers(headers),
            cookie=ImmutableMultiDict(),
        )

    @property
    def full_url_pattern(self):
        return self.host_url + self.path


def rebuilt_body(entry):
    """The request body as bytes, rebuilt from what the capture kept of it."""
    kind, body = entry.get("body_kind"), entry.get("body")
    if kind == "empty":
        return None
    if kind == "json":
        return json.dumps(body).encode()
    if kind == "invalid_json":
        return str(body).encode()
    if kind == "multipart":
        boundary = re.search(r"boundary=\"?([^\";]+)", entry["content_type"]).group(1)
        chunks = []
        for part in body["parts"]:
            disposition = f'form-data; name="{part["name"]}"'
            if part.get("filename") is not None:
                disposition += f'; filename="{part["filename"]}"'
            head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
            if part.get("content_type"):
                head += f"Content-Type: {part['content_type']}\r\n"
            chunks.append(head.encode() + b"\r\n" + b"x" * part["size"] + b"\r\n")
        return b"".join(chunks) + f"--{boundary}--\r\n".encode()
    return b"x" * int((body or {}).get("size", 0))


def openapi_problems(spec, host_url, entry):
    """(kind, message) problems of a request against an OpenAPI document."""
    try:
        spec.validate_request(CapturedRequest(host_url, entry, rebuilt_body(entry)))
    except PathError as e:
        return [("UNSPECIFIED", f"not in the spec ({type(e).__name__}: {e})")]
    except Exception as e:  # noqa: BLE001 - openapi-core raises one class per failed check
        return [("VIOLATION", describe_openapi_error(e))]
    return []


def describe_openapi_error(error):
    details = []
    cause = error
    while cause is not None:
        for schema_error in getattr(cause, "schema_errors", None) or []:
            where = "/".join(str(p) for p in schema_error.absolute_path)
            details.append(f"{where or '<body>'}: {schema_error.message}")
        cause = cause.__cause__
    text = f"{type(error).__name__}: {error}"
    return text + ("" if not details else " [" + "; ".join(details) + "]")


# --- Protos ----------------------------------------------------------------------------------


TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\]|\\.)*"|[A-Za-z_][\w.]*|-?\d+|.', re.S)
SCALARS = {
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
    "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
}


class Protos:
    """The messages, enums and RPCs of .proto files: a parser for the subset envd's use."""

    def __init__(self, paths):
        self.messages, self.enums, self.rpcs = {}, {}, {}
        self.messages["google.protobuf.Timestamp"] = {"__timestamp__": True}
        for path in paths:
            tokens = [t for t in TOKEN.findall(path.read_text()) if t.strip() and not t.startswith(("//", "/*"))]
            self._file(tokens)

    def _file(self, tokens):
        package, i = "", 0
        while i < len(tokens):
            word = tokens[i]
            if word == "package":
                package, i = tokens[i + 1], i + 3
            elif word in ("syntax", "import", "option"):
                i = tokens.index(";", i) + 1
            elif word == "message":
                i = self._message(tokens, i + 1, package)
            elif word == "enum":
                i = self._enum(tokens, i + 1, package)
            elif word == "service":
                i = self._service(tokens, i + 1, package)
            else:
                raise ValueError(f"unexpected {word!r} in a proto file")

    def _message(self, tokens, i, scope):
        name = f"{scope}.{tokens[i]}" if scope else tokens[i]
        fields, i, oneof, depth = {}, i + 2, None, 0
        self.messages[name] = fields
        while True:
            word = tokens[i]
            if word == "}":
                if oneof is not None and depth == 1:
                    oneof, depth, i = None, 0, i + 1
                    continue
                return i + 1
            if word == "message":
                i = self._message(tokens, i + 1, name)
            elif word == "enum":
                i = self._enum(tokens, i + 1, name)
            elif word == "oneof":
                oneof, depth, i = tokens[i + 1], 1, i + 3
            elif word in ("reserved", "option"):
                i = tokens.index(";", i) + 1
            else:
                i = self._field(tokens, i, name, fields, oneof)

    def _field(self, tokens, i, scope, fields, oneof):
        label = None
        if tokens[i] in ("repeated", "optional"):
            label, i = tokens[i], i + 1
        if tokens[i] == "map":
            key, value, i = tokens[i + 2], tokens[i + 4], i + 6
            kind = ("map", key, value)
        else:
            kind, i = tokens[i], i + 1
        field_name = tokens[i]
        field = {"name": field_name, "type": kind, "label": label, "oneof": oneof, "scope": scope}
        fields[field_name] = field
        fields[camel(field_name)] = field
        return tokens.index(";", i) + 1

    def _enum(self, tokens, i, scope):
        name = f"{scope}.{tokens[i]}" if scope else tokens[i]
        values, i = {}, i + 2
        while tokens[i] != "}":
            if tokens[i] in ("option", "reserved"):
                i = tokens.index(";", i) + 1
                continue
            values[tokens[i]] = int(tokens[i + 2])
            i = tokens.index(";", i) + 1
        self.enums[name] = values
        return i + 1

    def _service(self, tokens, i, package):
        service, i = f"{package}.{tokens[i]}", i + 2
        while tokens[i] != "}":
            if tokens[i] != "rpc":
                i = tokens.index(";", i) + 1
                continue
            method, i = tokens[i + 1], i + 3
            client_stream = tokens[i] == "stream"
            request, i = (tokens[i + 1], i + 3) if client_stream else (tokens[i], i + 2)
            i += 2  # "returns" "("
            server_stream = tokens[i] == "stream"
            i += 3 if server_stream else 2
            if tokens[i] == "{":
                while tokens[i] != "}":
                    i += 1
            i += 1
            self.rpcs[(service, method)] = {
                "request": (request, package),
                "client_stream": client_stream,
                "server_stream": server_stream,
            }
        return i + 1

    def resolve(self, name, scope):
        """The full name of a type referenced from `scope`, searching outwards."""
        while True:
            candidate = f"{scope}.{name}" if scope else name
            if candidate in self.messages or candidate in self.enums:
                return candidate
            if not scope:
                return name
            scope = scope.rpartition(".")[0]

    def check(self, type_name, value, where):
        """Problems of a JSON value against a message type, in proto3's JSON mapping."""
        fields = self.messages[type_name]
        if fields.get("__timestamp__"):
            return [] if isinstance(value, str) and TIMESTAMP.match(value) else [f"{where}: not an RFC 3339 timestamp"]
        if not isinstance(value, dict):
            return [f"{where}: expected an object for {type_name}, got {type(value).__name__}"]
        problems, oneofs = [], {}
        for key, item in value.items():
            field = fields.get(key)
            if field is None:
                problems.append(f"{where}.{key}: no such field in {type_name}")
                continue
            if item is None:
                continue
            if field["oneof"]:
                if field["oneof"] in oneofs:
                    problems.append(f"{where}: more than one member of oneof {field['oneof']} ({oneofs[field['oneof']]}, {key})")
                oneofs[field["oneof"]] = key
            problems += self._field_value(field, item, f"{where}.{key}")
        return problems

    def _field_value(self, field, value, where):
        kind = field["type"]
        if isinstance(kind, tuple):
            if not isinstance(value, dict):
                return [f"{where}: expected an object (map)"]
            problems = []
            for key, item in value.items():
                problems += self._single(kind[1], key, f"{where}[{key}] key", field["scope"], as_key=True)
                problems += self._single(kind[2], item, f"{where}[{key}]", field["scope"])
            return problems
        if field["label"] == "repeated":
            if not isinstance(value, list):
                return [f"{where}: expected an array"]
            return [p for n, item in enumerate(value) for p in self._single(kind, item, f"{where}[{n}]", field["scope"])]
        return self._single(kind, value, where, field["scope"])

    def _single(self, kind, value, where, scope, as_key=False):
        if kind in SCALARS:
            return [] if scalar_ok(kind, value, as_key) else [f"{where}: {value!r} is not a valid {kind}"]
        full = self.resolve(kind, scope)
        if full in self.enums:
            names = self.enums[full]
            ok = (isinstance(value, str) and value in names) or (isinstance(value, int) and not isinstance(value, bool))
            return [] if ok else [f"{where}: {value!r} is not a value of {full}"]
        if full in self.messages:
            return self.check(full, value, where)
        return [f"{where}: unknown type {kind}"]


TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")
INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1), "sint32": (-(2**31), 2**31 - 1), "sfixed32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1), "fixed32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1), "sint64": (-(2**63), 2**63 - 1), "sfixed64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1), "fixed64": (0, 2**64 - 1),
}


def scalar_ok(kind, value, as_key=False):
    if kind == "string":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool) or (as_key and value in ("true", "false"))
    if kind == "bytes":
        if not isinstance(value, str):
            return False
        try:
            base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_" if "-" in value or "_" in value else None, validate=True)
        except ValueError:
            return False
        return True
    if kind in ("float", "double"):
        return (isinstance(value, (int, float)) and not isinstance(value, bool)) or value in ("NaN", "Infinity", "-Infinity")
    low, high = INT_RANGES[kind]
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        value = int(value)
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def connect_problems(protos, entry):
    """(kind, message) problems of a Connect request against the protos."""
    match = CONNECT_PATH.match(entry["path"])
    rpc = match and protos.rpcs.get((match.group(1), match.group(2)))
    if entry["method"] != "POST" or not rpc:
        return [("UNSPECIFIED", "no such RPC in the protos")]
    rpc = dict(rpc, request=protos.resolve(*rpc["request"]))
    streaming = rpc["client_stream"] or rpc["server_stream"]
    media = (entry.get("content_type") or "").split(";")[0].strip().lower()
    wanted = "application/connect+json" if streaming else "application/json"
    if media != wanted:
        return [("VIOLATION", f"content type {media or 'none'!r}, the RPC needs {wanted!r}")]
    if streaming:
        if entry.get("body_kind") != "connect_envelopes":
            return [("VIOLATION", "the body is not Connect envelopes")]
        envelopes = entry["body"]
        if not envelopes or (not rpc["client_stream"] and len(envelopes) != 1):
            return [("VIOLATION", f"{len(envelopes)} request messages for a server-streaming RPC (needs 1)")]
        problems = []
        for n, envelope in enumerate(envelopes):
            if envelope.get("flags") != 0:
                problems.append(("VIOLATION", f"envelope {n}: flags {envelope.get('flags')!r} (want 0: no compression, no end-stream)"))
                continue
            problems += [("VIOLATION", p) for p in protos.check(rpc["request"], envelope["message"], "message")]
        return problems
    if entry.get("body_kind") not in ("json", "empty"):
        return [("VIOLATION", f"the body is {entry.get('body_kind')}, not a JSON message")]
    message = entry["body"] if entry.get("body_kind") == "json" else {}
    return [("VIOLATION", p) for p in protos.check(rpc["request"], message, "message")]


# --- Main ------------------------------------------------------------------------------------


def problems_of(entry, specs, allow_sdk_v2):
    api, envd, protos = specs
    if entry.get("target") == "api":
        for method, pattern in SDK_V2:
            if entry["method"] == method and pattern.match(entry["path"]):
                if allow_sdk_v2:
                    return [("ALLOWED", "the Python SDK's unpublished /v2 route (--allow-sdk-v2)")]
                return [("UNSPECIFIED", "the Python SDK's unpublished /v2 route; the spec has no such operation")]
        return openapi_problems(api, API_HOST, entry)
    if CONNECT_PATH.match(entry["path"]):
        return connect_problems(protos, entry)
    return openapi_problems(envd, ENVD_HOST, entry)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--allow-sdk-v2", action="store_true", help="accept the Python SDK's /v2 create and connect")
    parser.add_argument("--quiet", action="store_true", help="print only problems and the summary")
    args = parser.parse_args(argv)
    specs = (
        OpenAPI.from_file_path(str(SPEC / "openapi.yml")),
        OpenAPI.from_file_path(str(SPEC / "envd.yaml")),
        Protos([SPEC / "filesystem.proto", SPEC / "process.proto"]),
    )
    counts = {"ok": 0, "VIOLATION": 0, "UNSPECIFIED": 0, "ALLOWED": 0}
    lines = [line for line in args.capture.read_text().splitlines() if line.strip()]
    for line in lines:
        entry = json.loads(line)
        label = f"#{entry.get('seq', '?')} {entry['method']} {entry['path']}"
        problems = problems_of(entry, specs, args.allow_sdk_v2)
        if not problems:
            counts["ok"] += 1
            if not args.quiet:
                print(f"ok          {label}")
        for kind, message in problems:
            counts[kind] += 1
            if kind != "ALLOWED" or not args.quiet:
                print(f"{kind:<11} {label}: {message}")
    print(
        f"checked {len(lines)} requests: {counts['ok']} ok, {counts['VIOLATION']} violations, "
        f"{counts['UNSPECIFIED']} unspecified, {counts['ALLOWED']} allowed"
    )
    return 1 if counts["VIOLATION"] or counts["UNSPECIFIED"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
