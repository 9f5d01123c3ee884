"""The library against the server's OpenAPI document: every customer
operation (under /api/v1, not the operator API, health or model-server
callbacks) must be one the library calls, with every query parameter, body
field, response field and error code it documents known to the library."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple
from urllib.parse import urlsplit

import pytest

import vidgate
from vidgate import types
from vidgate._operations import OPERATIONS, Operation

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
#: Tags of operations that are not the customer API.
NON_CUSTOMER_TAGS = {"admin", "operator", "operators", "internal", "health", "cog", "callbacks"}
#: Tags of other vendors' APIs the server speaks for their own clients
#: (docs/dialects.md): OpenAI's at /v1, OpenRouter's inside /api/v1. Their
#: shapes are those vendors', not this library's.
DIALECT_TAGS = {"openai-videos", "openrouter-videos"}
CUSTOMER_SECURITY = {"bearer"}
#: Probes for load balancers and monitoring, wherever they are documented.
PROBE_PATH = re.compile(r"/(health|healthz|ready|readyz|live|livez|metrics)$")

#: The library's record for each documented object: component schemas by
#: name, inline objects as Parent.field (Parent.field[] for array items).
RECORDS: Dict[str, Any] = {
    "Generation": types.Generation,
    "Generation.urls": types.GenerationUrls,
    "GenerationOutput": types.GenerationOutput,
    "GenerationError": types.GenerationError,
    "Cost": types.Cost,
    "GenerationList": types.GenerationPage,
    "Account": types.Account,
    "Account.limits": types.AccountLimits,
    "Quote": types.Quote,
    "Model": types.Model,
    "WebhookDelivery": types.WebhookDelivery,
    "WebhookDelivery.attempts[]": types.WebhookAttempt,
    "WebhookSecret": types.WebhookSecret,
    "CheckoutSession": types.CheckoutSession,
    "Upload": types.Upload,
    "Upload.media": types.UploadMedia,
    "DirectUpload": types.DirectUpload,
}
#: Lists the library returns as Python lists: only their envelope fields.
LIST_ENVELOPES = {"ModelList": {"object", "data"}, "WebhookDeliveryList": {"object", "data"}}


def customer_operations(document: Dict[str, Any]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    servers = document.get("servers") or [{"url": ""}]
    for path, item in document["paths"].items():
        # A path's own servers replace the document's (OpenAPI 3.1, 4.8.9).
        path_servers = item.get("servers") or servers
        prefix = urlsplit(path_servers[0]["url"]).path.rstrip("/")
        full = path if path.startswith("/api/") else prefix + path
        if not full.startswith("/api/v1/"):
            continue
        relative = re.sub(r"\{[^}]*\}", "{}", full[len("/api/v1") :])
        if PROBE_PATH.search(relative):
            continue
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            if (NON_CUSTOMER_TAGS | DIALECT_TAGS) & set(operation.get("tags", [])):
                continue
            security = operation.get("security", document.get("security", []))
            schemes = {name for requirement in security for name in requirement}
            if schemes - CUSTOMER_SECURITY:
                continue
            yield f"{method.upper()} {relative}", operation


def known_operation(key: str) -> Optional[Tuple[str, Operation]]:
    if key in OPERATIONS:
        return key, OPERATIONS[key]
    for pattern, operation in OPERATIONS.items():
        if pattern.endswith("*") and key.startswith(pattern[:-1]) and "{}" not in key:
            return pattern, operation
    return None


def resolve(document: Dict[str, Any], schema: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
    reference = schema.get("$ref")
    if reference is None:
        return None, schema
    name = reference.rsplit("/", 1)[1]
    resolved: Dict[str, Any] = document["components"]["schemas"][name]
    return name, resolved


def objects_in(
    document: Dict[str, Any], schema: Dict[str, Any], name: Optional[str], found: Dict[str, Set[str]]
) -> None:
    """Every object schema with properties reachable from `schema`, by the
    names RECORDS uses, with its property names."""
    reference_name, schema = resolve(document, schema)
    name = reference_name or name
    for variant in schema.get("oneOf", []) + schema.get("anyOf", []) + schema.get("allOf", []):
        objects_in(document, variant, name, found)
    if "properties" in schema and name is not None:
        if name in found:
            return
        found[name] = set(schema["properties"])
        for field, property_schema in schema["properties"].items():
            objects_in(document, property_schema, f"{name}.{field}", found)
    if "items" in schema and isinstance(schema["items"], dict):
        objects_in(document, schema["items"], f"{name}[]", found)


def operation_problems(document: Dict[str, Any]) -> List[str]:
    """Customer operations the library does not call, and library
    operations gone from the document."""
    keys = [key for key, _ in customer_operations(document)]
    problems = [f"{key}: an operation the library does not know" for key in keys
                if known_operation(key) is None]
    covered = {match[0] for match in map(known_operation, keys) if match is not None}
    problems += [f"{key}: gone from the API" for key in sorted(set(OPERATIONS) - covered)]
    return problems


def parameter_problems(document: Dict[str, Any]) -> List[str]:
    problems: List[str] = []
    for key, operation in customer_operations(document):
        match = known_operation(key)
        if match is None:
            continue
        known = match[1]
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "query" and parameter["name"] not in known.query:
                problems.append(f"{key}: query parameter {parameter['name']}")
        if "*" in known.body:
            continue
        for content in operation.get("requestBody", {}).get("content", {}).values():
            _, body_schema = resolve(document, content.get("schema", {}))
            for field in body_schema.get("properties", {}):
                if field not in known.body:
                    problems.append(f"{key}: body field {field}")
    return problems


def field_problems(document: Dict[str, Any]) -> List[str]:
    found: Dict[str, Set[str]] = {}
    for _, operation in customer_operations(document):
        for status, response in operation.get("responses", {}).items():
            if not status.startswith("2"):
                continue
            for content in response.get("content", {}).values():
                objects_in(document, content.get("schema", {}), None, found)
    problems: List[str] = []
    if "Generation" not in found or "Generation.urls" not in found:
        problems.append("the Generation record was not found in any response")
    for name, fields in sorted(found.items()):
        if name in LIST_ENVELOPES:
            missing = fields - LIST_ENVELOPES[name]
        elif name in RECORDS:
            missing = fields - {f.name for f in dataclasses.fields(RECORDS[name])}
        else:
            problems.append(f"{name}: an object the library has no record for")
            continue
        problems += [f"{name}.{field}: a field the library does not know" for field in sorted(missing)]
    return problems


def error_problems(document: Dict[str, Any]) -> List[str]:
    error = document["components"]["schemas"]["Error"]["properties"]["error"]
    problems = [f"error.{field}: unknown" for field in sorted(set(error["properties"]) - {"code", "message", "param"})]
    codes = set(error["properties"]["code"]["enum"])
    problems += [f"{code}: no error class" for code in sorted(codes - set(vidgate.errors.ERROR_CLASSES))]
    return problems


def all_problems(document: Dict[str, Any]) -> List[str]:
    return (
        operation_problems(document)
        + parameter_problems(document)
        + field_problems(document)
        + error_problems(document)
    )


@pytest.fixture(scope="module")
def document(proxy: Any) -> Dict[str, Any]:
    with vidgate.Client(api_key="", base_url=proxy.base_url) as anonymous:
        return anonymous.openapi()


def test_the_library_knows_every_customer_operation_field_and_code(
    document: Dict[str, Any],
) -> None:
    assert all_problems(document) == []


def test_every_listed_method_exists_on_both_clients() -> None:
    for operation in OPERATIONS.values():
        for client in (vidgate.Client(api_key="x"), vidgate.AsyncClient(api_key="x")):
            target: Any = client
            for part in operation.method.split("."):
                target = getattr(target, part)
            assert callable(target), operation.method


def test_the_check_fails_on_what_the_library_does_not_know(document: Dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    schemas = changed["components"]["schemas"]
    changed["paths"]["/usage"] = {"get": {"tags": ["account"], "responses": {"200": {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Usage"}}}}}}}
    schemas["Usage"] = {"type": "object", "properties": {"seconds": {"type": "integer"}}}
    schemas["Generation"]["properties"]["priority"] = {"type": "integer"}
    schemas["Generation"]["properties"]["urls"]["properties"]["stream"] = {"type": "string"}
    changed["paths"]["/generations"]["get"]["parameters"].append({"name": "since", "in": "query"})
    schemas["Error"]["properties"]["error"]["properties"]["code"]["enum"].append("quota_exceeded")
    del changed["paths"]["/account"]
    assert all_problems(changed) == [
        "GET /usage: an operation the library does not know",
        "GET /account: gone from the API",
        "GET /generations: query parameter since",
        "Generation.priority: a field the library does not know",
        "Generation.urls.stream: a field the library does not know",
        "Usage: an object the library has no record for",
        "quota_exceeded: no error class",
    ]


def test_the_operator_api_health_and_callbacks_are_not_customer_operations(
    document: Dict[str, Any],
) -> None:
    changed = copy.deepcopy(document)
    changed["components"]["securitySchemes"]["operator"] = {"type": "http", "scheme": "bearer"}
    unknown = {"type": "object", "properties": {"anything": {"type": "string"}}}
    respond = {"200": {"content": {"application/json": {"schema": unknown}}}}
    # Beside the customer API, in the document as it is (paths relative to
    # its /api/v1 server): operations of other tags or security schemes.
    changed["paths"]["/admin/accounts"] = {"post": {"tags": ["admin"], "responses": respond}}
    changed["paths"]["/operator/keys"] = {"get": {"security": [{"operator": []}], "responses": respond}}
    changed["paths"]["/health"] = {"get": {"tags": ["health"], "security": [], "responses": respond}}
    changed["paths"]["/readyz"] = {"get": {"security": [], "responses": respond}}
    # Another vendor's API inside /api/v1, and one with its own server.
    changed["paths"]["/videos/jobs"] = {"post": {"tags": ["openrouter-videos"], "responses": respond}}
    origin = changed["servers"][0]["url"].rsplit("/api/v1", 1)[0]
    changed["paths"]["/v1/clips"] = {"servers": [{"url": origin}], "get": {"responses": respond}}
    assert all_problems(changed) == []
    # And in a document rooted at the origin, every path absolute.
    rooted = copy.deepcopy(changed)
    rooted["servers"] = [{"url": origin}]
    rooted["paths"] = {
        path if "servers" in item else "/api/v1" + path: item for path, item in rooted["paths"].items()
    }
    rooted["paths"]["/admin/v1/accounts"] = {"get": {"responses": respond}}
    rooted["paths"]["/healthz"] = {"get": {"security": [], "responses": respond}}
    rooted["paths"]["/internal/cog/{generation_id}"] = {"post": {"security": [], "responses": respond}}
    assert all_problems(rooted) == []
    assert len(list(customer_operations(rooted))) == len(list(customer_operations(document)))
