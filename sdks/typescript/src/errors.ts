/**
 * Typed errors: one class per error code of the API (SPEC.md section 7).
 * Every refused request raises an {@link APIError} subclass carrying the
 * answer's `status`, `code`, `message`, `param` (the request field at fault)
 * and `requestId` (the `x-request-id` header, to quote when asking for
 * support). Nothing is charged for a refused request.
 */

/** The base of every error this library throws. */
export class VidgateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * The request got no HTTP answer after every retry. A submit that ends here
 * may or may not have been accepted: list recent generations, or retry with
 * the same `idempotencyKey`, before submitting again.
 */
export class APIConnectionError extends VidgateError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message);
    if (options?.cause !== undefined) (this as { cause?: unknown }).cause = options.cause;
  }
}

/** The request timed out after every retry. */
export class APITimeoutError extends APIConnectionError {}

/** `generations.wait` gave up; the generation goes on (`generation` is its latest state). */
export class WaitTimeoutError extends VidgateError {
  constructor(message: string, readonly generation: import("./types.js").Generation) {
    super(message);
  }
}

/** `run` waited for a generation that ended failed or canceled (its hold was refunded). */
export class GenerationFailedError extends VidgateError {
  constructor(message: string, readonly generation: import("./types.js").Generation) {
    super(message);
  }
}

/** A webhook's signature, timestamp or headers did not check out. */
export class WebhookVerificationError extends VidgateError {}

export interface APIErrorDetails {
  status: number;
  code: string;
  param?: string | undefined;
  requestId?: string | undefined;
  body?: unknown;
}

/** The API refused the request with an error answer. */
export class APIError extends VidgateError {
  readonly status: number;
  readonly code: string;
  readonly param: string | undefined;
  readonly requestId: string | undefined;
  readonly body: unknown;

  /** `message` is the API's own text; the class name says the code. */
  constructor(message: string, details: APIErrorDetails) {
    super(message);
    this.status = details.status;
    this.code = details.code;
    this.param = details.param;
    this.requestId = details.requestId;
    this.body = details.body;
  }
}

/** 400: the request is invalid; `param` names the field. */
export class InvalidRequestError extends APIError {}
/** 401: the API key is missing, malformed, unknown or revoked. */
export class AuthenticationError extends APIError {}
/** 402: the balance does not cover the price. Nothing is held. */
export class InsufficientBalanceError extends APIError {}
/** 403: a dashboard session's change without its CSRF token. */
export class ForbiddenError extends APIError {}
/** 404: no such endpoint, model, file or generation in this account. */
export class NotFoundError extends APIError {}
/** 405: the route exists, but not with this method. */
export class MethodNotAllowedError extends APIError {}
/** 409: canceling a running or finished generation, or an idempotency key reused with another body. */
export class ConflictError extends APIError {}
/** 410: a generation's clip or an upload deleted after the retention time. */
export class GoneError extends APIError {}
/** 413: the body or the uploaded file is over the limit. */
export class PayloadTooLargeError extends APIError {}
/** 429: over the request rate or the concurrent generations (after retries). */
export class RateLimitedError extends APIError {}
/** 500: a failure on the service side (after retries). */
export class InternalServerError extends APIError {}
/** 501: this deployment has no presigned uploads; use multipart. */
export class DirectUploadUnavailableError extends APIError {}
/** 502: the model refused the job (after retries). */
export class UpstreamError extends APIError {}
/** 503: the model is not accepting generations now (after retries). */
export class ModelUnavailableError extends APIError {}

/** The class of each error code; an unknown code becomes a plain {@link APIError}. */
export const ERROR_CLASSES: Readonly<Record<string, typeof APIError>> = {
  invalid_request: InvalidRequestError,
  unauthorized: AuthenticationError,
  insufficient_balance: InsufficientBalanceError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  conflict: ConflictError,
  gone: GoneError,
  payload_too_large: PayloadTooLargeError,
  rate_limited: RateLimitedError,
  internal_error: InternalServerError,
  direct_upload_unavailable: DirectUploadUnavailableError,
  upstream_error: UpstreamError,
  model_unavailable: ModelUnavailableError,
};

/** The typed error for an error answer, whatever its body (a proxy may answer HTML). */
export function errorFromResponse(status: number, body: unknown, requestId: string | undefined): APIError {
  const error =
    typeof body === "object" && body !== null && typeof (body as { error?: unknown }).error === "object"
      ? ((body as { error: Record<string, unknown> }).error ?? {})
      : {};
  const code = typeof error["code"] === "string" ? error["code"] : `http_${status}`;
  const message = typeof error["message"] === "string" ? error["message"] : `The API answered HTTP ${status}.`;
  const param = typeof error["param"] === "string" ? error["param"] : undefined;
  const ErrorClass = ERROR_CLASSES[code] ?? APIError;
  return new ErrorClass(message, { status, code, param, requestId, body });
}
