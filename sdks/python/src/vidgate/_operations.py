"""The API operations this library covers, by method and path (relative to
``base_url``, path parameters written ``{}``; a trailing ``*`` stands for an
endpoint id ``vendor/model/mode``), with the client method that calls each,
the query parameters and the JSON or form fields of the body it knows
(``*``: any, as run and quote take the model's own input). The tests compare
it with the server's OpenAPI document, so an operation, parameter or field
added to the API fails them until the library knows it."""

from typing import Dict, NamedTuple, Tuple


class Operation(NamedTuple):
    method: str
    query: Tuple[str, ...] = ()
    body: Tuple[str, ...] = ()


OPERATIONS: Dict[str, Operation] = {
    "GET /models": Operation("models.list"),
    "GET /models/{}/{}": Operation("models.get"),
    "POST /quote/*": Operation("quote", body=("*",)),
    "POST /run/*": Operation("generations.create", body=("*",)),
    "GET /generations": Operation("generations.list", query=("limit", "cursor", "status", "model")),
    "GET /generations/{}": Operation("generations.get"),
    "GET /generations/{}/events": Operation("generations.stream"),
    "POST /generations/{}/cancel": Operation("generations.cancel"),
    "GET /generations/{}/webhook-deliveries": Operation("webhooks.deliveries"),
    "POST /generations/{}/webhook-deliveries/{}/retry": Operation("webhooks.retry_delivery"),
    "POST /account/webhook-secret/rotate": Operation("webhooks.rotate_secret"),
    "GET /account": Operation("account.get"),
    "POST /account/checkout": Operation("account.checkout", body=("amount_usd",)),
    "POST /uploads": Operation("uploads.create", body=("file",)),
    "POST /uploads/initiate": Operation("uploads.initiate", body=("content_type", "size_bytes")),
    "GET /openapi.json": Operation("openapi"),
}
