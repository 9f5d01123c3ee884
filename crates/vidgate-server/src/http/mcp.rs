//! The MCP server at `/mcp` (Model Context Protocol over Streamable HTTP,
//! issue 53), for agents that call tools: `list_models`, `quote`,
//! `create_generation`, `get_generation`, `cancel_generation` and
//! `list_generations` (`dialects/mcp_tools.rs`), each answering the JSON
//! `/api/v1` answers, as structured content and as text.
//!
//! The protocol is `rmcp`'s (the official Rust SDK), served as a tower
//! service behind the same key check and rate limit as `/api/v1`, so a
//! request without a key is refused 401 before it reaches the protocol. It
//! runs stateless with JSON answers: no session lives on one node, so any
//! node of a deployment answers any request. Its check of the `Host`
//! header (against DNS rebinding of unauthenticated local servers) is off,
//! since every request here carries an API key.

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::response::IntoResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::{ApiError, AppState, generations, quote};
use crate::application::submit::{Submission, submit};
use crate::dialects::Invalid;
use crate::dialects::mcp_tools;
use crate::representation::generation_json;
use crate::store::{Caller, Source};

/// The routes: `/mcp` behind the key check.
pub fn routes(state: &AppState) -> Router<AppState> {
    let tools_state = state.clone();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || {
            Ok(VidgateTools {
                state: tools_state.clone(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            super::authenticate,
        ))
}

/// One request's tools, with the application state.
struct VidgateTools {
    state: AppState,
}

impl ServerHandler for VidgateTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("vidgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Video generation: list_models, quote a request, create_generation, then poll get_generation until it is succeeded, failed or canceled.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = mcp_tools::tools()
            .into_iter()
            .map(|tool| Tool::new(tool.name, tool.description, tool.input_schema))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the caller is not known", None))?;
        let arguments = request.arguments.unwrap_or_default();
        let answer = self.run(&request.name, &caller, &arguments).await;
        Ok(match answer {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => CallToolResult::structured_error(error_json(error).await),
        }
        .into())
    }
}

impl VidgateTools {
    /// Runs one tool for `caller`: the JSON `/api/v1` answers.
    async fn run(
        &self,
        tool: &str,
        caller: &Caller,
        arguments: &Map<String, Value>,
    ) -> Result<Value, ApiError> {
        let state = &self.state;
        match tool {
            "list_models" => Ok(json!({
                "object": "list",
                "data": state
                    .catalog
                    .models()
                    .iter()
                    .map(|model| model.public_json(&state.api_base))
                    .collect::<Vec<_>>(),
            })),
            "quote" => {
                let (endpoint, body) =
                    mcp_tools::endpoint_and_input(&state.catalog, arguments).map_err(invalid)?;
                let requester = vidgate_media::Requester::Account {
                    id: caller.account_id.clone(),
                };
                let record = quote::price(state, &requester, endpoint, &body).await?;
                Ok(serde_json::to_value(record).map_err(ApiError::internal)?)
            }
            "create_generation" => {
                let (endpoint, body) =
                    mcp_tools::endpoint_and_input(&state.catalog, arguments).map_err(invalid)?;
                let submission = Submission {
                    body: &body,
                    idempotency_key: arguments.get("idempotency_key").and_then(Value::as_str),
                    idempotency_request: &body,
                    source: Source::Mcp,
                };
                let (generation, _) = submit(state, caller, endpoint, submission).await?;
                Ok(generation_json(&generation, &state.api_base))
            }
            "get_generation" => {
                let id = mcp_tools::generation_id(arguments).map_err(invalid)?;
                let generation = state
                    .store
                    .generations()
                    .get(&caller.account_id, id)
                    .await?
                    .ok_or_else(|| {
                        ApiError::NotFound(format!("No generation {id:?} exists in this account."))
                    })?;
                Ok(generation_json(&generation, &state.api_base))
            }
            "cancel_generation" => {
                let id = mcp_tools::generation_id(arguments).map_err(invalid)?;
                let generation = generations::cancel_generation(state, caller, id).await?;
                Ok(generation_json(&generation, &state.api_base))
            }
            "list_generations" => {
                let query = Value::Object(mcp_tools::list_query(arguments));
                let parameters =
                    serde_json::from_value(query).map_err(|error| ApiError::InvalidRequest {
                        message: format!("The arguments could not be read: {error}"),
                        param: None,
                    })?;
                let page = generations::list_page(state, caller, parameters).await?;
                serde_json::from_slice(&page).map_err(ApiError::internal)
            }
            other => Err(ApiError::NotFound(format!(
                "No tool {other:?}: the tools are list_models, quote, create_generation, get_generation, cancel_generation and list_generations."
            ))),
        }
    }
}

fn invalid(invalid: Invalid) -> ApiError {
    ApiError::InvalidRequest {
        message: invalid.message,
        param: invalid.param,
    }
}

/// The JSON body `/api/v1` answers for `error` (`{"error": {code, message,
/// param}}`), with its status beside it.
async fn error_json(error: ApiError) -> Value {
    let response = error.into_response();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let mut body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    body["status"] = Value::from(status);
    body
}
