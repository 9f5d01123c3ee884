//! A model's entry at one hosted provider, as the backends file gives it,
//! alone or in a failover: the provider its `backend` names (any
//! registered in `providers/`) and the entry's settings. The file's other
//! backends (`cog`, `failover`) are read by `backends_file.rs` the same
//! way, through `tagged` and `settings`.

use std::sync::LazyLock;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::model_config::HostedModelConfig;
use super::providers::{self, PROVIDERS, Provider};

/// A model's entry at one hosted provider.
#[derive(Debug)]
pub struct HostedEntry {
    pub provider: Provider,
    pub config: HostedModelConfig,
}

/// The names of the hosted providers, as serde's message for an unknown
/// one in a failover lists them.
static PROVIDER_NAMES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| PROVIDERS.iter().map(|provider| provider.name()).collect());

impl HostedEntry {
    /// The entry at the provider named `backend` with the settings
    /// `fields`, or `None` when no provider has that name.
    pub fn at<'de, D: Deserializer<'de>>(
        backend: &str,
        fields: Value,
    ) -> Result<Option<HostedEntry>, D::Error> {
        let Some(provider) = providers::provider_named(backend) else {
            return Ok(None);
        };
        let (shared, provider_settings) = split_provider_settings(fields);
        let mut config: HostedModelConfig = settings::<_, D>(shared)?;
        config.provider_settings = provider_settings;
        Ok(Some(HostedEntry { provider, config }))
    }
}

/// Takes the settings that a provider alone takes (fal's `platform_url`,
/// …) out of an entry's fields, so the shared ones are read as
/// `HostedModelConfig` (unknown fields refused) and the rest go to the
/// provider; one that belongs to another provider is refused by name when
/// the entry is checked (`providers::check_settings`).
fn split_provider_settings(fields: Value) -> (Value, Map<String, Value>) {
    let Value::Object(mut shared) = fields else {
        return (fields, Map::new());
    };
    let own = providers::own_setting_names()
        .filter_map(|name| Some((name.to_owned(), shared.remove(name)?)))
        .collect();
    (Value::Object(shared), own)
}

impl<'de> Deserialize<'de> for HostedEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (backend, fields) = tagged(deserializer)?;
        HostedEntry::at::<D>(&backend, fields)?
            .ok_or_else(|| D::Error::unknown_variant(&backend, PROVIDER_NAMES.as_slice()))
    }
}

/// An entry's `backend` field and the rest of its fields, read as serde
/// reads an internally tagged enum.
pub fn tagged<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(String, Value), D::Error> {
    let mut fields = Map::deserialize(deserializer)?;
    match fields.remove("backend") {
        Some(Value::String(backend)) => Ok((backend, Value::Object(fields))),
        Some(other) => Err(D::Error::custom(format!(
            "invalid type: {other}, expected the name of a backend"
        ))),
        None => Err(D::Error::missing_field("backend")),
    }
}

/// An entry's settings, read as their own type.
pub fn settings<'de, T: DeserializeOwned, D: Deserializer<'de>>(
    fields: Value,
) -> Result<T, D::Error> {
    T::deserialize(fields).map_err(D::Error::custom)
}
