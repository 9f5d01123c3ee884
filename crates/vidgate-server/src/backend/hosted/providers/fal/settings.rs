//! The settings of a model's entry that only fal takes. They are written
//! in the entry beside the shared ones (`"platform_url": …` next to
//! `"api_url": …`), and the entry hands them to fal unread
//! (`HostedModelConfig::provider_settings`), so the shared model config
//! names no provider.

use serde::Deserialize;
use serde_json::Value;

use super::{DEFAULT_API_URL, DEFAULT_JWKS_URL, DEFAULT_SCHEMA_URL};
use crate::backend::hosted::model_config::{HostedModelConfig, check_provider_url};

/// The names of fal's own settings, as the backends file spells them.
pub const SETTING_NAMES: &[&str] = &["platform_url", "jwks_url", "schema_url", "webhook_user_id"];

/// fal's own settings of one model's entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FalSettings {
    /// The platform API (request listing).
    #[serde(default)]
    pub platform_url: Option<String>,
    /// Where fal publishes its webhook keys (a JWKS).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Where each endpoint's OpenAPI document is read by the live schema
    /// check (`?endpoint_id=` is added).
    #[serde(default)]
    pub schema_url: Option<String>,
    /// The operator's fal user id. fal signs every customer's webhooks with
    /// the same keys, naming the account in `X-Fal-Webhook-User-Id`; when
    /// this is set, a webhook naming another account is refused before
    /// anything else is read.
    #[serde(default)]
    pub webhook_user_id: Option<String>,
}

impl FalSettings {
    /// fal's settings of `config`'s entry, read from the fields the entry
    /// handed over.
    pub fn of(config: &HostedModelConfig) -> Result<FalSettings, String> {
        serde_json::from_value(Value::Object(config.provider_settings.clone()))
            .map_err(|error| error.to_string())
    }

    /// Refuses settings that cannot work: a URL that would carry the
    /// credential in the clear, a platform API without its queue, an empty
    /// user id.
    pub fn check(&self, config: &HostedModelConfig) -> Result<(), String> {
        for url in [&self.platform_url, &self.jwks_url, &self.schema_url]
            .into_iter()
            .flatten()
        {
            check_provider_url(url)?;
        }
        if self.platform_url.is_some() && config.api_url.is_none() {
            return Err("platform_url needs api_url too".into());
        }
        if self
            .webhook_user_id
            .as_deref()
            .is_some_and(|user_id| user_id.trim().is_empty())
        {
            return Err("webhook_user_id is empty".into());
        }
        Ok(())
    }

    /// The platform API, fal's own unless the entry names another.
    pub fn platform_url(&self) -> &str {
        self.platform_url.as_deref().unwrap_or(DEFAULT_API_URL)
    }

    /// Where fal's webhook keys are read.
    pub fn jwks_url(&self) -> &str {
        self.jwks_url.as_deref().unwrap_or(DEFAULT_JWKS_URL)
    }

    /// Where the endpoints' OpenAPI documents are read.
    pub fn schema_url(&self) -> &str {
        self.schema_url.as_deref().unwrap_or(DEFAULT_SCHEMA_URL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `SETTING_NAMES` is what the entry hands fal, so every name in it
    /// must be a field of `FalSettings`, and every field must be in it.
    #[test]
    fn every_setting_name_is_a_field_and_every_field_is_named() {
        let mut settings = serde_json::Map::new();
        for name in SETTING_NAMES {
            settings.insert((*name).to_owned(), json!("https://fal.example/x"));
        }
        let read: FalSettings = serde_json::from_value(Value::Object(settings)).unwrap();
        assert!(read.platform_url.is_some());
        assert!(read.jwks_url.is_some());
        assert!(read.schema_url.is_some());
        assert!(read.webhook_user_id.is_some());
    }
}
